"""The layers' dependency rules, read from the source (every import, also inside functions and
``if TYPE_CHECKING:`` blocks):

- probes (``probes/``) depend on the engine contract and plumbing only: ``alivemcp.probe``,
  ``alivemcp.errors``, ``alivemcp.verdict``, ``alivemcp.plumbing.*``, the standard library,
  pydantic and other ``probes`` modules. Client libraries (botocore, aiobotocore, aiokafka,
  httpx, aiohttp) are plumbing's business: it translates their errors once, into ``ProbeError``.
- the engine (``alivemcp/``) never imports ``probes``: probe types reach it through the
  ``alivemcp.probes`` entry points only, as a third-party plugin does.
- the consumers of results (``alivemcp/alerting/``, ``alivemcp/web/metrics.py``,
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
PROBE_MAY_IMPORT = (
    "alivemcp.probe",
    "alivemcp.errors",
    "alivemcp.verdict",
    "alivemcp.plumbing",
    "pydantic",
    "probes",
)
RESULT_CONSUMERS = (
    "alivemcp/alerting",
    "alivemcp/web/metrics.py",
    "alivemcp/history",
    "alivemcp/toolsurface",
)
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
    nodes = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)),
        key=lambda n: n.lineno,
    )
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
                yield Import(
                    path, node.lineno, base, tuple(f"{base}.{alias.name}" for alias in node.names)
                )


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
                hint = (
                    " (a client library: reach it through alivemcp.plumbing)"
                    if name.split(".")[0] in CLIENT_LIBRARIES
                    else ""
                )
                found.append(imp.show(name, root) + hint)
    return found


def forbidden_imports(root: Path, places: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """Imports in ``places`` of a module within ``forbidden``."""
    return [
        imp.show(name, root)
        for path in python_files(root, *places)
        for imp in imports(path, root)
        for name in (imp.module, *imp.names)
        if within(name, forbidden)
    ]


def test_probes_import_only_the_contract_plumbing_stdlib_and_pydantic() -> None:
    violations = probe_violations()
    assert not violations, "probes/ must reach targets through alivemcp.plumbing:\n" + "\n".join(
        violations
    )


def test_the_engine_never_imports_probes() -> None:
    violations = forbidden_imports(REPO, ("alivemcp",), ("probes",))
    assert not violations, "alivemcp/ finds probes through entry points only:\n" + "\n".join(
        violations
    )


def test_result_consumers_never_import_probe_internals() -> None:
    violations = forbidden_imports(REPO, RESULT_CONSUMERS, PROBE_INTERNALS)
    assert not violations, (
        "alerting, metrics and history see results, not probe internals:\n" + "\n".join(violations)
    )


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
        "import yaml\n",
        encoding="utf-8",
    )
    (tmp_path / "alivemcp" / "alerting" / "leak.py").write_text(
        "from alivemcp import plumbing\nimport alivemcp.probe\nfrom probes.mcp import wire\n",
        encoding="utf-8",
    )
    assert probe_violations(tmp_path) == [
        "probes/mcp/bad.py:5 imports alivemcp.config",
        "probes/mcp/bad.py:10 imports httpx (a client library: reach it through alivemcp.plumbing)",
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


# --------------------------------------------------------------------------------------------
# The layers of alivemcp/ (docs/architecture.md draws them)

#: Lowest first. A module may import modules of its own layer and of the layers below, never
#: one above (also lazily, also for type checking only). A module is in the layer of the
#: longest name here that is it or its package; "alivemcp" names the package's face alone.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The probe contract: the package's face (alivemcp.probe is what plugins import).
    (
        "contract",
        (
            "alivemcp",
            "alivemcp._moved",
            "alivemcp.errors",
            "alivemcp.durations",
            "alivemcp.outcome",
            "alivemcp.verdict",
            "alivemcp.resultsview",
            "alivemcp.surface",
            "alivemcp.probe",
        ),
    ),
    ("hygiene", ("alivemcp.hygiene",)),
    ("plumbing", ("alivemcp.plumbing",)),
    # Each consumer package owns its section of the config: those modules are config.
    (
        "config",
        (
            "alivemcp.config",
            "alivemcp.alerting.config",
            "alivemcp.alerting.matchers",
            "alivemcp.history.config",
            "alivemcp.cluster.config",
            "alivemcp.discovery.config",
        ),
    ),
    # Checks made from lists kept elsewhere (registries, service discovery), while running.
    ("discovery", ("alivemcp.discovery",)),
    ("engine", ("alivemcp.engine",)),
    (
        "consumers",
        ("alivemcp.alerting", "alivemcp.history", "alivemcp.cluster", "alivemcp.toolsurface"),
    ),
    ("web", ("alivemcp.web",)),
    ("app", ("alivemcp.app",)),
    ("cli", ("alivemcp.__main__", "alivemcp.cli", "alivemcp.testbed")),
)


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer (None: in no layer)."""
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for index, (_name, names) in enumerate(LAYERS):
        for name in names:
            matches = module == name if name == "alivemcp" else within(module, (name,))
            if matches and (best is None or len(name) > best[0]):
                best = (len(name), index)
    return None if best is None else best[1]


