"""The global view: every replica reads every partition of the results topic.

Results of other replicas are votes of their locations: they go to the quorum stage
(:class:`~alivemcp.cluster.verdicts.Verdicts`, ``votes``), whose verdicts reach the status
store (/status, the status page and the API show every check), alerting and history. Every
result, this replica's own included, goes to history as its location's own result
(``check@location``, when the check has several locations), once per record. Without
``votes`` (a view on its own) results go to the status store and history as they are.

Position. The next offset of every partition is saved in ``data_dir`` every few seconds (after
history has written what was read up to it) and when the view stops; a restart resumes there,
so history gets each record once. The status store starts empty in a new process, so reading
begins a little earlier, at ``view_replay`` before now, for the store only: records before the
saved position refill the status of every check (previous statuses also decide what the
results stream calls a status change) and are not given to history again. Without a saved
position the view starts ``view_replay`` before now, for both. A saved position older than
the topic's retention starts at the oldest record kept.

Handover. A replica that gains a shard asks the view to read the shard's partition up to where
it ends at that moment (:meth:`ResultsView.read_to_end`) before it schedules the shard's
checks: the previous owner flushed its last results before it gave the shard up, and the new
owner must know when they ran, or it would run them again within their interval. The wait is
bounded (it happens inside the group's rebalance, when aiokafka sends no heartbeat); past the
bound the checks are scheduled on what the view knows, as if it had not waited. (A shard that
comes straight back to the replica that held it is not read: nobody else ran its checks.)

Our own records. Records with this replica's id are the echo of this process's runs (already
in the store through the pipeline) when their run started after the view did; older ones were
written by an earlier process with the same id and refill the store like the others.

Whatever is in the topic, the view does not crash: a record that is not a result
(:mod:`alivemcp.cluster.result_record`) is dropped and counted, and so is one for a check this
config does not have, or one in a partition that is not its check's shard. Labels and probe
type come from this replica's config, never from the record.

Cost. Every replica reads every result of every location, so a record is read from its vote
header (:mod:`alivemcp.cluster.vote_header`: a few fields packed, checked as strictly as the
JSON value) and its JSON value is parsed only when the header says the value holds more
(labeled observations, a tool-surface part) or the result is not up (the results alerting acts
on): then the two must agree, or the record is dropped as invalid. Records without the header
(written by older replicas, or approvals) are read from their JSON value as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from alivemcp.cluster._kafka import AIOKafkaConsumer, ClusterKafka, TopicPartition
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.result_record import decode_doc, parse_record
from alivemcp.cluster.shards import ShardMap
from alivemcp.cluster.vote_header import decode_vote, find_vote, needs_value, same_vote
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.plumbing.kafka_partitions import close_quietly

__all__ = ["POSITION_FILE", "ResultsView"]

log = structlog.get_logger("alivemcp.cluster")

POSITION_FILE = "cluster-view.json"
SAVE_EVERY_SECONDS = 5.0
#: How long ``start()`` waits for the replay to be read (the rest is read in the background).
START_WAIT_SECONDS = 10.0
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 10.0
#: The longest :meth:`ResultsView.read_to_end` waits at a handover; also at most a fifth of the
#: session timeout (no heartbeat goes out while the node's listeners act on an assignment).
HANDOVER_WAIT_SECONDS = 2.0
HANDOVER_WAIT_SESSION_SHARE = 0.2
#: Records handed over per fetch: the event loop gets a turn between batches.
MAX_RECORDS = 2000

DROP_REASONS = ("invalid", "unknown_check", "wrong_partition", "error")
HANDOVER_OUTCOMES = ("read", "timeout", "failed", "not_ready")


class VoteSink(Protocol):
    """Takes every replica's results as votes of their locations (the quorum stage)."""

    def take(self, result: CheckResult, location: str, *, to_history: bool = True) -> None: ...

    def take_history(self, result: CheckResult, location: str) -> None: ...


