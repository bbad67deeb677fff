"""A broker that hangs but stays registered and leading (SIGSTOP on a cluster that does not
fence it): partition health, the canary and consumer lag end every run with a verdict of their
own, naming the broker or partition that hung, inside the check's timeout, never with the
engine's anonymous "timeout after". When the broker resumes they recover on their own (a
broker under suspicion is trusted again as soon as it answers a re-test).

The checks keep the default request timeout (10 s), longer than partition health's 8 s check
timeout: a request left to aiokafka's own timeout would outlast the check. Half the health
runs start from fresh clients, so bootstrapping with a hung broker is covered too.
"""

from __future__ import annotations

import json
import re

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import run_until as until
from tests.support.kafka import RELAXED, Check, conn, unique

HUNG = 2
RUNS = 10
HEALTH_TIMEOUT = 8.0  # kafka_partition_health's default at a 10 s interval
CANARY_TIMEOUT = 15.0
LAG_TIMEOUT = 10.0


def is_up(result: CheckResult) -> bool:
    return result.status == Status.UP


@pytest.mark.timeout(900)
async def test_hung_broker_is_named_never_an_engine_timeout(
    kafka_cluster3_unfenced: KafkaCluster,
) -> None:
    cluster = kafka_cluster3_unfenced
    hung_at = f"broker {HUNG} (127.0.0.1:{cluster.node(HUNG).port})"
    orders, canary_topic, group = unique("orders"), unique("canary"), unique("lag")
    await _create_topic_and_commit(cluster, orders, group)
    health_params = {"cluster": conn(cluster), "topics": [orders, canary_topic]}
    health = Check("kafka_partition_health", health_params, timeout=HEALTH_TIMEOUT)
    canary = Check(
        "kafka_canary",
        {"cluster": conn(cluster), "topic": canary_topic, **RELAXED},
        timeout=CANARY_TIMEOUT,
    )
    lag = Check(
        "kafka_consumer_lag", {"cluster": conn(cluster), "groups": [group]}, timeout=LAG_TIMEOUT
    )
    results: dict[str, list[CheckResult]] = {"health": [], "canary": [], "lag": []}
    try:
        await until(canary.run, is_up, "canary before the hang", within=120)
        await until(health.run, is_up, "health before the hang")
        await until(lag.run, is_up, "lag before the hang")
        leaders = await _leaders(cluster, [orders, canary_topic])
        hung_partition = next(p for (t, p), b in leaders.items() if t == canary_topic and b == HUNG)

        with cluster.paused(HUNG):
            for run in range(RUNS):
                if run % 2:
                    fresh = Check("kafka_partition_health", health_params, timeout=HEALTH_TIMEOUT)
                    try:
                        results["health"].append(await fresh.run())
                    finally:
                        await fresh.close()
                else:
                    results["health"].append(await health.run())
                results["canary"].append(await canary.run())
                if run % 2 == 0:
                    results["lag"].append(await lag.run())
            # Removing the check (a config reload) while its reader cannot fetch from the hung
            # broker: stopping the reader must not raise (aiokafka's fetcher can raise a
            # CancelledError of its own while it backs off from an avoided broker).
            await canary.handle.teardown()

        # Suspicion of the broker ends when it answers again: no waiting out a long hold.
        await until(health.run, is_up, "health after resume", within=60)
        recovered = await until(canary.run, is_up, "canary after resume", within=30)
        assert recovered.observations["partitions_failed"] == 0
    finally:
        for check in (health, canary, lag):
            await check.close()

    engine_timeouts = {
        name: sum(1 for r in rs if r.reason.startswith("timeout after"))
        for name, rs in results.items()
    }
    assert not any(engine_timeouts.values()), f"runs ended by the engine: {engine_timeouts}"
    for result in results["health"]:
        assert result.duration_seconds < HEALTH_TIMEOUT, result
        # Idle partitions keep the hung broker in their ISR (a follower that has every
        # message is in sync) and it still leads its own: in sync in name only, so they are
        # under-replicated first, and the broker itself is named after them.
        assert result.status == Status.DEGRADED, result.reason  # not a production cluster
        assert re.match(
            rf"\d+ under-replicated \(broker {HUNG} missing from ISR\)", result.reason
        ), result.reason
        assert f"{hung_at} did not answer" in result.reason
        assert result.observations["brokers_not_answering"] == 1  # no healthy broker blamed
    healthy_at = [
        f"broker {n.node_id} (127.0.0.1:{n.port})" for n in cluster.nodes if n.node_id != HUNG
    ]
    for result in results["canary"]:
        assert result.duration_seconds < CANARY_TIMEOUT, result
        assert result.status == Status.DOWN, result.reason
        assert f"partition {hung_partition} (leader broker {HUNG})" in result.reason
        assert hung_at in result.reason
        assert result.details is not None
        failed = {f["partition"]: f["error"] for f in result.details["failed"]}
        assert hung_partition in failed
        # With acks=all a partition led by a healthy broker waits for the hung follower until
        # it drops out of the ISR: then that follower is named, never the healthy leader.
        for partition, error in failed.items():
            assert hung_at in error, (partition, error)
        assert not any(f"{name} did not answer" in result.reason for name in healthy_at)
    for result in results["lag"]:
        assert result.duration_seconds < LAG_TIMEOUT, result
        assert hung_at in result.reason + json.dumps(result.details), result.reason


async def _create_topic_and_commit(cluster: KafkaCluster, topic: str, group: str) -> None:
    """A replicated topic, and a group with a commit on each of its partitions."""
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
        await kc.create_topic(
            topic, partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"}
        )
    finally:
        await plumbing.aclose()
    committer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(6)]
        committer.assign(tps)
        await committer.commit({tp: 0 for tp in tps})
    finally:
        await committer.stop()


async def _leaders(cluster: KafkaCluster, topics: list[str]) -> dict[tuple[str, int], int]:
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
        snapshot = await kc.metadata(topics)
        return {
            (t.name, p.partition): p.leader for t in snapshot.topics.values() for p in t.partitions
        }
    finally:
        await plumbing.aclose()
