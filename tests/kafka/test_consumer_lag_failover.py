"""kafka_consumer_lag while one broker of a real three-broker cluster hangs (SIGSTOP).

A partition led only by the hung broker cannot be measured: the group gets an ``unknown``
finding naming the partition (never a crash, nor a stall past the timeout), its healthy
partitions are still judged, and the Burrow window survives the gap so a group that stopped
is still called stopped once the broker is back."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import GroupCoordinatorNotAvailableError

from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import run_until as until
from tests.support.kafka import Check, unique

PAUSED = 2


async def group_not_on(kc: object, broker: int) -> str:
    """A group name whose coordinator is not ``broker`` (the group stays readable)."""
    admin = await kc.admin()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        group = unique("lag-failover")
        try:
            if await admin.find_coordinator(group) != broker:
                return group
        except GroupCoordinatorNotAvailableError:  # the offsets topic is still being created
            await asyncio.sleep(0.5)
    raise AssertionError("no group coordinator answered within 60 s")


async def test_hung_broker_makes_its_partitions_unknown(kafka_cluster3: KafkaCluster) -> None:
    cluster = kafka_cluster3
    conn = {"bootstrap_servers": cluster.bootstrap, "request_timeout": 3}
    solo, shared = unique("lag-solo"), unique("lag-shared")
    setup = Plumbing()
    kc = setup.kafka.cluster(KafkaConnection.model_validate(conn))
    await kc.create_topic(solo, assignments={0: [PAUSED]}, configs={"min.insync.replicas": "1"})
    await kc.create_topic(shared, partitions=1, replication_factor=3)
    group = await group_not_on(kc, PAUSED)
    await setup.aclose()

    # acks=all: acknowledged once every in-sync replica has the messages, that is once the
    # high watermark (what lag is measured against) covers them. With acks=1 a loaded machine
    # let the probe read a high watermark the followers had not moved yet (lag 2, not 4).
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    await producer.start()
    try:
        for topic in (solo, shared):
            for _ in range(3):
                await producer.send_and_wait(topic, b"x", partition=0)
    finally:
        await producer.stop()
    committer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign([TopicPartition(solo, 0), TopicPartition(shared, 0)])
        await committer.commit({TopicPartition(solo, 0): 1, TopicPartition(shared, 0): 1})
    finally:
        await committer.stop()

    handle = Check(
        "kafka_consumer_lag",
        {
            "cluster": conn,
            "groups": [group],
            "window": 3,
            "max_lag_seconds": 3600,
        },
        timeout=20,
    )
    try:
        for _ in range(2):  # two of the window's three samples before the broker hangs
            first = await handle.run()
            assert first.status == Status.UP, first.reason
            assert first.observations["sum_offset_lag_messages"] == 4

        def problems(result: CheckResult) -> list[str]:
            assert result.details is not None
            return list(result.details["groups"][group].get("problems", []))

        unreadable = f"log end of 1 partition(s) unreadable, e.g. {solo}[0]"
        with cluster.paused(PAUSED):
            # Until the hung broker is fenced, the replicated topic may still be led by it.
            blind = await until(
                handle.run,
                lambda r: any(p.startswith(unreadable) for p in problems(r)),
                "lag with the broker hung",
            )
            assert blind.duration_seconds < 20
            # The healthy partition is still judged: its third sample makes it stopped, and
            # that finding outranks the unknown one (which is counted, and in the details).
            assert blind.observations["partitions"] == 1
            assert blind.observations["sum_offset_lag_messages"] == 2
            assert blind.status == Status.DEGRADED, blind.reason
            assert f"{shared}[0]: no commits over the last 3 runs" in blind.reason
            assert blind.reason.endswith("; +1 more")
        back = await until(
            handle.run,
            lambda r: not problems(r) and r.observations["partitions"] == 2,
            "lag after the broker resumed",
        )
        # Never committed again: with its two samples from before the gap kept, the solo
        # partition is stopped on its first sample after it (a reset window would need three).
        assert back.status == Status.DEGRADED, back.reason  # lag under the threshold
        assert back.details is not None
        assert sorted((r["topic"], r["state"]) for r in back.details["worst_partitions"]) == [
            (shared, "stop"),
            (solo, "stop"),
        ]
    finally:
        await handle.close()
