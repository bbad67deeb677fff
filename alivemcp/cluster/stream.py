"""The results stream: every result of this replica to the results topic, every status change
to the status-changes topic.

A result is serialised when the pipeline hands it over and waits in a bounded buffer; probing
never waits for Kafka. Beyond ``produce_buffer`` records the oldest is dropped and counted. A
background task produces with an idempotent ``acks=all`` producer, compressed, into the
partition of the check's shard (set explicitly, so a record's partition is its check's shard
whatever partitioner a client uses) with the check name as the key.

The buffer is kept per partition ("lanes"): each lane has at most one batch in flight, so the
records of one check reach the topic in the order they were produced, and one slow partition
(its leader moving) does not hold up the others. A batch that fails with a retriable error, or
cannot be handed to the producer, goes back to the front of its lane.

Status changes: the status store tells the stream of every result of this replica whose status
differs from the check's previous result as the store knows it (this replica's runs, and
through the view the other replicas' runs); each is also a record in the status-changes topic
(:meth:`ResultsStream.status_changed`, watching the store). The first result known of a check
is not a change: there is no "from" (a replica restarted with an empty store would otherwise
announce every check).

A result's record also carries its vote header (:mod:`alivemcp.cluster.vote_header`): what
every replica's view takes from it, packed, so that the view need not parse the JSON value.

When Kafka cannot be reached (the producer cannot start, a batch cannot be handed over, or a
batch waits longer than the connection's request timeout) one warning says so; one line says
when records flow again, with how long it took and how many were dropped meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alivemcp.cluster._kafka import AIOKafkaProducer, ClusterKafka, KafkaError
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.shards import ShardMap
from alivemcp.cluster.vote_header import result_headers
from alivemcp.engine.results import CheckResult
from alivemcp.engine.status import StatusChange
from alivemcp.plumbing.kafka_partitions import close_quietly

__all__ = ["FLUSH_ON_REVOKE_SECONDS", "ResultsStream", "change_record", "result_record"]

log = structlog.get_logger("alivemcp.cluster")

#: How long a revocation waits for the revoked shards' buffered records to be acknowledged.
#: It runs inside the group's rebalance, which every member waits for.
FLUSH_ON_REVOKE_SECONDS = 5.0
#: Bytes of one produced batch (before compression); well under the brokers' 1 MiB default.
MAX_BATCH_BYTES = 256 * 1024
#: Waits between attempts to start the producer while Kafka cannot be reached.
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0

RESULTS, CHANGES = 0, 1
_KINDS = ("results", "status_changes")


def _finite(values: Iterable[tuple[str, float]]) -> dict[str, float]:
    return {k: v for k, v in values if math.isfinite(v)}


def result_record(
    result: CheckResult,
    replica: str,
    surface: Mapping[str, Any] | None = None,
    location: str = "default",
) -> bytes:
    """The results topic's value for ``result`` (JSON, UTF-8). ``surface``: what the tool
    surface tracker adds for the other replicas (its digest and approval, the whole surface
    the first time this process publishes it)."""
    check = result.check
    doc: dict[str, Any] = {
        "check": check.name,
        "probe": check.probe_type,
        "labels": dict(check.labels),
        "status": result.status.value,
        "reason": result.reason,
        "duration_seconds": result.duration_seconds,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "observations": dict(result.observations),
        "replica": replica,
        "location": location,
    }
    if result.labeled_observations:
        doc["labeled_observations"] = [
            {"name": o.name, "labels": dict(o.labels), "value": o.value}
            for o in result.labeled_observations
        ]
    if surface is not None:
        doc["surface"] = surface
    try:
        return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        # NaN or infinity somewhere: JSON has no such numbers, so those values are left out
        # rather than written as tokens other readers reject.
        doc["observations"] = _finite(result.observations.items())
        doc["duration_seconds"] = _none_if_not_finite(result.duration_seconds)
        if result.labeled_observations:
            doc["labeled_observations"] = [
                o for o in doc["labeled_observations"] if math.isfinite(o["value"])
            ]
        return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()


def _none_if_not_finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def change_record(result: CheckResult, before: str, replica: str) -> bytes:
    """The status-changes topic's value for a result whose status differs from ``before``."""
    check = result.check
    doc = {
        "check": check.name,
        "probe": check.probe_type,
        "labels": dict(check.labels),
        "from": before,
        "to": result.status.value,
        "reason": result.reason,
        "at": result.finished_at,
        "replica": replica,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(slots=True)
class _Item:
    seq: int  # arrival order: the oldest is dropped first
    key: bytes
    value: bytes
    timestamp_ms: int
    finished_at: float
    headers: list[tuple[str, bytes]]


@dataclass(slots=True)
class _InFlight:
    items: list[_Item]
    since: float  # monotonic


class ResultsStream:
    """A results-pipeline consumer and a shard listener. ``consume`` never blocks."""

    name = "results_stream"

    def __init__(
        self,
        config: ClusterConfig,
        kafka: ClusterKafka,
        registry: CollectorRegistry,
        *,
        flush_on_revoke: float = FLUSH_ON_REVOKE_SECONDS,
        surface_of: Callable[[CheckResult], Mapping[str, Any] | None] | None = None,
    ) -> None:
        """``surface_of``: the tool surface tracker's addition to a result's record."""
        self.config = config
        self.surface_of = surface_of
        self.kafka = kafka
        self.flush_on_revoke = flush_on_revoke
        self.topics = (config.topics.results, config.topics.status_changes)
        self.limit = config.produce_buffer
        self.held: frozenset[int] = frozenset()
        self._shards = config.shards
        self._shard_of = ShardMap(config.shards)
        self._replica = config.replica_id
        # Lane = kind * shards + partition: one queue and at most one batch in flight each.
        self._lanes: list[deque[_Item]] = [deque() for _ in range(2 * config.shards)]
        self._in_flight: list[_InFlight | None] = [None] * (2 * config.shards)
        self._buffered = 0  # queued in lanes, not in flight
        self._seq = 0
        self._wake = asyncio.Event()
        #: Set whenever a batch is settled (acknowledged, requeued or dropped).
        self._progress = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        #: Since when Kafka has been unreachable (monotonic), and drops counted then.
        self._down_since: float | None = None
        self._dropped_at_down = 0
        self._dropped_total = 0
        self._last_ack = 0.0
        self._stall_after = kafka.conn.request_timeout
        self._metrics(registry)

    # -- metrics ------------------------------------------------------------------------------

    def _metrics(self, registry: CollectorRegistry) -> None:
        self._produced = Counter(
            "alivemcp_cluster_produced_records",
            "Records acknowledged by Kafka (acks=all), by topic: results or status_changes.",
            ["topic"],
            registry=registry,
        )
        self._dropped = Counter(
            "alivemcp_cluster_produce_dropped_records",
            "Records never produced: buffer_full (the oldest gave way), rejected (Kafka refused "
            "the batch for good), shutdown (still buffered when the daemon stopped).",
            ["reason"],
            registry=registry,
        )
        self._errors = Counter(
            "alivemcp_cluster_produce_errors",
            "Failed attempts to produce a batch or start the producer (retried).",
            registry=registry,
        )
        self._lag = Histogram(
            "alivemcp_cluster_produce_lag_seconds",
            "From the end of a run to Kafka's acknowledgement of its result.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )
        Gauge(
            "alivemcp_cluster_produce_buffered_records",
            "Records waiting to be produced or acknowledged.",
            registry=registry,
        ).set_function(self.pending)
        Gauge(
            "alivemcp_cluster_produce_kafka_reachable",
            "0 while the results stream cannot reach Kafka, else 1.",
            registry=registry,
        ).set_function(lambda: 0.0 if self._down_since is not None else 1.0)
        for kind in _KINDS:
            self._produced.labels(topic=kind)
        for reason in ("buffer_full", "rejected", "shutdown"):
            self._dropped.labels(reason=reason)

    # -- the pipeline's side ------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        replica = result.replica or self._replica
        surface = (
            self.surface_of(result)
            if self.surface_of is not None and result.surface is not None
            else None
        )
        location = self.config.location
        self._enqueue_for(
            RESULTS,
            result,
            result_record(result, replica, surface, location),
            result_headers(result, replica, location, surface=surface is not None),
        )

    def publish(self, check: str, doc: Mapping[str, Any]) -> None:
        """Another record about ``check`` on the results topic (a tool-surface approval made
        here, for the replica that probes the check and every other view)."""
        value = json.dumps({**doc, "check": check, "replica": self._replica}).encode()
        now = time.time()
        self._enqueue(
            RESULTS, self._shard_of(check), check.encode(), value, int(now * 1000), now, []
        )

    def status_changed(self, change: StatusChange) -> None:
        """A watcher of the status store: the change goes to the status-changes topic."""
        result = change.result
        replica = result.replica or self._replica
        self._enqueue_for(CHANGES, result, change_record(result, change.before.value, replica))

    def _enqueue_for(
        self,
        kind: int,
        result: CheckResult,
        value: bytes,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        name = result.check.name
        stamp = int(result.finished_at * 1000) if math.isfinite(result.finished_at) else None
        timestamp_ms = stamp if stamp is not None and stamp >= 0 else int(time.time() * 1000)
        self._enqueue(
            kind,
            self._shard_of(name),
            name.encode(),
            value,
            timestamp_ms,
            result.finished_at,
            headers or [],
        )

    def _enqueue(
        self,
        kind: int,
        shard: int,
        key: bytes,
        value: bytes,
        timestamp_ms: int,
        finished_at: float,
        headers: list[tuple[str, bytes]],
    ) -> None:
        if self._closing:
            self._drop("shutdown", 1)
            return
        if self._buffered >= self.limit:
            self._drop_oldest()
        self._seq += 1
        self._lanes[kind * self._shards + shard].append(
            _Item(self._seq, key, value, timestamp_ms, finished_at, headers)
        )
        self._buffered += 1
        self._wake.set()

    def _drop_oldest(self) -> None:
        oldest: deque[_Item] | None = None
        for lane in self._lanes:
            if lane and (oldest is None or lane[0].seq < oldest[0].seq):
                oldest = lane
        if oldest is not None:
            oldest.popleft()
            self._buffered -= 1
            self._drop("buffer_full", 1)

    def _drop(self, reason: str, count: int) -> None:
        self._dropped.labels(reason=reason).inc(count)
        self._dropped_total += count

    def pending(self) -> int:
        """Records not yet acknowledged (buffered or in flight)."""
        return self._buffered + sum(len(f.items) for f in self._in_flight if f is not None)

    def pending_for(self, shards: Iterable[int]) -> int:
        count = 0
        for shard in shards:
            for lane in (shard, self._shards + shard):
                flight = self._in_flight[lane]
                count += len(self._lanes[lane]) + (len(flight.items) if flight else 0)
        return count

    # -- the shard listener's side ------------------------------------------------------------

    async def on_assigned(self, shards: frozenset[int]) -> None:
        self.held = self.held | shards

    async def on_revoked(self, shards: frozenset[int]) -> None:
        """Probing of these shards has stopped (the node revokes probing first): wait, within
        ``flush_on_revoke``, until their last results are on the broker, so the next owner's
        view starts from them."""
        self.held = self.held - shards
        # Kafka known unreachable (the usual reason a replica fences itself): waiting would
        # only delay the revocation; the records stay buffered and go out when it is back.
        wait = 0.0 if self._down_since is not None else self.flush_on_revoke
        left = await self.flush(shards, wait)
        if left:
            log.warning(
                "results of revoked shards not yet acknowledged; they are sent later",
                shards=sorted(shards),
                records=left,
                waited_seconds=wait,
            )

    async def flush(self, shards: Iterable[int] | None = None, timeout: float = 5.0) -> int:
        """Wait until the records of ``shards`` (all: None) are acknowledged; returns how many
        are still waiting when ``timeout`` runs out (0: all done)."""
        wanted = list(range(self._shards)) if shards is None else list(shards)
        deadline = time.monotonic() + timeout
        self._wake.set()
        while (left := self.pending_for(wanted)) and (wait := deadline - time.monotonic()) > 0:
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(wait, 0.5)):
                    await self._progress.wait()
        return left

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start producing in the background (Kafka unreachable now only delays records)."""
        if self._task is None:
            self._closing = False
            self._task = asyncio.create_task(self._pump(), name="cluster-results-stream")

    async def stop(self, timeout: float = 5.0) -> None:
        """Produce what is buffered (within ``timeout``), then close the producer. What is
        still waiting after that is dropped and counted."""
        deadline = time.monotonic() + timeout
        left = await self.flush(None, max(0.0, timeout * 0.8))
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        producer, self._producer = self._producer, None
        if producer is not None:
            await close_quietly(producer, max(0.5, deadline - time.monotonic()))
        left = self.pending()
        if left:
            self._drop("shutdown", left)
            log.warning("results not produced before the stop", records=left)
        for lane in self._lanes:
            lane.clear()
        self._in_flight = [None] * len(self._in_flight)
        self._buffered = 0

    # -- the producing task ------------------------------------------------------------------

    async def _pump(self) -> None:
        backoff = RETRY_MIN_SECONDS
        while True:
            producer = self._producer
            if producer is None or _producer_dead(producer):
                producer = await self._new_producer()
                if producer is None:
                    await asyncio.sleep(backoff)
                    backoff = min(RETRY_MAX_SECONDS, backoff * 2)
                    continue
                backoff = RETRY_MIN_SECONDS
            if not await self._launch(producer):
                await asyncio.sleep(backoff)
                backoff = min(RETRY_MAX_SECONDS, backoff * 2)
                continue
            backoff = RETRY_MIN_SECONDS
            self._watch()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):  # the stall watch runs at least every second
                    await self._wake.wait()

    async def _new_producer(self) -> AIOKafkaProducer | None:
        old, self._producer = self._producer, None
        if old is not None:
            # Its batches will never be acknowledged: send them again with the new one.
            self._requeue_all_in_flight()
            closing = asyncio.create_task(close_quietly(old))
            self._background.add(closing)
            closing.add_done_callback(self._background.discard)
        producer: AIOKafkaProducer | None = None
        try:
            producer = await self.kafka.producer(
                enable_idempotence=True,
                acks="all",
                compression_type=None
                if self.config.compression == "none"
                else self.config.compression,
                max_batch_size=MAX_BATCH_BYTES,
                linger_ms=0,
            )
            async with asyncio.timeout(self._stall_after * 2):
                await producer.start()
        except Exception as exc:  # KafkaError, OSError, the plumbing's settings errors
            self._errors.inc()
            self._unreachable(exc)
            if producer is not None:
                await close_quietly(producer, 2.0)
            return None
        self._producer = producer
        self._reachable()
        return producer

    async def _launch(self, producer: AIOKafkaProducer) -> bool:
        """Hand one batch to the producer for every idle lane with records; False when one
        could not be handed over (the rest wait for the next round)."""
        for lane, queue in enumerate(self._lanes):
            if not queue or self._in_flight[lane] is not None:
                continue
            kind, partition = divmod(lane, self._shards)
            batch = producer.create_batch()
            taken: list[_Item] = []
            while queue:
                item = queue[0]
                if (
                    batch.append(
                        timestamp=item.timestamp_ms,
                        key=item.key,
                        value=item.value,
                        headers=item.headers,
                    )
                    is None
                ):
                    break
                taken.append(queue.popleft())
            self._buffered -= len(taken)
            flight = self._in_flight[lane] = _InFlight(taken, time.monotonic())
            try:
                # Each lane has nothing in flight: the producer takes the batch at once
                # unless it is waiting for the topic's metadata.
                async with asyncio.timeout(self._stall_after):
                    future = await producer.send_batch(
                        batch, self.topics[kind], partition=partition
                    )
            except (KafkaError, TimeoutError) as exc:
                if self._in_flight[lane] is flight:
                    self._in_flight[lane] = None
                    self._requeue(lane, taken)
                self._errors.inc()
                self._unreachable(exc)
                return False
            future.add_done_callback(
                lambda fut, lane=lane, flight=flight: self._done(lane, flight, fut)
            )
        return True

    def _done(self, lane: int, flight: _InFlight, future: asyncio.Future[Any]) -> None:
        if self._in_flight[lane] is not flight:
            return  # given up on (the producer was replaced); its records were requeued
        self._in_flight[lane] = None
        self._wake.set()
        self._progress.set()
        exc = None if future.cancelled() else future.exception()
        if future.cancelled() or (exc is not None and _worth_retrying(exc)):
            self._errors.inc()
            self._requeue(lane, flight.items)
            if exc is not None:
                self._unreachable(exc)
            return
        if exc is not None:
            self._errors.inc()
            self._drop("rejected", len(flight.items))
            log.error(
                "Kafka rejected a batch of records; they are dropped",
                topic=self.topics[lane // self._shards],
                records=len(flight.items),
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        self._last_ack = time.monotonic()
        now = time.time()
        for item in flight.items:
            self._lag.observe(max(0.0, now - item.finished_at))
        self._produced.labels(topic=_KINDS[lane // self._shards]).inc(len(flight.items))
        self._reachable()

    def _requeue(self, lane: int, items: list[_Item]) -> None:
        """Back to the front of their lane, in order; the bound still holds."""
        if self._closing:
            return
        self._lanes[lane].extendleft(reversed(items))
        self._buffered += len(items)
        while self._buffered > self.limit:
            self._drop_oldest()

    def _requeue_all_in_flight(self) -> None:
        for lane, flight in enumerate(self._in_flight):
            if flight is not None:
                self._in_flight[lane] = None
                self._requeue(lane, flight.items)

    def _watch(self) -> None:
        """A batch unacknowledged for longer than a request may take, and no other one
        acknowledged meanwhile: Kafka is not there (an idempotent producer retries the batch
        until it is)."""
        if self._down_since is not None:
            return
        now = time.monotonic()
        for flight in self._in_flight:
            # Acknowledgements arriving (for other batches) mean Kafka is there and busy.
            if flight is not None and now - max(flight.since, self._last_ack) > self._stall_after:
                self._unreachable(
                    TimeoutError(
                        f"a batch waits for acknowledgement for over {self._stall_after:g}s"
                    )
                )
                return

    # -- the two log lines --------------------------------------------------------------------

    def _unreachable(self, exc: BaseException) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self._dropped_at_down = self._dropped_total
        log.warning(
            "Kafka unreachable: results wait in the produce buffer (oldest dropped beyond "
            "the limit); probing goes on",
            kafka=self.kafka.describe(),
            error=f"{type(exc).__name__}: {exc}",
            buffered=self.pending(),
            buffer_limit=self.limit,
        )

    def _reachable(self) -> None:
        if self._down_since is None:
            return
        down = time.monotonic() - self._down_since
        self._down_since = None
        log.info(
            "Kafka reachable again: results are produced",
            kafka=self.kafka.describe(),
            down_seconds=round(down, 1),
            dropped=self._dropped_total - self._dropped_at_down,
            buffered=self.pending(),
        )


def _worth_retrying(exc: BaseException) -> bool:
    """Kafka's retriable errors and timeouts: the records go out again."""
    return isinstance(exc, TimeoutError) or bool(getattr(exc, "retriable", False))


def _producer_dead(producer: AIOKafkaProducer) -> bool:
    """The producer's sender task ended (a fatal error such as a fenced producer id): its
    batches are never sent. aiokafka 0.14 exposes no public flag for it."""
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    return task is not None and task.done()
