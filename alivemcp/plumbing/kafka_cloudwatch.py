"""MSK's own CloudWatch metrics (namespace ``AWS/Kafka``), for clusters the prober cannot
reach: the series of one cluster (``ListMetrics``), and their datapoints
(:func:`alivemcp.plumbing.cloudwatch.read_metrics`).

``client`` is the AWS plumbing's CloudWatch client: its calls raise only
:class:`~alivemcp.errors.ProbeError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from alivemcp.plumbing.cloudwatch import MetricQuery, read_metrics

__all__ = ["NAMESPACE", "Series", "list_series", "series_values"]

NAMESPACE = "AWS/Kafka"

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
        MetricQuery(
            str(index), NAMESPACE, metric, {d["Name"]: d["Value"] for d in dimensions}, stat
        )
        for index, (metric, dimensions) in enumerate(series)
    ]
    found = await read_metrics(client, queries, start, end, period)
    return [[value for _, value in found[query.key]] for query in queries]
