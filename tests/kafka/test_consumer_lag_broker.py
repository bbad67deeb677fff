"""kafka_consumer_lag against a real single-node Kafka broker.

Groups are driven by committing offsets explicitly (a group-less ``assign`` + ``commit``), so
each scenario controls exactly where the group stands between probe runs; produced messages
carry chosen timestamps so time lags cross thresholds without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from alivemcp.engine.results import CheckResult
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import check_json, run_check
from tests.support.kafka import Check, unique


class Lab:
    """Topics, messages and group commits on the test broker."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)

    async def start(self) -> None:
        await self.admin.start()
        await self.producer.start()

    async def close(self) -> None:
        await self.producer.stop()
        await self.admin.close()

    async def topic(self, prefix: str, partitions: int = 1) -> str:
        name = unique(prefix)
        response = await self.admin.create_topics([NewTopic(name, partitions, 1)])
        assert all(err[1] == 0 for err in response.topic_errors), response.topic_errors
        return name

    async def produce(self, topic: str, partition: int, count: int, age: float = 0.0) -> None:
        """``count`` messages written ``age`` seconds ago (by their timestamp)."""
        stamp = int((time.time() - age) * 1000)
        for i in range(count):
            await self.producer.send_and_wait(
                topic, f"m{i}".encode(), partition=partition, timestamp_ms=stamp
            )

    async def commit(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(t, p) for t, p in offsets]
            consumer.assign(tps)
            await consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
        finally:
            await consumer.stop()


@pytest.fixture
async def lab(kafka_single: KafkaCluster) -> AsyncIterator[Lab]:
    lab = Lab(kafka_single.bootstrap)
    await lab.start()
    try:
        yield lab
    finally:
        await lab.close()


def lag_check(params: dict[str, Any]) -> Check:
    """One lag check run repeatedly (window state kept), as the daemon would."""
    return Check("kafka_consumer_lag", params)


def partition_row(result: CheckResult, group: str, partition: int) -> dict[str, Any]:
    assert result.details is not None
    for row in result.details["worst_partitions"]:
        if row["group"] == group and row.get("partition") == partition:
            return row
    raise AssertionError(f"no row for {group}[{partition}] in {result.details}")


def labeled(result: CheckResult, name: str, group: str) -> float:
    for obs in result.labeled_observations:
        if obs.name == name and obs.labels.get("group") == group:
            return obs.value
    raise AssertionError(f"no {name} for {group}")


async def test_stopped_group_goes_degraded_then_down_and_recovers(
    lab: Lab, kafka_single: KafkaCluster
) -> None:
    topic = await lab.topic("orders", partitions=2)
    group = unique("billing")
    for p in (0, 1):
        await lab.produce(topic, p, 4, age=600)
    await lab.commit(group, {(topic, 0): 4, (topic, 1): 4})
    check = lag_check(
        {
            "cluster": {"bootstrap_servers": kafka_single.bootstrap},
            "groups": [group],
            "topics": [topic],
            "window": 3,
            "max_lag_seconds": 60,
        }
    )
    try:
        first = await check.run()
        assert first.status == Status.UP, first.reason
        assert first.observations["max_offset_lag_messages"] == 0
        assert first.observations["partitions"] == 2

        # The consumers stop; the producer goes on. The first unconsumed message is 120 s old.
        await lab.produce(topic, 0, 3, age=120)
        second = await check.run()
        assert second.status == Status.DEGRADED, second.reason
        assert f"group {group} {topic}[0]" in second.reason
        assert "time lag over 60s" in second.reason
        row = partition_row(second, group, 0)
        assert (row["committed_offset"], row["log_end_offset"], row["offset_lag"]) == (4, 7, 3)
        assert row["time_lag_source"] == "record"
        assert 115 <= row["time_lag_seconds"] <= 180
        assert second.observations["max_offset_lag_messages"] == 3
        assert labeled(second, "group_max_offset_lag_messages", group) == 3
        assert labeled(second, "group_max_time_lag_seconds", group) >= 115

        await lab.produce(topic, 0, 2, age=60)
        third = await check.run()  # the window still holds the caught-up sample
        assert third.status == Status.DEGRADED, third.reason

        await lab.produce(topic, 0, 1)
        fourth = await check.run()  # three runs without a commit while lagging: stopped
        assert fourth.status == Status.DOWN, fourth.reason
        assert f"group {group} {topic}[0]" in fourth.reason
        assert "no commits over the last 3 runs" in fourth.reason
        assert "no active members" in fourth.reason
        row = partition_row(fourth, group, 0)
        assert (row["offset_lag"], row["state"], row["status"]) == (6, "stop", "down")
        assert fourth.observations["max_offset_lag_messages"] == 6
        assert fourth.observations["sum_offset_lag_messages"] == 6
        assert fourth.observations["down_partitions"] == 1
        assert fourth.details is not None
        assert fourth.details["groups"][group]["status"] == "down"

        # The group catches up: back to up at once.
        await lab.commit(group, {(topic, 0): 10, (topic, 1): 4})
        caught_up = await check.run()
        assert caught_up.status == Status.UP, caught_up.reason
        assert caught_up.observations["max_offset_lag_messages"] == 0
    finally:
        await check.close()


