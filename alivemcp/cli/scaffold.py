"""``alivemcp new-probe NAME``: a new probe type, as a small installable plugin project.

The project is written from the templates in ``alivemcp/cli/scaffold_template/`` (shipped inside
the package): one probe module (params, declared observations, a ``probe()`` that uses the
plumbing and builds its verdict with ``Findings``), its entry point in the ``alivemcp.probes``
group, a test against a real HTTP server on 127.0.0.1, an IAM policy stub and a README.
``pip install -e '.[test]' && pytest`` in it passes as generated. ``docs/writing-a-probe.md``
explains how to make it one's own.

Templates are ``string.Template`` text (``${probe}``, ``${klass}``...; ``$$`` is a dollar sign)
with a ``.tmpl`` suffix, so that no tool mistakes them for the package's own modules; the path
parts ``__package__`` and ``__probe__`` become the package and probe names.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template

from alivemcp import __version__

__all__ = ["TEMPLATE_DIR", "ProjectNames", "ScaffoldError", "new_probe", "run_new_probe"]

TEMPLATE_DIR = Path(__file__).with_name("scaffold_template")
_TEMPLATE_SUFFIX = ".tmpl"
#: A probe type name: what a check's ``probe:`` says, a module name, part of a package name.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


class ScaffoldError(ValueError):
    """The name or the directory cannot be used; nothing was written."""


@dataclass(frozen=True, slots=True)
class ProjectNames:
    """Every name the templates use, derived from the probe type's name."""

    probe: str  # kinesis_freshness: the probe type, and its module
    package: str  # alivemcp_kinesis_freshness
    project: str  # alivemcp-kinesis-freshness (the distribution)
    klass: str  # KinesisFreshness (+ "Probe", "Params")
    alivemcp_version: str

    @classmethod
    def for_probe(cls, name: str) -> ProjectNames:
        if not _NAME.fullmatch(name) or "__" in name or name.endswith("_"):
            raise ScaffoldError(
                f"probe type name {name[:60]!r} must be lower_snake_case: a lower-case letter, "
                "then letters, digits and single underscores (at most 32 characters)"
            )
        release = __version__ if __version__ != "0.0.0" else "0.1.0"
        return cls(
            probe=name,
            package=f"alivemcp_{name}",
            project="alivemcp-" + name.replace("_", "-"),
            klass="".join(part.capitalize() for part in name.split("_")),
            alivemcp_version=release,
        )


def new_probe(name: str, directory: Path | None = None) -> list[Path]:
    """Write the project for probe type ``name`` into ``directory`` (default
    ``./alivemcp-<name>``), which must not exist or be empty. Returns the files written."""
    names = ProjectNames.for_probe(name)
    target = Path(directory) if directory is not None else Path(names.project)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} already exists and is not an empty directory")
    values = asdict(names)
    planned: list[tuple[Path, str]] = []
    for template in sorted(TEMPLATE_DIR.rglob(f"*{_TEMPLATE_SUFFIX}")):
        relative = template.relative_to(TEMPLATE_DIR).as_posix()[: -len(_TEMPLATE_SUFFIX)]
        relative = relative.replace("__package__", names.package).replace("__probe__", names.probe)
        text = Template(template.read_text(encoding="utf-8")).substitute(values)
        planned.append((target / relative, text))
    if not planned:
        raise ScaffoldError(f"no templates in {TEMPLATE_DIR}: the installation is incomplete")
    for path, text in planned:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return [path for path, _ in planned]


def run_new_probe(name: str, directory: Path | None = None) -> int:
    """The ``alivemcp new-probe NAME [--dir DIR]`` command: 0 when written, 2 otherwise."""
    try:
        root = (
            Path(directory) if directory is not None else Path(ProjectNames.for_probe(name).project)
        )
        written = new_probe(name, root)
    except (ScaffoldError, OSError) as exc:
        print(f"new-probe: {exc}", file=sys.stderr)
        return 2
    print(f"created probe type {name} in {root}:")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(
        f"\nnext:\n  cd {root}\n  pip install -e '.[test]'   # registers {name} next to "
        "alivemcp\n  pytest\n  alivemcp probes            # lists it with its params"
    )
    return 0
