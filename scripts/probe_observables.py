"""The built-in probe types and the observations they declare, for the generator scripts.

Observations are read from each probe class's ``observables`` declaration
(:class:`alivemcp.probe.Observable`: name, help, labels), loaded through the registry exactly
as the daemon loads it. The unit is the name's suffix (Prometheus naming, which the
declaration's docstring requires), so it is written once, in the name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from alivemcp.probe import Observable  # noqa: E402

BUILTIN_MODULE_PREFIX = "probes."

__all__ = ["builtin_entry_points", "declared_observables", "unit_of"]

#: Name suffix -> what a reader calls the unit.
_UNITS = {
    "_seconds": "seconds",
    "_bytes": "bytes",
    "_ratio": "ratio (0-1)",
    "_messages": "messages",
    "_info": "info (always 1; the labels carry it)",
}


def builtin_entry_points() -> dict[str, str]:
    """Probe type -> ``module:Class`` for the built-ins (pyproject's entry points)."""
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    group = data["project"]["entry-points"]["alivemcp.probes"]
    return {
        name: target
        for name, target in sorted(group.items())
        if target.startswith(BUILTIN_MODULE_PREFIX)
    }


def declared_observables() -> dict[str, Sequence[Observable]]:
    """Built-in probe type -> its ``observables`` declaration, in declaration order.

    Raises when a built-in does not load or declares nothing: the reference, the dashboard
    and the metrics' help text all rest on the declaration.
    """
    from alivemcp.config.registry import registry

    reg = registry()
    out: dict[str, Sequence[Observable]] = {}
    for name in builtin_entry_points():
        declared = reg.get(name).observables
        if declared is None:
            raise LookupError(f"built-in probe type {name} declares no observables")
        out[name] = declared
    return out


def unit_of(name: str) -> str:
    """The unit an observation's name says it has (a plain count when it has no suffix)."""
    for suffix, unit in _UNITS.items():
        if name.endswith(suffix):
            return unit
    return "count"
