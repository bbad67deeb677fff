"""kafka_partition_health on a single real broker, and its CloudWatch source on moto.

The failure scenarios (a broker paused, partitions under-replicated or offline) run on the
three-broker cluster in ``test_kafka_failover.py``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from alivemcp.testbed.moto import MotoServer
from tests.support import run_check


@pytest.fixture(scope="module")
async def health_topics(kafka_single: KafkaCluster) -> dict[str, Any]:
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=kafka_single.bootstrap))
        await kc.create_topic("ph-orders", partitions=4, replication_factor=1)
        await kc.create_topic("ph-audit", partitions=2, replication_factor=1)
        # min.insync.replicas above the replication factor: every acks=all write fails.
        await kc.create_topic(
            "ph-misconfigured",
            partitions=1,
            replication_factor=1,
            configs={"min.insync.replicas": "2"},
        )
        # A new topic's configs become readable a moment after creation returns.
        for _ in range(40):
            if len(await kc.topic_configs(["ph-orders", "ph-audit", "ph-misconfigured"])) == 3:
                break
            await asyncio.sleep(0.25)
    finally:
        await plumbing.aclose()
    return {"bootstrap_servers": kafka_single.bootstrap}


async def test_healthy_topics_are_up(health_topics: dict[str, Any]) -> None:
    result = await run_check(
        "kafka_partition_health",
        {"cluster": health_topics, "topic_pattern": "ph-(orders|audit)"},
    )
    assert result.status == Status.UP, result.reason
    assert result.observations["partitions"] == 6
    assert result.observations["topics"] == 2
    assert result.observations["under_replicated_partitions"] == 0
    assert "6 partitions in 2 topics fully replicated on 1 broker" in result.reason


async def test_under_min_isr_is_down(health_topics: dict[str, Any]) -> None:
    result = await run_check(
        "kafka_partition_health", {"cluster": health_topics, "topics": ["ph-misconfigured"]}
    )
    assert result.status == Status.DOWN
    assert "under min ISR (acks=all producers fail): ph-misconfigured/0 isr [1] < 2" in (
        result.reason
    )
    assert result.details["under_min_isr"][0]["min_isr"] == 2


async def test_missing_topic_and_empty_match(health_topics: dict[str, Any]) -> None:
    missing = await run_check(
        "kafka_partition_health", {"cluster": health_topics, "topics": ["ph-nope"]}
    )
    assert missing.status == Status.DOWN
    assert "topic not found: ph-nope" in missing.reason

    nothing = await run_check(
        "kafka_partition_health", {"cluster": health_topics, "topic_pattern": "zz-.*"}
    )
    assert nothing.status == Status.UNKNOWN
    assert "no topic matches" in nothing.reason


async def test_expected_brokers(health_topics: dict[str, Any]) -> None:
    result = await run_check(
        "kafka_partition_health",
        {"cluster": health_topics, "topics": ["ph-orders"], "expected_brokers": 3},
    )
    assert result.status == Status.DEGRADED
    assert "1 of 3 brokers alive ([1])" in result.reason


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "exactly one of cluster or cloudwatch"),
        ({"cluster": {"bootstrap_servers": "x:1"}, "topic_pattern": "("}, "invalid regular"),
        ({"cloudwatch": {"cluster_name": "c"}, "topics": ["a"]}, "cluster-wide"),
    ],
)
async def test_bad_params_are_config_errors(params: dict[str, Any], message: str) -> None:
    from alivemcp.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        await run_check("kafka_partition_health", params)


# -- CloudWatch source ------------------------------------------------------------------------


def _put(moto: MotoServer, metric: str, value: float, broker: str | None = None) -> None:
    dims = [{"Name": "Cluster Name", "Value": "prod-msk"}]
    if broker is not None:
        dims.append({"Name": "Broker ID", "Value": broker})
    boto3.client("cloudwatch", **moto.boto3_kwargs()).put_metric_data(
        Namespace="AWS/Kafka",
        MetricData=[
            {
                "MetricName": metric,
                "Dimensions": dims,
                "Value": value,
                "Timestamp": datetime.now(UTC) - timedelta(seconds=30),
            }
        ],
    )


def _cw(moto: MotoServer) -> dict[str, Any]:
    return {"cloudwatch": {"cluster_name": "prod-msk", "aws": moto.aws_params()}}


async def test_cloudwatch_healthy(moto: MotoServer) -> None:
    _put(moto, "OfflinePartitionsCount", 0)
    for broker in ("1", "2", "3"):
        _put(moto, "UnderReplicatedPartitions", 0, broker)
    result = await run_check("kafka_partition_health", _cw(moto))
    assert result.status == Status.UP, result.reason
    assert result.observations["under_replicated_partitions"] == 0


async def test_cloudwatch_under_replicated_names_broker(moto: MotoServer) -> None:
    _put(moto, "OfflinePartitionsCount", 0)
    _put(moto, "UnderReplicatedPartitions", 0, "1")
    _put(moto, "UnderReplicatedPartitions", 7, "2")
    result = await run_check("kafka_partition_health", _cw(moto))
    assert result.status == Status.DEGRADED, result.reason
    assert "7 under-replicated partitions on broker 2 (7)" in result.reason
    assert result.observations["under_replicated_partitions"] == 7

    prod = await run_check("kafka_partition_health", _cw(moto), labels={"production": "true"})
    assert prod.status == Status.DOWN


async def test_cloudwatch_offline_is_down(moto: MotoServer) -> None:
    _put(moto, "OfflinePartitionsCount", 3)
    result = await run_check("kafka_partition_health", _cw(moto))
    assert result.status == Status.DOWN
    assert "3 offline partitions" in result.reason


async def test_cloudwatch_without_metrics_is_unknown(moto: MotoServer) -> None:
    result = await run_check("kafka_partition_health", _cw(moto))
    assert result.status == Status.UNKNOWN
    assert "no AWS/Kafka partition metrics" in result.reason
