"""Demo part: a real single-node Kafka broker with live traffic for the Kafka checks.

Starts one KRaft broker from the cached Maven Central jars (needs Java 17+), creates an
``demo-orders`` topic, and runs a tiny producer (a few messages a second) and a consumer
group (``demo-orders-processor``) that keeps up with it, so the lag check watches real,
moving offsets. The canary and partition-health checks use the same broker.

Without Java (or if the broker cannot start) the demo still runs: ``DEMO_KAFKA_BOOTSTRAP``
points at a closed port and the Kafka checks report the cluster unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection, KafkaPlumbingError
from alivemcp.testbed.kafka import KafkaCluster, KafkaHarnessError, java_available
from alivemcp.testbed.stack import DemoStack

__all__ = ["DEMO_GROUP", "DEMO_TOPIC", "start"]

DEMO_TOPIC = "demo-orders"
DEMO_GROUP = "demo-orders-processor"
DEMO_PARTITIONS = 3
#: Messages per second the demo producer writes (spread over the partitions).
DEMO_RATE = 5.0
#: Nothing listens on the discard port: the Kafka checks say "unreachable" without a broker.
UNREACHABLE = "127.0.0.1:9"


async def start(stack: DemoStack) -> None:
    if not java_available():
        stack.set_env("DEMO_KAFKA_BOOTSTRAP", UNREACHABLE)
        stack.note("Kafka: `java` not found, no broker started; the Kafka checks report down")
        return
    try:
        cluster = await KafkaCluster(size=1).start()
    except KafkaHarnessError as exc:
        stack.set_env("DEMO_KAFKA_BOOTSTRAP", UNREACHABLE)
        first_line = str(exc).splitlines()[0]
        stack.note(f"Kafka: broker did not start ({first_line}); the Kafka checks report down")
        return
    stack.add_cleanup(cluster.stop)
    stack.set_env("DEMO_KAFKA_BOOTSTRAP", cluster.bootstrap)

    await _create_topic(cluster.bootstrap)
    traffic = _Traffic(cluster.bootstrap)
    await traffic.start()
    stack.add_cleanup(traffic.stop)
    stack.note(
        f"Kafka: broker {cluster.bootstrap}; topic {DEMO_TOPIC} with a producer "
        f"(~{DEMO_RATE:g} msg/s) and consumer group {DEMO_GROUP}"
    )


async def _create_topic(bootstrap: str) -> None:
    plumbing = Plumbing()
    try:
        cluster = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=bootstrap))
        await cluster.create_topic(DEMO_TOPIC, partitions=DEMO_PARTITIONS, replication_factor=1)
    finally:
        await plumbing.aclose()


class _Traffic:
    """A background producer and a consumer group that keeps up with it."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._tasks: list[asyncio.Task[None]] = []
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, linger_ms=5)
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            DEMO_TOPIC,
            bootstrap_servers=self._bootstrap,
            group_id=DEMO_GROUP,
            enable_auto_commit=True,
            auto_commit_interval_ms=1000,
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        self._tasks = [
            asyncio.create_task(self._produce(), name="demo-kafka-producer"),
            asyncio.create_task(self._consume(), name="demo-kafka-consumer"),
        ]

    async def _produce(self) -> None:
        assert self._producer is not None
        sequence = 0
        while True:
            with contextlib.suppress(KafkaError, KafkaPlumbingError):
                await self._producer.send(
                    DEMO_TOPIC, f"order {sequence}".encode(), partition=sequence % DEMO_PARTITIONS
                )
            sequence += 1
            await asyncio.sleep(1.0 / DEMO_RATE)

    async def _consume(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                await self._consumer.getmany(timeout_ms=1000)
            except KafkaError:
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Bounded: on Ctrl-C the broker (same process group) may already be gone, and a
        # consumer leaving its group or a producer flushing would wait for it.
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), 3)
