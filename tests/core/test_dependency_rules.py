"""The layers' dependency rules, read from the source (every import, also inside functions and
``if TYPE_CHECKING:`` blocks):

- probes (``probes/``) depend on the engine contract and plumbing only: ``alivemcp.probe``,
  ``alivemcp.errors``, ``alivemcp.verdict``, ``alivemcp.plumbing.*``, the standard library,
  pydantic and other ``probes`` modules. Client libraries (botocore, aiobotocore, aiokafka,
  httpx, aiohttp) are plumbing's business: it translates their errors once, into ``ProbeError``.
- the engine (``alivemcp/``) never imports ``probes``: probe types reach it through the
  ``alivemcp.probes`` entry points only, as a third-party plugin does.
- the consumers of results (``alivemcp/alerting/``, ``alivemcp/metrics.py``,
  ``alivemcp/history/``) never import probe internals: no ``probes`` module, no probe plumbing
  (``alivemcp.plumbing``) and no client library a probe target is reached with; they see
  ``ProbeResult`` and the declarations in the contract. (The alerting receivers' own httpx
  client is theirs, not a probe's.)

A failure lists every violation as ``file:line imports module``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENT_LIBRARIES = ("botocore", "aiobotocore", "boto3", "aiokafka", "httpx", "aiohttp")
PROBE_MAY_IMPORT = ("alivemcp.probe", "alivemcp.errors", "alivemcp.verdict", "alivemcp.plumbing",
                    "pydantic", "probes")
RESULT_CONSUMERS = ("alivemcp/alerting", "alivemcp/metrics.py", "alivemcp/history")
PROBE_INTERNALS = ("probes", "alivemcp.plumbing", "botocore", "aiobotocore", "boto3", "aiokafka")


@dataclass(frozen=True)
class Import:
    """One import statement: ``module`` is absolute; ``names`` are ``module.name`` for each
    name of a ``from`` import (any of which may itself be a module: ``from alivemcp import
    plumbing``)."""

    path: Path
    line: int
    module: str
    names: tuple[str, ...] = ()

    def show(self, name: str, root: Path = REPO) -> str:
        return f"{self.path.relative_to(root)}:{self.line} imports {name}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = REPO) -> Iterator[Import]:
    """Every import in ``path`` (a file under ``root``), relative ones made absolute."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)),
                   key=lambda n: n.lineno)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base != "__future__":
                yield Import(path, node.lineno, base,
                             tuple(f"{base}.{alias.name}" for alias in node.names))


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def python_files(root: Path, *places: str) -> list[Path]:
    files: list[Path] = []
    for place in places:
        path = root / place
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def probe_violations(root: Path = REPO) -> list[str]:
    """Imports under ``probes/`` of anything but the contract, plumbing, stdlib, pydantic and
    other probes modules."""

    def allowed(name: str) -> bool:
        return name.split(".")[0] in sys.stdlib_module_names or within(name, PROBE_MAY_IMPORT)

    found: list[str] = []
    for path in python_files(root, "probes"):
        for imp in imports(path, root):
            if allowed(imp.module):
                continue
            # `from alivemcp import probe, config`: probe is an allowed module, config is
            # not; `from botocore.exceptions import A, B` is one violation, the module.
            bad = [n for n in imp.names if not allowed(n)]
            if len(bad) == len(imp.names):
                bad = [imp.module]
            for name in bad:
                hint = (" (a client library: reach it through alivemcp.plumbing)"
                        if name.split(".")[0] in CLIENT_LIBRARIES else "")
                found.append(imp.show(name, root) + hint)
    return found


def forbidden_imports(root: Path, places: tuple[str, ...], forbidden: tuple[str, ...]
                      ) -> list[str]:
    """Imports in ``places`` of a module within ``forbidden``."""
    return [imp.show(name, root)
            for path in python_files(root, *places)
            for imp in imports(path, root)
            for name in (imp.module, *imp.names) if within(name, forbidden)]


def test_probes_import_only_the_contract_plumbing_stdlib_and_pydantic() -> None:
    violations = probe_violations()
    assert not violations, "probes/ must reach targets through alivemcp.plumbing:\n" + "\n".join(
        violations)


def test_the_engine_never_imports_probes() -> None:
    violations = forbidden_imports(REPO, ("alivemcp",), ("probes",))
    assert not violations, "alivemcp/ finds probes through entry points only:\n" + "\n".join(
        violations)


def test_result_consumers_never_import_probe_internals() -> None:
    violations = forbidden_imports(REPO, RESULT_CONSUMERS, PROBE_INTERNALS)
    assert not violations, ("alerting, metrics and history see results, not probe "
                            "internals:\n" + "\n".join(violations))


def test_the_rules_see_every_kind_of_import_and_name_each_violation(tmp_path: Path) -> None:
    """The reader itself, on a throw-away tree: relative, nested, TYPE_CHECKING and
    ``from package import module`` imports are all seen and named with their lines."""
    (tmp_path / "probes" / "mcp").mkdir(parents=True)
    (tmp_path / "alivemcp" / "alerting").mkdir(parents=True)
    (tmp_path / "probes" / "mcp" / "bad.py").write_text(
        "from __future__ import annotations\n"
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "from pydantic import Field\n"
        "from alivemcp import probe, config\n"
        "from alivemcp.plumbing.http import HttpClients\n"
        "from .wire import encode\n"
        "from .. import mcp_endpoint\n"
        "if TYPE_CHECKING:\n"
        "    import httpx\n"
        "async def late() -> None:\n"
        "    from botocore.exceptions import ClientError\n"
        "import yaml\n", encoding="utf-8")
    (tmp_path / "alivemcp" / "alerting" / "leak.py").write_text(
        "from alivemcp import plumbing\nimport alivemcp.probe\nfrom probes.mcp import wire\n",
        encoding="utf-8")
    assert probe_violations(tmp_path) == [
        "probes/mcp/bad.py:5 imports alivemcp.config",
        "probes/mcp/bad.py:10 imports httpx (a client library: reach it through "
        "alivemcp.plumbing)",
        "probes/mcp/bad.py:12 imports botocore.exceptions (a client library: reach it through "
        "alivemcp.plumbing)",
        "probes/mcp/bad.py:13 imports yaml",
    ]
    assert forbidden_imports(tmp_path, ("alivemcp",), ("probes",)) == [
        "alivemcp/alerting/leak.py:3 imports probes.mcp",
        "alivemcp/alerting/leak.py:3 imports probes.mcp.wire",
    ]
    assert forbidden_imports(tmp_path, ("alivemcp/alerting",), PROBE_INTERNALS) == [
        "alivemcp/alerting/leak.py:1 imports alivemcp.plumbing",
        "alivemcp/alerting/leak.py:3 imports probes.mcp",
        "alivemcp/alerting/leak.py:3 imports probes.mcp.wire",
    ]
