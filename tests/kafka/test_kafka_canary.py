"""kafka_canary on a single real broker: topic creation, one message per partition, verdicts.

The failure scenario (a paused partition leader) runs on three brokers in
``test_kafka_failover.py``.
"""

from __future__ import annotations

import asyncio

from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.plumbing.kafka_offsets import ConsumerGroupReader
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import run_check
from tests.support.kafka import RELAXED, conn


async def test_creates_canary_topic_and_reads_back(kafka_single: KafkaCluster) -> None:
    params = {
        "cluster": conn(kafka_single),
        "topic": "canary-created",
        "retention": "30m",
        **RELAXED,
    }
    result = await run_check("kafka_canary", params)
    assert result.status == Status.UP, result.reason
    assert result.observations["partitions"] == 1  # one per broker
    assert result.observations["partitions_failed"] == 0
    assert result.observations["messages_not_read_back"] == 0
    assert result.observations["roundtrip_latency_max_seconds"] > 0
    assert result.details["roundtrip_latency_seconds"].keys() == {"0"}

    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(**conn(kafka_single)))
        configs = await kc.topic_configs(
            ["canary-created"], ["min.insync.replicas", "retention.ms", "cleanup.policy"]
        )
        assert configs["canary-created"] == {
            "min.insync.replicas": "1",  # RF 1: 2 is not possible
            "retention.ms": "1800000",
            "cleanup.policy": "delete",
        }
    finally:
        await plumbing.aclose()


async def test_one_message_per_partition_per_run(kafka_single: KafkaCluster) -> None:
    plumbing = Plumbing()
    kc = plumbing.kafka.cluster(KafkaConnection(**conn(kafka_single)))
    await kc.create_topic("canary-wide", partitions=4, replication_factor=1)
    offsets = ConsumerGroupReader(kc)

    async def log_ends() -> dict[tuple[str, int], int]:
        for _ in range(50):  # leaders are elected within moments of creation
            partitions = (await kc.metadata(["canary-wide"])).topics["canary-wide"].partitions
            leaders = {("canary-wide", p.partition): p.leader for p in partitions}
            found, _ = await offsets.log_end_offsets(leaders, timeout=10)
            if len(found) == 4:
                return found
            await asyncio.sleep(0.2)
        raise AssertionError(f"log ends of canary-wide not readable: {found}")

    try:
        before = await log_ends()
        params = {"cluster": conn(kafka_single), "topic": "canary-wide", **RELAXED}
        result = await run_check("kafka_canary", params, plumbing=plumbing, runs=3)
        assert result.status == Status.UP, result.reason
        after = await log_ends()
        assert {tp[1]: after[tp] - before[tp] for tp in before} == {0: 3, 1: 3, 2: 3, 3: 3}
        series = {(o.name, o.labels["partition"]) for o in result.labeled_observations}
        assert {("produce_latency_seconds", str(p)) for p in range(4)} <= series
        assert {("roundtrip_latency_seconds", str(p)) for p in range(4)} <= series

        bounded = await run_check(
            "kafka_canary", {**params, "per_partition_max": 2}, plumbing=plumbing
        )
        assert not bounded.labeled_observations
        assert bounded.observations["partitions"] == 4
    finally:
        await plumbing.aclose()


async def test_missing_topic_without_creation_is_down(kafka_single: KafkaCluster) -> None:
    result = await run_check(
        "kafka_canary",
        {"cluster": conn(kafka_single), "topic": "canary-absent", "create_topic": False},
    )
    assert result.status == Status.DOWN
    assert "canary topic canary-absent does not exist" in result.reason


async def test_impossible_replication_factor_is_down(kafka_single: KafkaCluster) -> None:
    result = await run_check(
        "kafka_canary",
        {"cluster": conn(kafka_single), "topic": "canary-rf3", "replication_factor": 3},
    )
    assert result.status == Status.DOWN
    assert "replication factor 3 > 1 live brokers" in result.reason


async def test_slow_round_trip_is_degraded(kafka_single: KafkaCluster) -> None:
    # A threshold no real round trip can meet: the degraded path, not a speed measurement.
    result = await run_check(
        "kafka_canary",
        {
            "cluster": conn(kafka_single),
            "topic": "canary-created",
            "produce_latency_threshold": 30,
            "roundtrip_latency_threshold": "0.000001s",
        },
    )
    assert result.status == Status.DEGRADED
    assert "round trip above 1e-06s on partition 0" in result.reason


async def test_unreachable_cluster_is_down() -> None:
    result = await run_check(
        "kafka_canary",
        {"cluster": {"bootstrap_servers": "127.0.0.1:1", "request_timeout": 2}},
        timeout=20,
    )
    assert result.status == Status.DOWN
    assert "cluster unreachable" in result.reason
