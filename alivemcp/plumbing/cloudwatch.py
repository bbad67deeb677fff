"""CloudWatch metrics as the probes read them: series named by a :class:`MetricQuery`, read
with ``GetMetricData`` over a window of whole periods, as timestamped points.

``client`` arguments are the AWS plumbing's CloudWatch clients (:mod:`alivemcp.plumbing.aws`):
their calls raise only :class:`~alivemcp.errors.ProbeError`, naming the operation and target.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "MetricQuery",
    "MetricWindow",
    "Point",
    "aligned_window",
    "read_metrics",
    "standard_period",
]

MAX_QUERIES = 500  # GetMetricData's limit per call

#: One datapoint: (epoch seconds of the period's start, value).
Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class MetricQuery:
    """One CloudWatch series: namespace, metric name, exact dimensions and statistic; ``key``
    names its points in what :func:`read_metrics` returns."""

    key: str
    namespace: str
    metric: str
    dimensions: Mapping[str, str]
    stat: str = "Maximum"


@dataclass(frozen=True, slots=True)
class MetricWindow:
    """Whole periods from ``start`` to ``end`` (both on a period boundary)."""

    start: datetime
    end: datetime
    period: int

    def as_json(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "period_seconds": self.period,
        }


def standard_period(seconds: float) -> int:
    """``seconds`` as a standard-resolution period: whole minutes, at least one."""
    return max(60, int(seconds) // 60 * 60)


def aligned_window(
    period: float, periods: int, now: float | None = None, *, current: bool = False
) -> MetricWindow:
    """The last ``periods`` whole periods before ``now`` (default: the clock), ``period``
    made a standard-resolution one; ``current`` ends the window after the period in
    progress instead, so its partial datapoint is read too."""
    seconds = standard_period(period)
    moment = time.time() if now is None else now
    end_epoch = int(moment) // seconds * seconds + (seconds if current else 0)
    end = datetime.fromtimestamp(end_epoch, UTC)
    return MetricWindow(end - timedelta(seconds=seconds * periods), end, seconds)


async def read_metrics(
    client: Any,
    queries: Sequence[MetricQuery],
    start: datetime | float,
    end: datetime | float,
    period: int,
) -> dict[str, list[Point]]:
    """The ``stat`` of each series per ``period`` from ``start`` to ``end``, oldest first,
    keyed by each query's ``key`` (an empty list when a series has no datapoints).

    Every page is followed, at most 500 queries per call. Align ``start`` and ``end`` to
    ``period`` (:func:`aligned_window`), as CloudWatch expects.
    """
    found: dict[str, list[Point]] = {query.key: [] for query in queries}
    if len(found) != len(queries):
        raise ValueError("each MetricQuery needs a key of its own")
    requests = [_request(f"q{index}", query, period) for index, query in enumerate(queries)]
    for first in range(0, len(requests), MAX_QUERIES):
        kwargs: dict[str, Any] = {
            "MetricDataQueries": requests[first : first + MAX_QUERIES],
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampAscending",
        }
        while True:
            page = await client.get_metric_data(**kwargs)
            for row in page.get("MetricDataResults", []):
                query_id = str(row.get("Id", ""))
                index = int(query_id[1:]) if query_id[1:].isdigit() else -1
                if 0 <= index < len(queries):
                    found[queries[index].key].extend(
                        (_epoch(ts), float(value))
                        for ts, value in zip(
                            row.get("Timestamps", []), row.get("Values", []), strict=False
                        )
                    )
            kwargs["NextToken"] = page.get("NextToken")
            if not kwargs["NextToken"]:
                break
    return {key: sorted(points) for key, points in found.items()}


def _request(query_id: str, query: MetricQuery, period: int) -> dict[str, Any]:
    dimensions = [{"Name": k, "Value": v} for k, v in query.dimensions.items()]
    metric = {"Namespace": query.namespace, "MetricName": query.metric, "Dimensions": dimensions}
    return {
        "Id": query_id,
        "MetricStat": {"Metric": metric, "Period": period, "Stat": query.stat},
        "ReturnData": True,
    }


def _epoch(moment: Any) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return float(moment.timestamp())
    return float(moment)
