"""A read-only view of other checks' latest results, for probes that judge checks, not targets.

A probe such as ``composite`` ("can we fail over now": the DR endpoint and the replication lag
must both be up) never runs other checks: it reads what their own runs last recorded. The
engine hands every probe a :class:`ResultsView` as ``CheckContext.results``; it shows only the
checks the probe's params declared, resolved and validated when the config was loaded.

How a probe declares what it reads: its params model has a method ``referenced_checks()``
returning ``(field path, check name)`` pairs (:class:`ReadsChecks`). The config loader then
requires every name to be a check (a plain check's name, or the base name of a multi-target
check, which stands for all its targets), refuses a check reading itself and cycles of such
checks, and records what each name stands for (:class:`Reference`), with each check's interval
so a reader can tell a fresh result from a stale one.

This module is part of the probe contract (``alivemcp.probe`` re-exports its public names), so it
imports nothing from the engine; the engine's view of its status store is
:class:`alivemcp.engine.checks.StoreResultsView`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from alivemcp.outcome import Status

__all__ = [
    "NO_RESULTS",
    "MemberResult",
    "ReadableCheck",
    "ReadsChecks",
    "Reference",
    "ResultsView",
]


@dataclass(frozen=True, slots=True)
class MemberResult:
    """The latest finished run of a check another probe reads."""

    name: str
    status: Status
    reason: str
    finished_at: float  # unix time
    #: The check's configured interval: how often a fresh result is due.
    interval: float

    def age(self, now: float) -> float:
        """Seconds since the run finished (never negative, even if the clock stepped back)."""
        return max(0.0, now - self.finished_at)


@dataclass(frozen=True, slots=True)
class ReadableCheck:
    """One concrete check a reference stands for, with its interval."""

    name: str
    interval: float


@dataclass(frozen=True, slots=True)
class Reference:
    """A check name as a probe's params wrote it, and the concrete checks it stands for (the
    check itself, or every target of a multi-target check, in config order)."""

    name: str
    checks: tuple[ReadableCheck, ...]


@runtime_checkable
class ReadsChecks(Protocol):
    """Params of a probe that reads other checks' results declare which ones."""

    def referenced_checks(self) -> Sequence[tuple[str, str]]:
        """``(field path under params, e.g. "members[0]", check name)`` per name read."""
        ...


class ResultsView(Protocol):
    """What a probe may know about other checks: their latest results, never the checks."""

    def checks_named(self, name: str) -> tuple[str, ...]:
        """The concrete checks a declared name stands for (empty if it was not declared)."""
        ...

    def latest(self, name: str) -> MemberResult | None:
        """The latest finished run of a concrete check the params declared; ``None`` if it has
        not finished a run yet (or was not declared)."""
        ...


class _NoResults:
    """The view of a probe that declared nothing: every name is unknown to it."""

    def checks_named(self, name: str) -> tuple[str, ...]:
        return ()

    def latest(self, name: str) -> MemberResult | None:
        return None


#: The default view: nothing declared, nothing visible.
NO_RESULTS: ResultsView = _NoResults()
