"""A real three-broker KRaft cluster loses one broker (SIGSTOP) and gets it back (SIGCONT).

Partition health must name the under-replicated partitions and the missing broker, show the
replication-factor-1 topic on that broker as offline, and the canary must name the partition
led by the paused broker; after resuming, both recover. The broker stays paused for one block
(startup and fencing cost seconds on a small machine), so the scenario is one test.
"""

from __future__ import annotations

from typing import Any

from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import run_check
from tests.support import run_until as until
from tests.support.kafka import RELAXED

PAUSED = 2
WAIT = 60.0


async def test_pause_and_resume_broker(kafka_cluster3: KafkaCluster) -> None:
    cluster = kafka_cluster3
    conn: dict[str, Any] = {"bootstrap_servers": cluster.bootstrap, "request_timeout": 5}
    setup = Plumbing()
    kc = setup.kafka.cluster(KafkaConnection(**conn))
    await kc.create_topic(
        "orders", partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    # RF 1 with the cluster's min.insync.replicas 2 would be (rightly) under min ISR forever.
    await kc.create_topic("solo", assignments={0: [PAUSED]}, configs={"min.insync.replicas": "1"})
    await setup.aclose()

    health_params = {"cluster": conn, "topics": ["orders", "solo"]}
    canary_params = {
        "cluster": conn,
        "topic": "failover-canary",
        "produce_timeout": 3,
        "roundtrip_timeout": 5,
        **RELAXED,
    }
    # The canary keeps its clients across runs, like the daemon does.
    plumbing = Plumbing()

    async def health(**extra: Any) -> CheckResult:
        return await run_check("kafka_partition_health", {**health_params, **extra}, timeout=30)

    async def canary() -> CheckResult:
        return await run_check("kafka_canary", canary_params, plumbing=plumbing, timeout=30)

    try:
        healthy = await until(health, lambda r: r.status == Status.UP, "initial health")
        assert healthy.observations["partitions"] == 7
        assert healthy.observations["brokers"] == 3

        first = await until(canary, lambda r: r.status == Status.UP, "initial canary")
        assert first.observations["partitions"] == 3  # one per broker
        assert first.observations["partitions_failed"] == 0
        meta = await _canary_leaders(cluster)
        assert sorted(meta.values()) == [1, 2, 3], f"every broker leads a partition: {meta}"
        paused_partition = next(p for p, leader in meta.items() if leader == PAUSED)

        with cluster.paused(PAUSED):
            # The canary runs first, before leadership moves: the write to the paused
            # broker's partition hangs and must be named with its leader.
            hung = await until(canary, lambda r: r.status == Status.DOWN, "canary while paused")
            assert f"partition {paused_partition} (leader broker {PAUSED})" in hung.reason
            # The hung broker is named with its address (it answered nothing, it is not down).
            assert f"broker {PAUSED} (127.0.0.1:{cluster.node(PAUSED).port})" in hung.reason
            failed = hung.details["failed"]
            assert [f["partition"] for f in failed] == [paused_partition]
            assert hung.observations["partitions_failed"] == 1

            broken = await until(
                health,
                lambda r: (
                    r.observations.get("under_replicated_partitions", 0) >= 6
                    and r.observations.get("offline_partitions", 0) == 1
                ),
                "health while paused",
            )
            assert broken.status == Status.DOWN  # the offline RF-1 partition
            assert "1 offline (no leader): solo/0 replicas [2]" in broken.reason
            assert f"broker {PAUSED} missing from ISR" in broken.reason
            assert broken.details["brokers_missing_from_isr"] == [PAUSED]
            assert broken.observations["brokers"] == 2
            for row in broken.details["under_replicated"]:
                assert PAUSED not in row["isr"] and PAUSED in row["replicas"]
            assert broken.observations["under_min_isr_partitions"] == 0  # 2 of 3 still in ISR

            # Without the offline topic, under-replication alone: degraded by default,
            # down on a cluster labelled production.
            orders_only = await health(topics=["orders"])
            assert orders_only.status == Status.DEGRADED, orders_only.reason
            assert orders_only.observations["under_replicated_partitions"] == 6
            prod = await run_check(
                "kafka_partition_health",
                {**health_params, "topics": ["orders"]},
                labels={"env": "production"},
            )
            assert prod.status == Status.DOWN, prod.reason
            assert "6 under-replicated (broker 2 missing from ISR)" in prod.reason

            # Once leadership has moved, the canary writes everywhere again (RF 3, min ISR 2).
            await until(canary, lambda r: r.status != Status.DOWN, "canary after failover")

        await until(health, lambda r: r.status == Status.UP, "health after resume")
        recovered = await until(canary, lambda r: r.status == Status.UP, "canary after resume")
        assert recovered.observations["partitions_failed"] == 0
    finally:
        await plumbing.aclose()


async def _canary_leaders(cluster: KafkaCluster) -> dict[int, int]:
    """Leaders of the canary topic's partitions, after checking how it was created."""
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
        snapshot = await kc.metadata(["failover-canary"])
        partitions = snapshot.topics["failover-canary"].partitions
        assert all(len(p.replicas) == 3 for p in partitions)  # RF min(3, brokers)
        configs = await kc.topic_configs(["failover-canary"], ["min.insync.replicas"])
        assert configs["failover-canary"]["min.insync.replicas"] == "2"
        return {p.partition: p.leader for p in partitions}
    finally:
        await plumbing.aclose()


async def test_canary_adds_partitions_for_brokers_leading_none(
    kafka_cluster3: KafkaCluster,
) -> None:
    """A pre-existing canary topic whose only partition prefers broker 1 (as after brokers 2
    and 3 joined the cluster): the canary adds one partition led by each of them."""
    conn = {"bootstrap_servers": kafka_cluster3.bootstrap}
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(**conn))
        await kc.create_topic(
            "canary-narrow", assignments={0: [1, 2, 3]}, configs={"min.insync.replicas": "2"}
        )
        result = await run_check(
            "kafka_canary",
            {"cluster": conn, "topic": "canary-narrow", **RELAXED},
        )
        assert result.status == Status.UP, result.reason
        assert result.observations["partitions"] == 3
        partitions = (await kc.metadata(["canary-narrow"])).topics["canary-narrow"].partitions
        assert sorted(p.replicas[0] for p in partitions) == [1, 2, 3]
        assert all(len(p.replicas) == 3 for p in partitions)
    finally:
        await plumbing.aclose()
