"""Alert state shared through Kafka: one record per check in the compacted alert-state topic.

The topic has one partition per shard and the results topic's partitioning (key: the check
name), so a shard's alert state is one partition. This module moves records between that
topic and the :class:`~alivemcp.alerting.manager.AlertManager` (built with ``shared=True``):

* ``on_assigned(shards)``: each gained shard's partition is read from its beginning up to the
  high watermark seen when the read starts (a consumer of its own, in no group: ``assign`` and
  ``seek_to_beginning``), and the latest valid record of every check is handed to the manager
  (:meth:`~alivemcp.alerting.manager.AlertManager.adopt`) before the shard's checks are
  evaluated: an open incident continues without a new page, its resolve is sent once. If the
  partition cannot be read (Kafka unreachable), the shard's alerts wait, and the read is
  retried in the background: alerting from a state it has not read could page again.
* the manager writes a check's record whenever it changes, and before a notification is sent
  (it waits for that acknowledgement): :meth:`AlertStateLog.write`. Writes are coalesced per
  check (only the latest record of a check matters) and produced by an idempotent producer
  with ``acks=all``, to the check's shard explicitly.
* ``on_revoked(shards)``: the manager writes the latest record of every check of those shards,
  waits for the acknowledgements, and drops them
  (:meth:`~alivemcp.alerting.manager.AlertManager.release`). If acknowledgements do not come,
  the producer is discarded with whatever it still holds: an idempotent producer retries
  forever, and a record of ours landing after the new owner's would be read as the latest
  by the owner after that.

Records read from Kafka are untrusted: they are validated like the state file
(:mod:`alivemcp.alerting.records`); a damaged record costs only itself.

The daemon builds it right after the alert manager and lists it first among the node's
listeners (a shard's alert state is read before its checks are probed)::

    alerts = AlertManager(config.alerting, checks, data_dir, registry, shared=True,
                          status_of=...)
    alert_state = AlertStateLog(config.cluster, kafka, alerts, registry)
    await alerts.start(); ...; await alert_state.start()
    node = ClusterNode(config.cluster, kafka, [alert_state, stream, probing], registry)
    ...
    await node.stop(); await stream.stop(); await alert_state.stop(timeout); ...
    await alerts.stop(grace)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alivemcp.alerting.manager import AlertManager
from alivemcp.alerting.records import DAMAGE_REASONS, DamagedRecord, SharedRecord, decode_record
from alivemcp.cluster._kafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ClusterKafka,
    KafkaError,
    TopicPartition,
)
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.shards import ShardMap, shard_of
from alivemcp.plumbing.kafka_partitions import close_quietly

__all__ = ["AlertStateLog"]

log = structlog.get_logger("alivemcp.cluster")

#: Why a record read from the topic was not used (beyond :data:`DAMAGE_REASONS`): no key,
#: a key that is not UTF-8, a key whose shard is another partition.
_KEY_REASONS = ("no_key", "bad_key", "wrong_partition")
#: Damaged records logged one by one per read; beyond this only counted.
_LOGGED_DAMAGED = 20
_BACKOFF_MAX = 30.0


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.written = Counter(
            "alivemcp_cluster_alert_records_written_total",
            "Alert-state records (and tombstones) written and acknowledged by the brokers.",
            registry=registry,
        )
        self.write_errors = Counter(
            "alivemcp_cluster_alert_record_write_errors_total",
            "Failed attempts to write alert-state records (retried).",
            registry=registry,
        )
        self.pending = Gauge(
            "alivemcp_cluster_alert_records_pending",
            "Alert-state records waiting to be written or acknowledged.",
            registry=registry,
        )
        self.read = Counter(
            "alivemcp_cluster_alert_records_read_total",
            "Alert-state records read when taking shards over.",
            registry=registry,
        )
        self.damaged = Counter(
            "alivemcp_cluster_alert_records_damaged_total",
            "Alert-state records that could not be trusted (each costs only its check's "
            "state or one notification), by reason.",
            ["reason"],
            registry=registry,
        )
        self.read_seconds = Histogram(
            "alivemcp_cluster_alert_takeover_read_seconds",
            "Time to read the alert state of gained shards to the end and adopt it.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )
        self.unread = Gauge(
            "alivemcp_cluster_alert_shards_unread",
            "Shards held whose alert state could not be read yet (their alerts wait).",
            registry=registry,
        )
        for reason in (*DAMAGE_REASONS, *_KEY_REASONS, "outbox_entry"):
            self.damaged.labels(reason)


class AlertStateLog:
    """The alert-state topic of a replica (a :class:`~alivemcp.cluster.contract.ShardListener`
    and the alert manager's :class:`~alivemcp.alerting.records.RecordSink`)."""

    name = "alert_state"

    def __init__(
        self,
        config: ClusterConfig,
        kafka: ClusterKafka,
        alerts: AlertManager,
        registry: CollectorRegistry,
        *,
        on_adopted: Callable[[frozenset[int]], None] | None = None,
    ) -> None:
        """``on_adopted``: told of shards whose alert state was adopted (alerting evaluates
        their checks from then on): judgements made once, before, are given again (the tool
        surface tracker's: a surface changes once, and its verdict may have come first)."""
        self._on_adopted = on_adopted
        self._config = config
        self._kafka = kafka
        self._alerts = alerts
        self._topic = config.topics.alert_state
        self._shard_of = ShardMap(config.shards)
        self._metrics = _Metrics(registry)
        # Reads: shards adopted, and shards assigned whose state is still to be read.
        self._held: set[int] = set()
        self._unread: set[int] = set()
        self._read_lock = asyncio.Lock()
        self._retry_task: asyncio.Task[None] | None = None
        # Writes: the latest record per check not yet handed to the producer, the ones the
        # producer has, and who waits for which.
        self._seq = 0
        self._pending: dict[str, tuple[int, bytes | None]] = {}
        self._in_flight: dict[str, tuple[int, bytes | None]] = {}
        self._waiters: dict[str, list[tuple[int, asyncio.Future[bool]]]] = {}
        self._wake = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._writer: asyncio.Task[None] | None = None
        self._write_trouble: str | None = None
        self._started = False
        self._stopped = False
        # Bounds well inside the session timeout, which bounds each listener call of the node
        # (and the group waits on them): a read not done by then goes on in the background;
        # a release not acknowledged by then drops the producer with its records.
        self._read_timeout = 0.5 * float(config.session_timeout)
        self._release_timeout = 0.4 * float(config.session_timeout)
        # In the background nothing waits on it: a big partition gets the time it needs.
        self._background_read_timeout = max(120.0, 20 * self._read_timeout)
        self._metrics.pending.set_function(lambda: len(self._pending) + len(self._in_flight))
        self._metrics.unread.set_function(lambda: len(self._unread))
        alerts.attach(self, self._shard_of, config.replica_id)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start writing (the producer connects on first use, and again after a failure)."""
        if self._started:
            return
        self._started = True
        self._stopped = False
        self._writer = asyncio.get_running_loop().create_task(
            self._write_loop(), name="alivemcp-alert-state-writer"
        )

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending (within ``timeout``), then close. Records still unwritten
        are dropped, with the producer that holds them."""
        if not self._started:
            return
        deadline = time.monotonic() + timeout
        await self.wait_written(timeout)
        unwritten = len(self._pending) + len(self._in_flight)
        self._stopped = True
        self._started = False
        for task in (self._retry_task, self._writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._retry_task = self._writer = None
        await self._close_producer(
            flush=not unwritten, timeout=max(0.5, deadline - time.monotonic())
        )
        self._pending.clear()
        self._in_flight.clear()
        self._resolve_all(False)
        if unwritten:
            log.error("alert-state records not written at stop", records=unwritten)

    # -- ShardListener -----------------------------------------------------------------------

    async def on_assigned(self, shards: frozenset[int]) -> None:
        gained = frozenset(shards) - self._held - self._unread
        if not gained:
            return
        self._unread |= gained
        try:
            async with asyncio.timeout(self._read_timeout):
                await self._read_and_adopt(gained)
        except Exception as exc:  # Kafka unreachable, a timeout: retried in the background
            log.error(
                "cannot read the alert state of gained shards; their alerts wait "
                "until it is read (retrying)",
                shards=sorted(gained),
                error=_describe(exc),
            )
        finally:  # also when the node gives up on this call
            if gained & self._unread:
                self._retry_reads()

    async def on_revoked(self, shards: frozenset[int]) -> None:
        lost = frozenset(shards)
        self._unread -= lost
        held = lost & self._held
        self._held -= held
        unacked = 0
        try:
            if held:
                try:
                    unacked = await self._alerts.release(held, timeout=self._release_timeout)
                except Exception:  # must not raise (the contract): log, and forget below
                    log.exception("releasing alert state failed", shards=sorted(held))
                    unacked = 1
            if unacked:
                await self._discard_producer()
        finally:  # also when the node gives up on this call
            self._forget(lambda name: shard_of(name, self._config.shards) in lost)

    # -- reading -----------------------------------------------------------------------------

    def _retry_reads(self) -> None:
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = asyncio.get_running_loop().create_task(
                self._retry_loop(), name="alivemcp-alert-state-reader"
            )

    async def _retry_loop(self) -> None:
        delay = 1.0
        while self._unread:
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(self._background_read_timeout):
                    await self._read_and_adopt(frozenset(self._unread))
            except Exception as exc:
                delay = min(delay * 2, _BACKOFF_MAX)
                log.warning(
                    "alert state of gained shards still unreadable; retrying",
                    shards=sorted(self._unread),
                    error=_describe(exc),
                    retry_in_seconds=delay,
                )
        log.info("alert state of every held shard read")

    async def _read_and_adopt(self, shards: frozenset[int]) -> None:
        async with self._read_lock:
            shards = shards & self._unread  # revoked meanwhile: not ours to read
            if not shards:
                return
            started = time.monotonic()
            records, damaged = await self._read(shards)
            shards = shards & self._unread
            records = {
                k: v for k, v in records.items() if shard_of(k, self._config.shards) in shards
            }
            report = self._alerts.adopt(shards, records)
            self._unread -= shards
            self._held |= shards
            if self._on_adopted is not None:
                try:
                    self._on_adopted(shards)
                except Exception:  # a judgement not given again costs only itself
                    log.exception("telling of adopted shards failed", shards=sorted(shards))
            seconds = time.monotonic() - started
            self._metrics.read_seconds.observe(seconds)
            if report.damaged_entries:
                self._metrics.damaged.labels("outbox_entry").inc(len(report.damaged_entries))
                for detail in report.damaged_entries[:_LOGGED_DAMAGED]:
                    log.error(
                        "dropped a damaged notification of an alert-state record; the rest is kept",
                        topic=self._topic,
                        error=detail,
                    )
            log.info(
                "alert state of gained shards adopted",
                shards=sorted(shards),
                records=sum(1 for v in records.values() if v is not None),
                continued=report.adopted,
                resent=report.resent,
                possibly_undelivered=report.possibly_undelivered,
                resolved_removed=report.removed,
                damaged=damaged + len(report.damaged_entries),
                seconds=round(seconds, 3),
            )

    async def _read(self, shards: frozenset[int]) -> tuple[dict[str, SharedRecord | None], int]:
        """The latest value of every key in the shards' partitions, up to the high watermarks
        seen at the start (later records are ours, or a former owner's late ones)."""
        consumer: AIOKafkaConsumer = await self._kafka.consumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        latest: dict[str, bytes | None] = {}
        damaged = 0
        try:
            await consumer.start()
            tps = [TopicPartition(self._topic, shard) for shard in sorted(shards)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends: dict[Any, int] = await consumer.end_offsets(tps)
            remaining = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
            while remaining:
                batches = await consumer.getmany(*remaining, timeout_ms=200)
                for tp, messages in batches.items():
                    for message in messages:
                        if message.offset >= ends[tp]:
                            break
                        self._metrics.read.inc()
                        key = self._key_of(message.key, tp.partition)
                        if key is None:
                            damaged += 1
                            continue
                        latest[key] = message.value
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        finally:
            # Not consumer.stop() under suppress(Exception): a read that failed because
            # Kafka went away leaves a fetch in its back-off, and aiokafka's stop() raises that
            # task's CancelledError. Let out, it replaced the read's error, went through the
            # node's listener call into aiokafka's group coordination, ended it, and with it
            # the replica's group membership (no fence, no rejoin).
            await close_quietly(consumer)
        records: dict[str, SharedRecord | None] = {}
        logged = 0
        for key, value in latest.items():
            if value is None:
                records[key] = None
                continue
            try:
                records[key] = decode_record(key, value)
            except DamagedRecord as exc:
                damaged += 1
                self._metrics.damaged.labels(exc.reason).inc()
                logged += 1
                if logged <= _LOGGED_DAMAGED:
                    log.error(
                        "alert-state record cannot be trusted; the check starts from a clean state",
                        topic=self._topic,
                        check=key[:200],
                        reason=exc.reason,
                        error=str(exc),
                    )
        return records, damaged

    def _key_of(self, raw: bytes | None, partition: int) -> str | None:
        if not raw:
            self._metrics.damaged.labels("no_key").inc()
            return None
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            self._metrics.damaged.labels("bad_key").inc()
            return None
        # Uncached: keys read here may be anyone's, the map is for our checks.
        if shard_of(key, self._config.shards) != partition:
            # Not where its check's records go (another writer, or shards changed): the
            # owner of its shard would never read it.
            self._metrics.damaged.labels("wrong_partition").inc()
            return None
        return key

    # -- writing (the RecordSink) ------------------------------------------------------------

    def write(self, check: str, record: bytes | None) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self._stopped:
            future.set_result(False)
            return future
        self._seq += 1
        self._pending[check] = (self._seq, record)
        self._waiters.setdefault(check, []).append((self._seq, future))
        self._wake.set()
        return future

    async def _write_loop(self) -> None:
        delay = 0.2
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._pending = self._pending, {}
            self._in_flight.update(batch)
            failed = await self._produce(batch)
            for name, item in failed.items():
                self._in_flight.pop(name, None)
                if name not in self._pending:  # a newer record of it waits: that one wins
                    self._pending[name] = item
            if failed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                delay = 0.2

    async def _produce(
        self, batch: dict[str, tuple[int, bytes | None]]
    ) -> dict[str, tuple[int, bytes | None]]:
        """Produce and await ``batch``; returns what failed (to be retried)."""
        try:
            producer = await self._producer_ready()
        except Exception as exc:
            self._trouble(exc)
            return batch
        sent = []
        failed: dict[str, tuple[int, bytes | None]] = {}
        error: BaseException | None = None
        for name, (seq, value) in batch.items():
            if error is not None:  # one failed: the rest would wait as long
                failed[name] = (seq, value)
                continue
            try:
                future = await producer.send(
                    self._topic, value, key=name.encode(), partition=self._shard_of(name)
                )
            except KafkaError as exc:
                error = exc
                failed[name] = (seq, value)
                continue
            sent.append((name, seq, value, future))
        for name, seq, value, future in sent:
            try:
                await future
            except KafkaError as exc:
                error = exc
                failed[name] = (seq, value)
                continue
            self._in_flight.pop(name, None)
            self._metrics.written.inc()
            self._acked(name, seq)
        if error is not None:
            self._metrics.write_errors.inc()
            self._trouble(error)
        elif self._write_trouble is not None:
            log.info("alert-state records written again", topic=self._topic)
            self._write_trouble = None
        return failed

    async def _producer_ready(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = await self._kafka.producer(enable_idempotence=True, acks="all")
            try:
                await producer.start()
                partitions = await producer.partitions_for(self._topic)
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), 2.0)
                raise
            if len(partitions) != self._config.shards:
                await producer.stop()
                raise _TopicMismatch(
                    f"topic {self._topic} has {len(partitions)} partitions, cluster.shards "
                    f"is {self._config.shards}"
                )
            self._producer = producer
        return self._producer

    def _trouble(self, exc: BaseException) -> None:
        error = _describe(exc)
        if self._write_trouble is None:
            log.error(
                "cannot write alert-state records; notifications wait until their "
                "record is written (retrying)",
                topic=self._topic,
                kafka=self._kafka.describe(),
                error=error,
            )
        self._write_trouble = error

    def _acked(self, name: str, seq: int) -> None:
        waiters = self._waiters.get(name)
        if not waiters:
            return
        keep = []
        for wanted, future in waiters:
            if wanted <= seq:
                if not future.done():
                    future.set_result(True)
            else:
                keep.append((wanted, future))
        if keep:
            self._waiters[name] = keep
        else:
            del self._waiters[name]

    def _forget(self, which: Callable[[str], bool]) -> None:
        """Drop pending records of checks no longer ours; their waiters learn False."""
        for name in [n for n in self._pending if which(n)]:
            del self._pending[name]
        for name in [n for n in self._waiters if which(n)]:
            for _seq, future in self._waiters.pop(name):
                if not future.done():
                    future.set_result(False)

    def _resolve_all(self, value: bool) -> None:
        for waiters in self._waiters.values():
            for _seq, future in waiters:
                if not future.done():
                    future.set_result(value)
        self._waiters.clear()

    async def _discard_producer(self) -> None:
        """Throw the producer away with what it holds: records of shards just released
        must not reach the topic later (an idempotent producer retries until they do)."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            held_back = self._in_flight
            self._in_flight = {}
            for name, item in held_back.items():
                if name not in self._pending:
                    self._pending[name] = item
            await self._close_producer(flush=False, timeout=1.0)
            log.warning(
                "alert-state producer discarded: records of released shards were not acknowledged",
                topic=self._topic,
            )
        finally:  # the other shards' records still need a writer
            if self._started and self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(
                    self._write_loop(), name="alivemcp-alert-state-writer"
                )

    async def _close_producer(self, *, flush: bool, timeout: float) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if flush:
            try:
                await asyncio.wait_for(producer.stop(), timeout)
                return
            except (TimeoutError, KafkaError, OSError):
                pass
        # Without flushing: stop the sender (its batches are dropped), then the connections.
        # aiokafka's stop() would wait for every batch, forever while Kafka is away.
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sender.close(), timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.client.close(), timeout)
        producer._closed = True

    # -- introspection -----------------------------------------------------------------------

    def held(self) -> frozenset[int]:
        return frozenset(self._held)

    def unread(self) -> frozenset[int]:
        return frozenset(self._unread)

    async def wait_written(self, timeout: float = 10.0) -> bool:
        """Until every record written so far is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._pending or self._in_flight:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


class _TopicMismatch(RuntimeError):
    pass


def _describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text[:200]}" if text else name
