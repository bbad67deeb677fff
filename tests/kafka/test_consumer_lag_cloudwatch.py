"""kafka_consumer_lag with ``source: cloudwatch``: MSK's AWS/Kafka lag metrics, on moto."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import boto3

from alivemcp.probe import Status
from alivemcp.testbed.moto import MotoServer
from probes.kafka_consumer_lag import aligned_range
from tests.support import run_check, this_minute

CLUSTER = "probe-pipeline"


def put_lag(
    moto: MotoServer,
    group: str,
    topic: str,
    *,
    max_lag: Sequence[float],
    time_lag: Sequence[float],
    sum_lag: Sequence[float],
    cluster: str = CLUSTER,
) -> None:
    """One datapoint per minute for the last len(values) complete minutes, oldest first."""
    cw = boto3.client("cloudwatch", **moto.boto3_kwargs())
    dims = [
        {"Name": "Cluster Name", "Value": cluster},
        {"Name": "Consumer Group", "Value": group},
        {"Name": "Topic", "Value": topic},
    ]
    last_minute = this_minute() - 60
    data: list[dict[str, Any]] = []
    for name, values in (
        ("MaxOffsetLag", max_lag),
        ("EstimatedMaxTimeLag", time_lag),
        ("SumOffsetLag", sum_lag),
    ):
        for i, value in enumerate(values):
            at = last_minute - 60 * (len(values) - 1 - i) + 5
            data.append(
                {
                    "MetricName": name,
                    "Dimensions": dims,
                    "Value": float(value),
                    "Timestamp": datetime.fromtimestamp(at, UTC),
                }
            )
    cw.put_metric_data(Namespace="AWS/Kafka", MetricData=data)


def params(moto: MotoServer, **extra: Any) -> dict[str, Any]:
    return {
        "source": "cloudwatch",
        "cloudwatch": {"aws": moto.aws_params(), "cluster_name": CLUSTER},
        "window": 3,
        **extra,
    }


def test_aligned_range() -> None:
    assert aligned_range(1_000_030.0, 60, 5) == (999_720, 1_000_020)


async def test_group_over_time_threshold_is_degraded(moto: MotoServer) -> None:
    put_lag(
        moto,
        "billing",
        "orders",
        max_lag=[10, 12, 900],
        time_lag=[5, 6, 95],
        sum_lag=[30, 20, 1500],
    )
    put_lag(moto, "audit", "orders", max_lag=[0, 0, 1], time_lag=[0, 0, 1], sum_lag=[0, 0, 1])
    result = await run_check("kafka_consumer_lag", params(moto, groups=["billing", "audit"]))
    assert result.status == Status.DEGRADED, result.reason
    assert result.reason.startswith("group billing topic orders: time lag over 60s")
    assert result.observations["max_offset_lag_messages"] == 900
    assert result.observations["max_time_lag_seconds"] == 95
    assert result.observations["sum_offset_lag_messages"] == 1501
    by = {(o.name, o.labels["group"]): o.value for o in result.labeled_observations}
    assert by[("group_max_time_lag_seconds", "billing")] == 95
    assert by[("group_sum_offset_lag_messages", "audit")] == 1


async def test_down_threshold_and_growing_lag(moto: MotoServer) -> None:
    put_lag(
        moto,
        "indexer",
        "events",
        max_lag=[100, 200, 300],
        time_lag=[10, 20, 30],
        sum_lag=[100, 200, 300],
    )
    put_lag(
        moto,
        "mailer",
        "events",
        max_lag=[5, 5, 50_000],
        time_lag=[1, 1, 700],
        sum_lag=[5, 5, 50_000],
    )
    growing = await run_check("kafka_consumer_lag", params(moto, groups=["indexer"]))
    assert growing.status == Status.DEGRADED, growing.reason
    assert "SumOffsetLag grew on each of the last 3 periods (100 -> 300" in growing.reason

    down = await run_check(
        "kafka_consumer_lag",
        params(moto, group_pattern="mail.*", down_lag_seconds=600, max_lag_messages=1000),
    )
    assert down.status == Status.DOWN, down.reason
    assert down.reason.startswith("group mailer topic events: time lag over 600s")


async def test_no_datapoints_is_unknown(moto: MotoServer) -> None:
    put_lag(
        moto, "billing", "orders", max_lag=[1], time_lag=[1], sum_lag=[1], cluster="another-cluster"
    )
    named = await run_check("kafka_consumer_lag", params(moto, groups=["billing"]))
    assert named.status == Status.UNKNOWN
    assert "group billing: no CloudWatch lag datapoints" in named.reason
    pattern = await run_check("kafka_consumer_lag", params(moto, group_pattern="bill.*"))
    assert pattern.status == Status.UNKNOWN
    assert "no consumer group matches" in pattern.reason


async def test_topic_filter_and_per_topic_series(moto: MotoServer) -> None:
    put_lag(moto, "billing", "orders", max_lag=[1], time_lag=[1], sum_lag=[1])
    put_lag(moto, "billing", "refunds", max_lag=[9000], time_lag=[500], sum_lag=[9000])
    result = await run_check(
        "kafka_consumer_lag",
        params(moto, groups=["billing"], topics=["orders"], per_partition_metrics=True),
    )
    assert result.status == Status.UP, result.reason
    rows = [
        (o.labels["topic"], o.value)
        for o in result.labeled_observations
        if o.name == "topic_offset_lag_messages"
    ]
    assert rows == [("orders", 1.0)]
