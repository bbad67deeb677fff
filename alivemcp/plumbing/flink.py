"""Managed Service for Apache Flink as the prober reads it: the application's description
(``kinesisanalyticsv2`` ``DescribeApplication``) and CloudWatch series as timestamped points.

``client`` arguments are the AWS plumbing's clients (:mod:`alivemcp.plumbing.aws`): their
calls raise only :class:`~alivemcp.errors.ProbeError`, naming the operation and target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "FLINK_NAMESPACE",
    "FlinkApplication",
    "MetricQuery",
    "Point",
    "describe_application",
    "read_metrics",
]

#: Where Managed Flink publishes a job's metrics (dimension ``Application``).
FLINK_NAMESPACE = "AWS/KinesisAnalytics"
_MAX_QUERIES = 500  # GetMetricData's limit per call

#: One datapoint: (epoch seconds of the period's start, value).
Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class FlinkApplication:
    """What ``DescribeApplication`` says about one application, in the terms the probe needs.

    ``billed_kpus`` is what the job's parallelism occupies: current parallelism divided by
    parallelism per KPU, rounded up (None when the description has no parallelism, e.g. a
    SQL application). The orchestration KPU AWS adds per application is the caller's to add.
    """

    name: str
    arn: str
    status: str
    runtime: str
    version_id: int | None
    parallelism: int | None
    current_parallelism: int | None
    parallelism_per_kpu: int | None
    autoscaling: bool
    checkpointing: bool | None
    checkpoint_interval_seconds: float | None

    @property
    def job_kpus(self) -> int | None:
        if self.current_parallelism is None:
            return None
        per_kpu = max(1, self.parallelism_per_kpu or 1)
        return max(1, math.ceil(self.current_parallelism / per_kpu))


async def describe_application(client: Any, name: str) -> FlinkApplication:
    """``DescribeApplication`` for ``name`` (``client``: the ``kinesisanalyticsv2`` client)."""
    answer = await client.describe_application(ApplicationName=name)
    detail: Mapping[str, Any] = answer.get("ApplicationDetail") or {}
    config = detail.get("ApplicationConfigurationDescription") or {}
    flink = config.get("FlinkApplicationConfigurationDescription") or {}
    parallel = flink.get("ParallelismConfigurationDescription") or {}
    checkpoint = flink.get("CheckpointConfigurationDescription") or {}
    interval_ms = checkpoint.get("CheckpointInterval")
    return FlinkApplication(
        name=str(detail.get("ApplicationName") or name),
        arn=str(detail.get("ApplicationARN") or ""),
        status=str(detail.get("ApplicationStatus") or "UNKNOWN"),
        runtime=str(detail.get("RuntimeEnvironment") or ""),
        version_id=_int(detail.get("ApplicationVersionId")),
        parallelism=_int(parallel.get("Parallelism")),
        current_parallelism=_int(parallel.get("CurrentParallelism", parallel.get("Parallelism"))),
        parallelism_per_kpu=_int(parallel.get("ParallelismPerKPU")),
        autoscaling=bool(parallel.get("AutoScalingEnabled")),
        checkpointing=(bool(checkpoint["CheckpointingEnabled"])
                       if "CheckpointingEnabled" in checkpoint else None),
        checkpoint_interval_seconds=(float(interval_ms) / 1000.0
                                     if isinstance(interval_ms, int | float) else None),
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class MetricQuery:
    """One CloudWatch series: namespace, metric name, exact dimensions and statistic."""

    key: str
    namespace: str
    metric: str
    dimensions: Mapping[str, str]
    stat: str = "Maximum"


async def read_metrics(
    client: Any,
    queries: Sequence[MetricQuery],
    start: datetime,
    end: datetime,
    period: int,
) -> dict[str, list[Point]]:
    """The ``stat`` of each series per ``period`` from ``start`` to ``end``, oldest first,
    keyed by each query's ``key`` (an empty list when a series has no datapoints).

    ``client`` is the CloudWatch client; every page is followed, 500 queries per call.
    Align ``start`` and ``end`` to ``period``, as CloudWatch expects.
    """
    requests = [
        {
            "Id": f"q{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": query.namespace,
                    "MetricName": query.metric,
                    "Dimensions": [{"Name": k, "Value": v} for k, v in query.dimensions.items()],
                },
                "Period": period,
                "Stat": query.stat,
            },
            "ReturnData": True,
        }
        for index, query in enumerate(queries)
    ]
    found: dict[str, list[Point]] = {query.key: [] for query in queries}
    for first in range(0, len(requests), _MAX_QUERIES):
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "MetricDataQueries": requests[first : first + _MAX_QUERIES],
                "StartTime": start,
                "EndTime": end,
                "ScanBy": "TimestampAscending",
            }
            if token:
                kwargs["NextToken"] = token
            page = await client.get_metric_data(**kwargs)
            for row in page.get("MetricDataResults", []):
                query_id = str(row.get("Id", ""))
                index = int(query_id[1:]) if query_id[1:].isdigit() else -1
                if 0 <= index < len(queries):
                    found[queries[index].key].extend(
                        (_epoch(ts), float(value))
                        for ts, value in zip(row.get("Timestamps", []), row.get("Values", []),
                                             strict=False)
                    )
            token = page.get("NextToken")
            if not token:
                break
    return {key: sorted(points) for key, points in found.items()}


def _epoch(moment: Any) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    return float(moment)