async def test_rewound_group_is_reported(lab: Lab, kafka_single: KafkaCluster) -> None:
    topic = await lab.topic("replay")
    group = unique("replayer")
    await lab.produce(topic, 0, 10)
    await lab.commit(group, {(topic, 0): 10})
    check = lag_check(
        {
            "cluster": {"bootstrap_servers": kafka_single.bootstrap},
            "groups": [group],
            "window": 3,
        }
    )
    try:
        assert (await check.run()).status == Status.UP
        await lab.commit(group, {(topic, 0): 3})
        rewound = await check.run()
        assert rewound.status == Status.DEGRADED, rewound.reason
        assert f"group {group} {topic}[0]" in rewound.reason
        assert "went back from 10 to 3" in rewound.reason
        row = partition_row(rewound, group, 0)
        assert (row["state"], row["offset_lag"]) == ("rewind", 7)
    finally:
        await check.close()


async def test_missing_group_is_down_and_empty_pattern_unknown(
    lab: Lab, kafka_single: KafkaCluster
) -> None:
    topic = await lab.topic("present")
    present, gone = unique("present"), unique("gone")
    await lab.produce(topic, 0, 2)
    await lab.commit(present, {(topic, 0): 2})
    cluster = {"bootstrap_servers": kafka_single.bootstrap}

    missing = await run_check("kafka_consumer_lag", {"cluster": cluster, "groups": [present, gone]})
    assert missing.status == Status.DOWN
    assert missing.reason.startswith(f"group {gone}: group has no committed offsets")

    nothing = await run_check(
        "kafka_consumer_lag", {"cluster": cluster, "group_pattern": "no-such-group-.*"}
    )
    assert nothing.status == Status.UNKNOWN
    assert "no consumer group matches" in nothing.reason

    other_topics = await run_check(
        "kafka_consumer_lag",
        {"cluster": cluster, "group_pattern": present, "topic_pattern": "elsewhere-.*"},
    )
    assert other_topics.status == Status.UNKNOWN
    assert "no committed offsets on the selected topics" in other_topics.reason

    matched = await run_check(
        "kafka_consumer_lag",
        {
            "cluster": cluster,
            "group_pattern": present.replace("-", "[-]"),
            "per_partition_metrics": True,
        },
    )
    assert matched.status == Status.UP, matched.reason
    rows = [o for o in matched.labeled_observations if o.name == "partition_offset_lag_messages"]
    assert [(o.labels["group"], o.labels["topic"], o.labels["partition"]) for o in rows] == [
        (present, topic, "0")
    ]


