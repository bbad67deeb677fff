"""Turn resolved checks into runnable probe handles."""

from __future__ import annotations

from alivemcp.config import ResolvedCheck
from alivemcp.plumbing import Plumbing
from alivemcp.probe import CheckContext
from alivemcp.registry import Registry, registry
from alivemcp.results import CheckInfo
from alivemcp.runner import ProbeHandle

__all__ = ["build_handle", "check_info"]


def check_info(check: ResolvedCheck) -> CheckInfo:
    return CheckInfo(
        name=check.name,
        probe_type=check.probe_type,
        labels=dict(check.labels),
        depends_on=check.depends_on,
    )


def build_handle(
    check: ResolvedCheck, plumbing: Plumbing, reg: Registry | None = None
) -> ProbeHandle:
    probe_cls = (reg or registry()).get(check.probe_type)
    context = CheckContext(
        name=check.name,
        probe_type=check.probe_type,
        interval=check.interval,
        timeout=check.timeout,
        labels=check.labels,
        plumbing=plumbing,
    )
    return ProbeHandle(check_info(check), context, probe_cls(context, check.params))