def _alivemcp_targets(imp: Import, known: set[str]) -> list[str]:
    """The alivemcp modules an import loads: ``from a import b`` loads ``a.b`` when that is a
    module, and ``a`` otherwise."""
    if not within(imp.module, ("alivemcp",)):
        return []
    targets = [n for n in imp.names if n in known]
    return targets if targets and len(targets) == len(imp.names) else [imp.module, *targets]


def _packages_above(targets: list[str], importer: str, known: set[str]) -> list[str]:
    """The packages whose ``__init__`` an import runs first (importing
    ``alivemcp.history.config`` runs ``alivemcp/history/__init__.py``), but for the importer's
    own packages: those are loaded before the importer is."""
    own = {
        importer,
        *(".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 1)),
    }
    above = {
        ".".join(parts[:i])
        for name in targets
        for parts in [name.split(".")]
        for i in range(2, len(parts))
    }
    return sorted(p for p in above if p in known and p not in own and p not in targets)


def module_graph(root: Path = REPO) -> tuple[dict[str, set[str]], list[str]]:
    """Every alivemcp module's imports of alivemcp modules, and the layer violations. An
    import also loads the packages above the module it names: a package ``__init__`` counts
    as the highest layer of what it imports itself (one that imports nothing is no layer's)."""
    files = python_files(root, "alivemcp")
    known = {_module_name(p, root) for p in files}
    graph: dict[str, set[str]] = {m: set() for m in known}
    violations: list[str] = []
    implicit: list[tuple[Import, str, str]] = []  # (import, importer, package above)
    for path in files:
        module = _module_name(path, root)
        own = layer_of(module)
        if own is None:
            violations.append(f"{path.relative_to(root)} is in no layer: add it to LAYERS")
            continue
        for imp in imports(path, root):
            targets = _alivemcp_targets(imp, known)
            for target in targets:
                if target not in known:
                    violations.append(
                        f"{imp.show(target, root)}, a module that does not "
                        "exist (moved? see alivemcp/_moved.py)"
                    )
                    continue
                graph[module].add(target)
                theirs = layer_of(target)
                if theirs is not None and theirs > own:
                    violations.append(
                        f"{imp.show(target, root)} ({LAYERS[own][0]} -> "
                        f"{LAYERS[theirs][0]}, a layer above)"
                    )
            for package in _packages_above([t for t in targets if t in known], module, known):
                graph[module].add(package)
                implicit.append((imp, module, package))
    for imp, module, package in implicit:
        own = layer_of(module)
        loads = [layer_of(t) for t in graph[package]]
        theirs = max((layer for layer in loads if layer is not None), default=None)
        if own is not None and theirs is not None and theirs > own:
            violations.append(
                f"{imp.show(package, root)} (its __init__ loads the {LAYERS[theirs][0]} "
                f"layer: {LAYERS[own][0]} -> {LAYERS[theirs][0]}, a layer above)"
            )
    return graph, violations


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (its strongly connected components of two or more
    modules, or a module importing itself), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_a_layer_above_its_own() -> None:
    _graph, violations = module_graph()
    assert not violations, "imports against the layer order (docs/architecture.md):\n" + (
        "\n".join(violations)
    )


def test_no_import_cycles_lazy_ones_included() -> None:
    graph, _violations = module_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_layer_rules_see_back_edges_and_cycles(tmp_path: Path) -> None:
    """On a throw-away tree: an engine module importing the web layer for type checking only,
    and two contract modules importing each other lazily."""
    pkg = tmp_path / "alivemcp"
    for sub in ("engine", "web"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "engine" / "scheduler.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from alivemcp.web.server import Server\n",
        encoding="utf-8",
    )
    (pkg / "web" / "server.py").write_text(
        "from alivemcp.engine import scheduler\n", encoding="utf-8"
    )
    (pkg / "probe.py").write_text(
        "def f() -> None:\n    from alivemcp import verdict\n", encoding="utf-8"
    )
    (pkg / "verdict.py").write_text("from alivemcp.probe import f\n", encoding="utf-8")
    (pkg / "stray.py").write_text("", encoding="utf-8")
    graph, violations = module_graph(tmp_path)
    assert violations == [
        "alivemcp/engine/scheduler.py:3 imports alivemcp.web.server (engine -> web, a layer above)",
        "alivemcp/stray.py is in no layer: add it to LAYERS",
    ]
    assert cycles(graph) == [
        ["alivemcp.engine.scheduler", "alivemcp.web.server"],
        ["alivemcp.probe", "alivemcp.verdict"],
    ]


def test_the_old_module_paths_are_the_moved_modules_and_nothing_here_uses_them() -> None:
    """0.1's paths still import (the same module object, with a DeprecationWarning); the
    project's own code, tests and tools use the new ones."""
    import importlib
    import warnings

    from alivemcp._moved import MOVED

    for old, new in MOVED.items():
        assert (REPO / (new.replace(".", "/") + ".py")).is_file(), new
        assert not (REPO / (old.replace(".", "/") + ".py")).exists(), old
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sys.modules.pop(old, None)
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert module.__name__ == new
        assert any(
            issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught
        ), old
    users = forbidden_imports(
        REPO, ("alivemcp", "probes", "tests", "benchmarks", "scripts"), tuple(MOVED)
    )
    assert not users, "use the new module paths:\n" + "\n".join(users)


def test_an_import_runs_the_packages_above_it(tmp_path: Path) -> None:
    """A config module importing ``alivemcp.history.config`` runs ``alivemcp/history/__init__``
    first: when that loads the history store (a consumer), the config layer has loaded a
    layer above it, and a store module that imports the config layer closes a cycle."""
    pkg = tmp_path / "alivemcp"
    for sub in ("config", "history"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "config" / "__init__.py").write_text(
        "from alivemcp.history.config import HistoryConfig\n", encoding="utf-8"
    )
    (pkg / "history" / "__init__.py").write_text(
        "from alivemcp.history.store import HistoryStore\n", encoding="utf-8"
    )
    (pkg / "history" / "config.py").write_text("HistoryConfig = int\n", encoding="utf-8")
    (pkg / "history" / "store.py").write_text(
        "from alivemcp import config\nHistoryStore = int\n", encoding="utf-8"
    )
    graph, violations = module_graph(tmp_path)
    assert violations == [
        "alivemcp/config/__init__.py:1 imports alivemcp.history (its __init__ loads the "
        "consumers layer: config -> consumers, a layer above)"
    ]
    assert cycles(graph) == [["alivemcp.config", "alivemcp.history", "alivemcp.history.store"]]