async def test_estimated_time_lag_when_not_reading_messages(
    lab: Lab, kafka_single: KafkaCluster
) -> None:
    topic = await lab.topic("estimate")
    group = unique("slow")
    await lab.produce(topic, 0, 5, age=3600)  # the timestamps must not be used
    await lab.commit(group, {(topic, 0): 5})
    check = lag_check(
        {
            "cluster": {"bootstrap_servers": kafka_single.bootstrap},
            "groups": [group],
            "time_lag": "estimate",
            "max_lag_messages": 100,
        }
    )
    try:
        assert (await check.run()).status == Status.UP
        await lab.produce(topic, 0, 4, age=3600)
        result = await check.run()
        assert result.status == Status.UP, result.reason
        assert result.details is not None
        group_row = result.details["groups"][group]
        assert group_row["max_offset_lag"] == 4
        # Written between the two runs, by the table of log-end offsets; not an hour ago.
        assert group_row["max_time_lag_seconds"] is not None
        assert group_row["max_time_lag_seconds"] < 60
    finally:
        await check.close()


async def test_cli_reports_lag_verdicts(
    lab: Lab, kafka_single: KafkaCluster, tmp_path: Path
) -> None:
    topic = await lab.topic("cli")
    lagging, gone = unique("lagging"), unique("gone")
    await lab.produce(topic, 0, 2, age=300)
    await lab.commit(lagging, {(topic, 0): 0})
    config = tmp_path / "lag.yaml"
    cluster = {"bootstrap_servers": "${LAG_BOOTSTRAP}"}
    config.write_text(
        yaml.safe_dump(
            {
                "checks": [
                    {
                        "name": "lagging",
                        "probe": "kafka_consumer_lag",
                        "params": {"cluster": cluster, "groups": [lagging], "max_lag_seconds": 60},
                    },
                    {
                        "name": "gone",
                        "probe": "kafka_consumer_lag",
                        "params": {"cluster": cluster, "groups": [gone]},
                    },
                ]
            }
        )
    )
    code, results = check_json(config, env={"LAG_BOOTSTRAP": kafka_single.bootstrap})
    assert code == 1
    assert results["lagging"]["status"] == "degraded", results["lagging"]
    assert f"group {lagging} {topic}[0]" in results["lagging"]["reason"]
    assert results["lagging"]["observations"]["max_offset_lag_messages"] == 2
    assert results["lagging"]["observations"]["max_time_lag_seconds"] >= 295
    assert results["gone"]["status"] == "down", results["gone"]
    assert gone in results["gone"]["reason"]


async def test_stop_versus_stall_by_membership(lab: Lab, kafka_single: KafkaCluster) -> None:
    """Groups without members are stopped; a group whose members hold the partition without
    moving its offset is stalled. Several groups share one DescribeGroups request."""
    topic = await lab.topic("membership")
    idle_a, idle_b, stuck = unique("idle-a"), unique("idle-b"), unique("stuck")
    await lab.produce(topic, 0, 5, age=300)
    await lab.commit(idle_a, {(topic, 0): 1})
    await lab.commit(idle_b, {(topic, 0): 2})
    member = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_single.bootstrap,
        group_id=stuck,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await member.start()
    check = lag_check(
        {
            "cluster": {"bootstrap_servers": kafka_single.bootstrap},
            "groups": [idle_a, idle_b, stuck],
            "window": 2,
        }
    )
    try:
        while not member.assignment():
            await member.getmany(timeout_ms=500)
        await member.commit({TopicPartition(topic, 0): 3})
        await check.run()
        result = await check.run()
        assert result.status == Status.DOWN, result.reason
        assert result.details is not None
        states = {row["group"]: row["state"] for row in result.details["worst_partitions"]}
        assert states == {idle_a: "stop", idle_b: "stop", stuck: "stall"}
        assert result.details["groups"][stuck]["window_findings"] == ["stall"]
    finally:
        await member.stop()
        await check.close()
