"""Turn resolved checks into runnable probe handles, with the view of the status store a
probe that reads other checks is given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from alivemcp.config import ResolvedCheck
from alivemcp.config.registry import Registry, registry
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.status import CheckState
from alivemcp.plumbing import Plumbing
from alivemcp.probe import CheckContext
from alivemcp.resultsview import NO_RESULTS, MemberResult, Reference, ResultsView

__all__ = ["StateSource", "StoreResultsView", "build_handle", "check_info"]


class StateSource(Protocol):
    """Where the latest results live: the status store (``StatusStore.get``)."""

    def get(self, name: str) -> CheckState | None: ...


class StoreResultsView:
    """A probe's view of the status store, limited to the checks its params declared.

    It keeps no state of its own: every ``latest`` reads the store's current entry, which the
    store replaces whole on each result. Without a store (``alivemcp check`` runs checks one by
    one, outside the daemon) every declared check reads as not run yet.
    """

    __slots__ = ("_intervals", "_names", "_source")

    def __init__(self, references: Sequence[Reference], source: StateSource | None) -> None:
        self._source = source
        self._names: Mapping[str, tuple[str, ...]] = {
            ref.name: tuple(c.name for c in ref.checks) for ref in references
        }
        self._intervals: Mapping[str, float] = {
            c.name: c.interval for ref in references for c in ref.checks
        }

    def checks_named(self, name: str) -> tuple[str, ...]:
        return self._names.get(name, ())

    def latest(self, name: str) -> MemberResult | None:
        interval = self._intervals.get(name)
        if interval is None or self._source is None:
            return None
        state = self._source.get(name)
        last = state.last if state is not None else None
        if last is None:
            return None
        return MemberResult(name, last.status, last.reason, last.finished_at, interval)


def check_info(check: ResolvedCheck) -> CheckInfo:
    # The check's own labels, not a copy: both are read-only, and shared by every check with
    # the same label set (see SharedValues).
    return CheckInfo(
        name=check.name,
        probe_type=check.probe_type,
        labels=check.labels,
        depends_on=check.depends_on,
        discovered=check.discovered,
        interval=check.interval,
        locations=check.locations,
        quorum=check.quorum,
    )


def build_handle(
    check: ResolvedCheck,
    plumbing: Plumbing,
    reg: Registry | None = None,
    *,
    results: StateSource | None = None,
    info: CheckInfo | None = None,
) -> ProbeHandle:
    """The check's probe instance and bookkeeping. ``results`` is where the latest results of
    other checks are kept (the daemon's status store): a probe whose params read other checks
    (``ResolvedCheck.reads``) sees theirs through ``CheckContext.results``, and nothing else.
    ``info``: the check's :func:`check_info`, when the caller has it already."""
    probe_cls = (reg or registry()).get(check.probe_type)
    view: ResultsView = StoreResultsView(check.reads, results) if check.reads else NO_RESULTS
    context = CheckContext(
        name=check.name,
        probe_type=check.probe_type,
        interval=check.interval,
        timeout=check.timeout,
        labels=check.labels,
        plumbing=plumbing,
        results=view,
        discovered=check.discovered is not None,
    )
    return ProbeHandle(info or check_info(check), context, probe_cls(context, check.params))
