"""MSK's own CloudWatch metrics (namespace ``AWS/Kafka``), for clusters the prober cannot
reach: the series of one cluster, and their datapoints in as few GetMetricData calls as the
API allows (500 queries each, every page followed).

``client`` is the AWS plumbing's CloudWatch client: its calls raise only
:class:`~alivemcp.errors.ProbeError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["NAMESPACE", "Series", "list_series", "series_values"]

NAMESPACE = "AWS/Kafka"
_MAX_QUERIES = 500  # GetMetricData's limit per call

#: One metric series: its name and dimensions (``{"Name": ..., "Value": ...}`` each).
Series = tuple[str, Sequence[Mapping[str, str]]]


async def list_series(client: Any, cluster_name: str, metric: str) -> list[Series]:
    """Every series of ``metric`` published for the cluster (per broker, per consumer group
    and topic, ...: whatever dimensions MSK uses for it)."""
    found: list[Series] = []
    paginator = client.get_paginator("list_metrics")
    async for page in paginator.paginate(
        Namespace=NAMESPACE,
        MetricName=metric,
        Dimensions=[{"Name": "Cluster Name", "Value": cluster_name}],
    ):
        for item in page.get("Metrics", []):
            found.append((metric, list(item.get("Dimensions", []))))
    return found


async def series_values(
    client: Any,
    series: Sequence[Series],
    start: datetime | float,
    end: datetime | float,
    period: int,
    stat: str = "Maximum",
) -> list[list[float]]:
    """The ``stat`` of each series per ``period`` from ``start`` to ``end``, oldest first
    (one list per series, in the order given; empty when it has no datapoints)."""
    queries = [
        {
            "Id": f"m{index}",
            "MetricStat": {
                "Metric": {"Namespace": NAMESPACE, "MetricName": metric,
                           "Dimensions": list(dimensions)},
                "Period": period,
                "Stat": stat,
            },
            "ReturnData": True,
        }
        for index, (metric, dimensions) in enumerate(series)
    ]
    points: list[list[tuple[Any, float]]] = [[] for _ in series]
    for first in range(0, len(queries), _MAX_QUERIES):
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "MetricDataQueries": queries[first : first + _MAX_QUERIES],
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
                if 0 <= index < len(points):
                    points[index].extend(
                        zip(row.get("Timestamps", []), row.get("Values", []), strict=False)
                    )
            token = page.get("NextToken")
            if not token:
                break
    return [[float(value) for _, value in sorted(found)] for found in points]
