"""Writing to and reading from chosen partitions, for probes that exercise the data path
(the produce canary): thin wrappers over aiokafka's producer and consumer that speak in
topic names and partition numbers and raise only :class:`KafkaPlumbingError`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from alivemcp.plumbing.kafka_errors import KafkaPlumbingError, kafka_error

__all__ = ["PartitionReader", "PartitionWriter", "close_quietly"]


class PartitionWriter:
    """The cluster's shared idempotent ``acks=all`` producer (or the plain ``acks=all`` one
    standing in while no broker hands out producer ids), writing to chosen partitions."""

    def __init__(
        self, producer: AIOKafkaProducer, *, without_idempotence: str | None = None
    ) -> None:
        self._producer = producer
        #: The aiokafka client inside (steering and leader refreshes find it here).
        self._client = producer.client
        #: Why this writer is a plain producer standing in for the idempotent one (no broker
        #: handed out a producer id in time), or None.
        self.without_idempotence = without_idempotence

    async def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> int:
        """Write one message and wait for every in-sync replica; its offset. The caller
        bounds the wait (a hung leader never answers)."""
        try:
            meta = await self._producer.send_and_wait(topic, value, key=key, partition=partition)
        except KafkaError as exc:
            raise kafka_error(exc, target=f"{topic}[{partition}]", operation="Produce") from exc
        return int(meta.offset)

    def leader(self, topic: str, partition: int) -> int | None:
        """The broker this producer sends the partition's writes to, in its own metadata view
        (what a hung send is waiting on, even if leadership moved meanwhile)."""
        with contextlib.suppress(Exception):  # a view still being built: no opinion
            leader = self._client.cluster.leader_for_partition(TopicPartition(topic, partition))
            if isinstance(leader, int) and leader >= 0:
                return leader
        return None


class PartitionReader:
    """A started group-less consumer the caller owns (and must :meth:`close`), reading
    chosen partitions of one topic from where their log ended when it started following."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer
        #: The aiokafka client inside (steering finds it here).
        self._client = consumer._client
        self._topic: str | None = None
        self._partitions: tuple[int, ...] = ()

    async def follow(self, topic: str, partitions: Iterable[int]) -> None:
        """Read these partitions of ``topic`` from their current end on (nothing changes
        when they are the ones already followed)."""
        wanted = tuple(sorted(set(partitions)))
        if (topic, wanted) == (self._topic, self._partitions):
            return
        tps = [TopicPartition(topic, p) for p in wanted]
        try:
            self._consumer.assign(tps)
            await self._consumer.seek_to_end(*tps)
        except KafkaError as exc:
            raise kafka_error(exc, target=topic, operation="assign partitions") from exc
        self._topic, self._partitions = topic, wanted

    async def positions(self, timeout: float) -> dict[int, KafkaPlumbingError]:
        """Resolve where each followed partition is read from (at once for those already
        known), all within ``timeout``; each leader answers for its own partitions, so a hung
        one costs only those. The partitions that failed, with why (kind ``timeout`` when
        the leader did not answer in time)."""
        topic = self._topic or ""
        tps = [TopicPartition(topic, p) for p in self._partitions]
        results = await asyncio.gather(
            *(_within(self._consumer.position(tp), timeout) for tp in tps),
            return_exceptions=True,
        )
        failed: dict[int, KafkaPlumbingError] = {}
        for tp, result in zip(tps, results, strict=True):
            if isinstance(result, Exception):
                failed[tp.partition] = kafka_error(
                    result, target=f"{topic}[{tp.partition}]", operation="ListOffsets"
                )
            elif isinstance(result, BaseException):
                raise result
        return failed

    async def read(self, timeout: float) -> list[tuple[int, bytes | None]]:
        """What arrived within ``timeout``: (partition, value) of each message, in order."""
        try:
            batches = await self._consumer.getmany(timeout_ms=max(1, int(timeout * 1000)))
        except KafkaError as exc:
            raise kafka_error(exc, target=self._topic or "", operation="Fetch") from exc
        return [
            (tp.partition, record.value) for tp, records in batches.items() for record in records
        ]

    async def close(self) -> None:
        await close_quietly(self._consumer)


async def _within(call: Any, seconds: float) -> Any:
    async with asyncio.timeout(seconds):
        return await call


async def close_quietly(client: Any, timeout: float = 10.0) -> None:
    """Stop an aiokafka client within ``timeout``, whatever it raises.

    aiokafka's consumer can raise a CancelledError of its own while stopping (a fetch task
    cancelled during its back-off after a failed fetch, frequent while a broker is avoided):
    that one is swallowed; a cancellation of the caller itself is not.
    """
    closer = getattr(client, "stop", None) or client.close
    task = asyncio.current_task()
    try:
        async with asyncio.timeout(timeout):
            await closer()
    except asyncio.CancelledError:
        if task is None or task.cancelling():
            raise
    except Exception:  # closing is best effort: the client is discarded anyway
        pass
