"""Turn resolved checks into runnable probe handles."""

from __future__ import annotations

from alivemcp.config import ResolvedCheck
from alivemcp.plumbing import Plumbing
from alivemcp.probe import CheckContext
from alivemcp.registry import Registry, registry
from alivemcp.results import CheckInfo
from alivemcp.resultsview import NO_RESULTS, ResultsView, StateSource, StoreResultsView
from alivemcp.runner import ProbeHandle

__all__ = ["build_handle", "check_info"]


def check_info(check: ResolvedCheck) -> CheckInfo:
    # The check's own labels, not a copy: both are read-only, and shared by every check with
    # the same label set (see SharedValues).
    return CheckInfo(
        name=check.name,
        probe_type=check.probe_type,
        labels=check.labels,
        depends_on=check.depends_on,
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
    )
    return ProbeHandle(info or check_info(check), context, probe_cls(context, check.params))