class SurfaceSink(Protocol):
    """Takes the tool-surface part of another replica's record (the surface tracker)."""

    def take_remote(
        self, check: str, data: Mapping[str, Any], at: float, info: CheckInfo | None = None
    ) -> None: ...


class ResultsView:
    name = "view"

    def __init__(
        self,
        config: ClusterConfig,
        kafka: ClusterKafka,
        store: StatusStore,
        history: HistoryStore | None,
        data_dir: Path,
        registry: CollectorRegistry,
        *,
        replay: float | None = None,
        save_every: float = SAVE_EVERY_SECONDS,
        start_wait: float = START_WAIT_SECONDS,
        surfaces: SurfaceSink | None = None,
        handover_wait: float | None = None,
        votes: VoteSink | None = None,
    ) -> None:
        """``surfaces``: where the tool-surface parts of records go (other replicas' surface
        versions and approvals, for this replica's surface store). ``handover_wait``: the
        bound of :meth:`read_to_end` (None: 2 s, at most a fifth of the session timeout)."""
        self.config = config
        self.surfaces = surfaces
        self.votes = votes
        self.kafka = kafka
        self.store = store
        self.history = history
        self.path = Path(data_dir) / POSITION_FILE
        self.topic = config.topics.results
        self.replay = config.view_replay if replay is None else replay
        self.save_every = save_every
        self.start_wait = start_wait
        self.handover_wait = (
            min(HANDOVER_WAIT_SECONDS, config.session_timeout * HANDOVER_WAIT_SESSION_SHARE)
            if handover_wait is None
            else handover_wait
        )
        self._replica = config.replica_id
        self._location = config.location
        self._shards = config.shards
        self._shard_of = ShardMap(config.shards)
        #: Next offset to read, per partition (None until positioned).
        self._next: list[int] | None = None
        #: Per partition: records from this offset on go to history (earlier ones were given
        #: to it by an earlier process).
        self._history_from: list[int] = []
        self._catch_up_to: list[int] = []
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._saver: asyncio.Task[None] | None = None
        self._born = 0.0
        #: Locations seen running a replica with this replica's id (told once each).
        self.id_clashes: set[str] = set()
        self.caught_up = asyncio.Event()
        #: Set (and replaced by a fresh one) after every fetch taken: wakes read_to_end.
        self._progress = asyncio.Event()
        self._metrics(registry)

    def _metrics(self, registry: CollectorRegistry) -> None:
        self._taken = Counter(
            "alivemcp_cluster_view_records",
            "Records read from the results topic: status (another replica's run, shown in "
            "/status), own (this process's run, already shown; history only) or "
            "surface_approval (a tool-surface approval made on another replica).",
            ["outcome"],
            registry=registry,
        )
        self._dropped = Counter(
            "alivemcp_cluster_view_dropped_records",
            "Records of the results topic not taken: invalid (not a result), unknown_check "
            "(not in this config), wrong_partition (not in its check's shard), error.",
            ["reason"],
            registry=registry,
        )
        Gauge(
            "alivemcp_cluster_view_behind_records",
            "Records of the results topic not read yet (as of the last fetch).",
            registry=registry,
        ).set_function(self.behind)
        Gauge(
            "alivemcp_cluster_view_caught_up",
            "1 once the view has read the results topic up to where it ended at start.",
            registry=registry,
        ).set_function(lambda: 1.0 if self.caught_up.is_set() else 0.0)
        Gauge(
            "alivemcp_cluster_view_replica_id_clashes",
            "Other locations whose results, written since this process started, carry this "
            "replica's id: replica ids must be unique across every location (two replicas "
            "with one id fence each other in the verdict group).",
            registry=registry,
        ).set_function(lambda: float(len(self.id_clashes)))
        self._handover_reads = Counter(
            "alivemcp_cluster_view_handover_reads",
            "Reads of gained shards' partitions to their end before their checks are "
            "scheduled: read (in time), timeout (not within the bound: scheduled on what the "
            "view knew), failed (end offsets unknown), not_ready (the view had not caught up "
            "since start: no wait).",
            ["outcome"],
            registry=registry,
        )
        for outcome in HANDOVER_OUTCOMES:
            self._handover_reads.labels(outcome=outcome)
        for outcome in ("status", "own", "surface_approval"):
            self._taken.labels(outcome=outcome)
        for reason in DROP_REASONS:
            self._dropped.labels(reason=reason)
        # Nearly every record counts in one of these: counted here, added after each fetch.
        self._taken_status = self._taken.labels(outcome="status")
        self._taken_own = self._taken.labels(outcome="own")
        self._status_count = self._own_count = 0
        self._dropped_invalid = self._dropped.labels(reason="invalid")

    def behind(self) -> float:
        consumer, positions = self._consumer, self._next
        if consumer is None or positions is None:
            return 0.0
        total = 0
        for partition, position in enumerate(positions):
            high = consumer.highwater(TopicPartition(self.topic, partition))
            if high is not None:
                total += max(0, high - position)
        return float(total)

    async def read_to_end(self, shards: Iterable[int], timeout: float | None = None) -> bool:
        """Wait until the partitions of ``shards`` are read up to where they end now, for at
        most ``timeout`` (None: ``handover_wait``). True when read; False when the bound ran
        out, the end offsets could not be had, or the view has not caught up since start (it
        is reading a backlog, within ``start_wait`` already waited for: no wait then)."""
        consumer = self._consumer
        if consumer is None or self._next is None or not self.caught_up.is_set():
            self._handover_reads.labels(outcome="not_ready").inc()
            return False
        wait = self.handover_wait if timeout is None else timeout
        tps = [TopicPartition(self.topic, p) for p in sorted(set(shards))]
        started = time.monotonic()
        outcome = "read"
        try:
            async with asyncio.timeout(wait):
                # A ListOffsets request of its own: safe beside the fetch loop's getmany.
                ends = await consumer.end_offsets(tps)
                while not self._reached(ends):
                    await self._progress.wait()
        except TimeoutError:
            outcome = "timeout"
        except Exception as exc:  # KafkaError mostly: the handover goes on without the wait
            outcome = "failed"
            log.warning(
                "results view: end of gained shards unknown", error=f"{type(exc).__name__}: {exc}"
            )
        self._handover_reads.labels(outcome=outcome).inc()
        if outcome == "timeout":
            log.warning(
                "results view did not read gained shards to their end in time; their checks "
                "are scheduled on what it knows",
                shards=len(tps),
                waited_seconds=round(time.monotonic() - started, 3),
            )
        return outcome == "read"

    def _reached(self, ends: Mapping[TopicPartition, int]) -> bool:
        positions = self._next
        return positions is not None and all(
            positions[tp.partition] >= end for tp, end in ends.items()
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start reading; wait up to ``start_wait`` for the replay (so that statuses are known
        before this replica probes), then go on in the background. Kafka unreachable delays
        the view, it does not stop the start."""
        if self._task is not None:
            return
        self._born = time.time()
        self._task = asyncio.create_task(self._run(), name="cluster-results-view")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.start_wait):
                await self.caught_up.wait()

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop reading; save the position once history has written what was read."""
        deadline = time.monotonic() + timeout
        for task in (self._task, self._saver):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._saver = None
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await close_quietly(consumer, max(0.5, (deadline - time.monotonic()) / 2))
        await self._save(max(0.1, deadline - time.monotonic()))

    # -- reading ------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = RETRY_MIN_SECONDS
        failing = False
        while self._consumer is None:
            try:
                await self._connect()
            except Exception as exc:  # KafkaError, OSError, timeouts, settings errors
                if not failing:
                    log.warning(
                        "results view cannot read the results topic yet; retrying",
                        kafka=self.kafka.describe(),
                        topic=self.topic,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    failing = True
                await asyncio.sleep(backoff)
                backoff = min(RETRY_MAX_SECONDS, backoff * 2)
        if failing:
            log.info("results view reads the results topic", topic=self.topic)
        self._saver = asyncio.create_task(self._save_periodically(), name="cluster-view-save")
        started = time.monotonic()
        taken = 0
        consumer = self._consumer
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
            except Exception as exc:  # KafkaError mostly; the view must outlive any of them
                log.warning(
                    "results view fetch failed; retrying", error=f"{type(exc).__name__}: {exc}"
                )
                await asyncio.sleep(1.0)
                continue
            take = self._take
            for tp, records in batches.items():
                partition = tp.partition
                for record in records:
                    take(partition, record.offset, record.value, record.key, record.headers)
                taken += len(records)
            self._count_taken()
            self._progress.set()
            self._progress = asyncio.Event()
            if not self.caught_up.is_set() and self._reached_start_end():
                self.caught_up.set()
                log.info(
                    "results view caught up",
                    records=taken,
                    seconds=round(time.monotonic() - started, 2),
                )
            await asyncio.sleep(0)

    async def _connect(self) -> None:
        consumer = await self.kafka.consumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=500,
            isolation_level="read_uncommitted",
        )
        try:
            async with asyncio.timeout(self.kafka.conn.request_timeout * 3):
                await consumer.start()
                await self._position(consumer)
        except BaseException:
            await close_quietly(consumer, 2.0)
            raise
        self._consumer = consumer

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        tps = [TopicPartition(self.topic, p) for p in range(self._shards)]
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        since_ms = int((time.time() - self.replay) * 1000)
        found = await consumer.offsets_for_times({tp: max(0, since_ms) for tp in tps})
        saved = self._load()
        start_at, history_from = [], []
        for tp in tps:
            found_at = found.get(tp)
            replay_at = end[tp] if self.replay <= 0 or found_at is None else found_at.offset
            position = saved.get(tp.partition) if saved is not None else None
            if position is not None and position > end[tp]:
                position = None  # the topic was created again: the saved position is void
            if position is not None:
                position = max(position, begin[tp])
                start_at.append(min(position, replay_at))
                history_from.append(position)
            else:
                start_at.append(replay_at)
                history_from.append(replay_at)
            consumer.seek(tp, start_at[-1])
        self._history_from = history_from
        self._catch_up_to = [end[tp] for tp in tps]
        self._next = start_at
        log.info(
            "results view positioned",
            topic=self.topic,
            saved_position=saved is not None,
            replay_seconds=self.replay,
            records_to_read=sum(e - s for e, s in zip(self._catch_up_to, start_at, strict=True)),
        )

    def _reached_start_end(self) -> bool:
        positions = self._next
        return positions is not None and all(
            n >= e for n, e in zip(positions, self._catch_up_to, strict=True)
        )

    def _take(
        self,
        partition: int,
        offset: int,
        value: bytes | None,
        key: bytes | None = None,
        headers: Any = (),
    ) -> None:
        assert self._next is not None
        self._next[partition] = offset + 1
        try:
            header = find_vote(headers) if headers else None
            doc: dict[str, Any] | None = None
            if header is not None:
                name, outcome, flags = decode_vote(header, key, self.store)
                if not isinstance(outcome, str) and needs_value(outcome, flags):
                    # The value has more than the header, or alerting may act on the result:
                    # read it too, and take it only if it says what the header says.
                    doc = parse_record(value)
                    full = decode_doc(doc, self.store)[1] if doc is not None else "invalid"
                    if isinstance(full, str) or not same_vote(full, outcome):
                        outcome = "invalid"
                    else:
                        outcome = full
            else:
                doc = parse_record(value)
                if doc is None:
                    self._dropped_invalid.inc()
                    return
                if "surface_approval" in doc:
                    self._take_approval(partition, doc)
                    return
                name, outcome = decode_doc(doc, self.store)
            if isinstance(outcome, str):
                self._dropped.labels(reason=outcome).inc()
                return
            if self._shard_of(name) != partition:
                self._dropped.labels(reason="wrong_partition").inc()
                return
            new_to_history = offset >= self._history_from[partition]
            votes = self.votes
            if votes is not None:
                if new_to_history:
                    votes.take_history(outcome, outcome.location)
            elif self.history is not None and new_to_history:
                self.history.consume(outcome)
            if doc is not None:
                surface = doc.get("surface")
                if (
                    self.surfaces is not None
                    and type(surface) is dict
                    and outcome.replica != self._replica
                ):
                    self.surfaces.take_remote(name, surface, outcome.finished_at, outcome.check)
            if outcome.replica == self._replica and outcome.started_at >= self._born:
                if outcome.location == self._location:
                    self._own_count += 1  # the echo of a run of this process
                    return
                self._clash(outcome.location)
            if votes is not None:
                votes.take(outcome, outcome.location, to_history=new_to_history)
            else:
                self.store.record(outcome)
            self._status_count += 1
        except Exception:  # a record must never stop the view
            self._dropped.labels(reason="error").inc()
            log.exception(
                "results view could not take a record", partition=partition, offset=offset
            )

    def _clash(self, location: str) -> None:
        """A replica of ``location`` runs with this replica's id (a hand-set id repeated)."""
        if location in self.id_clashes:
            return
        self.id_clashes.add(location)
        log.error(
            "another location runs a replica with this replica's id: replica ids must be "
            "unique across every location (they fence each other in the verdict group); "
            "set cluster.replica_id apart, or leave it empty (<location>.<host>)",
            replica=self._replica,
            location=self._location,
            other_location=location,
        )

    def _count_taken(self) -> None:
        if self._status_count:
            self._taken_status.inc(self._status_count)
            self._status_count = 0
        if self._own_count:
            self._taken_own.inc(self._own_count)
            self._own_count = 0

    def _take_approval(self, partition: int, doc: dict[str, Any]) -> None:
        """A tool-surface approval another replica published (its CLI was used there)."""
        name = doc.get("check")
        if type(name) is not str or self._shard_of(name) != partition:
            self._dropped.labels(reason="invalid").inc()
            return
        if self.surfaces is not None and doc.get("replica") != self._replica:
            self.surfaces.take_remote(name, {"approved": doc["surface_approval"]}, time.time())
        self._taken.labels(outcome="surface_approval").inc()

    # -- the saved position -------------------------------------------------------------------

    async def _save_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.save_every)
            await self._save(self.save_every)

    async def _save(self, timeout: float) -> None:
        """Save the position reached, after history has written every record before it."""
        if self._next is None:
            return
        positions = list(self._next)
        if self.history is not None:
            await self.history.flush(timeout)
        doc = {
            "topic": self.topic,
            "partitions": self._shards,
            "offsets": positions,
            "saved_at": time.time(),
        }
        try:
            await asyncio.to_thread(_write_atomically, self.path, json.dumps(doc))
        except OSError as exc:
            log.warning(
                "results view could not save its position", path=str(self.path), error=str(exc)
            )

    def _load(self) -> Mapping[int, int] | None:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning(
                "results view position unreadable; starting from the replay window",
                path=str(self.path),
                error=str(exc),
            )
            return None
        if (
            type(doc) is not dict
            or doc.get("topic") != self.topic
            or doc.get("partitions") != self._shards
        ):
            log.info(
                "results view position is for another topic or shard count; ignored",
                path=str(self.path),
            )
            return None
        offsets = doc.get("offsets")
        if type(offsets) is not list or len(offsets) != self._shards:
            return None
        return {p: o for p, o in enumerate(offsets) if type(o) is int and o >= 0}


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
