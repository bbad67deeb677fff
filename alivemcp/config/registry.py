"""The probe-type registry: the ``alivemcp.probes`` entry-point group, and nothing else.

Built-in probes are registered in ``pyproject.toml`` exactly as a third-party package would
register its own, so there is one list of names. A plugin that fails to import does not take
the daemon down: its name is reported with the import error, and only checks that use it fail
validation.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from alivemcp.probe import Probe

__all__ = ["ENTRY_POINT_GROUP", "ProbeTypeError", "Registry", "registry"]

ENTRY_POINT_GROUP = "alivemcp.probes"


class ProbeTypeError(LookupError):
    """A probe type name that is not registered, or whose plugin failed to load."""


@dataclass(frozen=True, slots=True)
class _Broken:
    target: str
    error: str


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, type[Probe[Any]]] = {}
        self._broken: dict[str, _Broken] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                cls = ep.load()
            except Exception as exc:  # a broken plugin must not break the others
                self._broken[ep.name] = _Broken(ep.value, f"{type(exc).__name__}: {exc}")
                continue
            if not (isinstance(cls, type) and issubclass(cls, Probe)):
                self._broken[ep.name] = _Broken(ep.value, "entry point is not a Probe subclass")
                continue
            self._types[ep.name] = cls

    def names(self) -> list[str]:
        return sorted(self._types)

    def broken(self) -> dict[str, str]:
        return {name: f"{b.target}: {b.error}" for name, b in sorted(self._broken.items())}

    def get(self, name: str) -> type[Probe[Any]]:
        cls = self._types.get(name)
        if cls is not None:
            return cls
        if name in self._broken:
            raise ProbeTypeError(f"probe type {name!r} failed to load ({self._broken[name].error})")
        hint = difflib.get_close_matches(name, self.names(), n=1)
        suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ProbeTypeError(
            f"unknown probe type {name!r}{suggestion} (known: {', '.join(self.names())})"
        )


@cache
def registry() -> Registry:
    """The process-wide registry, read from entry points once."""
    return Registry()
