"""How a Kafka probe words a run that could not use the cluster, and a list in a reason.

One rule for every Kafka probe (re-exported by :mod:`alivemcp.plumbing.kafka`): the prober's
own credentials refused make the run ``unknown``; any other failure to use the cluster is the
status of its kind.
"""

from __future__ import annotations

from collections.abc import Sequence

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.outcome import ProbeResult, Status
from alivemcp.verdict import status_for

__all__ = ["cluster_failure", "cluster_problem", "format_list"]


def cluster_problem(err: ProbeError) -> str:
    """How a reason says the cluster could not be used: the prober's own credentials were
    refused (or could not be made), or the cluster could not be reached or asked."""
    if err.kind is ErrorKind.AUTH:
        return f"cannot authenticate to the cluster: {err}"
    return f"cluster unreachable: {err}"


def cluster_failure(
    err: ProbeError, doing: str | None = None, *, otherwise: Status | None = None
) -> ProbeResult:
    """The result of a run that could not use the cluster: one rule for every Kafka probe.

    The prober's own credentials refused (or unusable) make it ``unknown``, "cannot
    authenticate to the cluster: ...": the cluster answered, only not to this identity. Any
    other failure is :func:`~alivemcp.verdict.status_for` its kind (or ``otherwise``, for a
    probe that cannot judge without the cluster), "cluster unreachable: ..." (or
    "<doing>: ...")."""
    if err.kind is ErrorKind.AUTH:
        return ProbeResult.unknown(cluster_problem(err))
    status = otherwise if otherwise is not None else status_for(err.kind)
    return ProbeResult(status, f"{doing}: {err}" if doing else cluster_problem(err))


def format_list(items: Sequence[str], limit: int) -> str:
    """``a, b, c (+7 more)``: at most ``limit`` items named (how reasons list partitions
    and brokers)."""
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")
