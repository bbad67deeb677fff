"""What the AWS probes share above the plumbing: how a refused request is read, and reading
CloudWatch as the prober's view of a target.

``tests/ship/test_iam.py`` derives each probe's IAM policy from the probe's own files and the
plumbing modules they import, not from this module: a helper here reaches AWS only through
plumbing its callers import themselves (every caller of :func:`read_metric_window` builds its
queries with ``alivemcp.plumbing.cloudwatch.MetricQuery``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.cloudwatch import (
    MetricQuery,
    MetricWindow,
    Point,
    aligned_window,
    read_metrics,
)
from alivemcp.probe import Status
from alivemcp.verdict import Findings

__all__ = ["REJECTED_IS_DOWN", "read_metric_window"]

#: Verdict overrides for a probe whose requests are fixed and known good (a canary write, a
#: describe): a request the target refuses as invalid (any other 4xx: a disabled KMS key, say)
#: then blames the target, as a 5xx does, where by default it is the prober's (``unknown``).
REJECTED_IS_DOWN: Mapping[ErrorKind, Status] = MappingProxyType({ErrorKind.REJECTED: Status.DOWN})


async def read_metric_window(
    cloudwatch: Any,
    queries: Sequence[MetricQuery],
    period: float,
    periods: int,
    findings: Findings,
    *,
    subject: str | None = None,
) -> tuple[MetricWindow, dict[str, list[Point]]] | None:
    """The last ``periods`` whole periods of each series (:func:`aligned_window`), and the
    window, which also goes into ``findings.details["metric_window"]``.

    None when CloudWatch cannot be read: then an ``unknown`` finding says so ("cannot read
    CloudWatch metrics of <subject>"), whatever the error, since the metrics are the prober's
    view of the target, not the target itself.
    """
    window = aligned_window(period, periods)
    try:
        series = await read_metrics(cloudwatch, queries, window.start, window.end, window.period)
    except ProbeError as err:
        of = f" of {subject}" if subject else ""
        findings.add(
            Status.UNKNOWN, f"cannot read CloudWatch metrics{of}: {err.operation}: {err.detail}"
        )
        return None
    findings.details["metric_window"] = window.as_json()
    return window, series
