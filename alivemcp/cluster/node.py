"""The replica's seat in the consumer group: shards gained and lost, and the lease that fences.

One :class:`~aiokafka.AIOKafkaConsumer` in group ``config.group`` subscribes to the results
topic with static membership (``group_instance_id`` = the replica id). It never reads a
record: every partition it is assigned is paused at once, and it is polled only so that
aiokafka's ``max_poll_interval`` never counts it idle. The group's partition assignment is the
shard assignment (the sticky assignor: shards stay where they are when replicas come and go).

Rebalances: aiokafka awaits its rebalance listener, and so does this node: a revocation is
passed to every :class:`~alivemcp.cluster.contract.ShardListener` in reverse order (probing
stops first) and only then does aiokafka rejoin the group, so no shard is given to another
replica while it is still probed here. Assignments are passed in order (alert state first).

The lease (split brain). aiokafka revokes nothing when it loses the group coordinator: it
keeps looking for one, and the revocation comes only once it can rejoin. Meanwhile the
coordinator expires the member after ``session_timeout`` and gives its shards to the others.
So the node proves its membership itself, through the one thing Kafka fences by generation:
every ``heartbeat_interval`` it commits offsets for its shards, and a commit is accepted only
from a live member of the current generation. If no commit sent at time *t* has succeeded and
now is past ``t + session_timeout - 2 * heartbeat_interval``, the node fences: the listeners
are told the shards are revoked (probing stops) before the coordinator can have handed them
on (it expires a member no sooner than ``session_timeout`` after its last heartbeat, and the
heartbeats were going until about *t*). A commit that succeeds again, or a new assignment,
ends the fence (``on_assigned`` again: alert state is re-read, another replica may have
owned the shard meanwhile). The committed offsets are the partitions' end offsets as last
seen, so lag tools show the group near zero while it is healthy.

Results of a check are published only while its shard is held and the lease is live
(:meth:`ClusterNode.may_publish`): a process frozen past its lease (a VM pause) may start a
run in the instant it thaws, but its result goes nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alivemcp.cluster._kafka import (
    AIOKafkaConsumer,
    ClusterKafka,
    ConsumerRebalanceListener,
    KafkaError,
    StickyPartitionAssignor,
    TopicPartition,
)
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.contract import ShardListener
from alivemcp.cluster.shards import ShardMap
from alivemcp.plumbing.kafka import KafkaPlumbingError
from alivemcp.plumbing.kafka_partitions import close_quietly

__all__ = ["ClusterNode"]

log = structlog.get_logger("alivemcp.cluster")

#: The lease ends this many heartbeat intervals before the session timeout would.
LEASE_MARGIN_HEARTBEATS = 2
#: Between two attempts to (re)build the group consumer.
RETRY_SECONDS = 2.0
#: A poll of the (paused) consumer waits at most this long.
POLL_MS = 500
#: Consecutive poll errors after which the consumer is rebuilt.
POLL_ERRORS_BEFORE_REBUILD = 5
#: End offsets (what the lease commits) are refreshed this often.
ENDS_EVERY_SECONDS = 30.0


def _stray_cancel() -> bool:
    """Whether a CancelledError caught now is not a cancellation of the current task: one a
    library raised for a task of its own (aiokafka's stop() does, for a fetch it cancels in
    its back-off). Such a one is an error like any other: passed on, it would end a task
    nobody cancelled (aiokafka's group coordination, this node's membership loop)."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


def _sticky_assignor() -> type[StickyPartitionAssignor]:
    """aiokafka's sticky assignor keeps the member's last assignment in class attributes; a
    subclass per node keeps two nodes of one process (tests) from sharing it."""
    return type(
        "StickyAssignor", (StickyPartitionAssignor,), {"member_assignment": None, "generation": -1}
    )


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    async def on_partitions_revoked(self, revoked: object) -> None:
        await self._node._leave_generation(None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._node._assigned_by_group(assigned)


class ClusterNode:
    """Membership, shard assignment and the lease of one replica."""

    def __init__(
        self,
        config: ClusterConfig,
        kafka: ClusterKafka,
        listeners: Sequence[ShardListener],
        registry: CollectorRegistry,
        *,
        shard_map: ShardMap | None = None,
        group: str | None = None,
        role: str = "",
    ) -> None:
        """``shard_map``: a check-to-shard cache to share (the daemon's probing uses it).
        ``group``: the consumer group (default ``config.group``). ``role``: "" for the
        probing group (metrics ``alivemcp_cluster_*``), else a word that goes into its
        metrics' names (``alivemcp_cluster_<role>_*``) and its logs."""
        self.config = config
        self.group = config.group if group is None else group
        self.role = role
        self.kafka = kafka
        self.listeners = tuple(listeners)
        self.topic = config.topics.results
        self.shard_of = shard_map if shard_map is not None else ShardMap(config.shards)
        #: What the group assigned (current generation); empty between generations.
        self.assigned: frozenset[int] = frozenset()
        #: What the listeners act on: ``assigned``, unless fenced.
        self.held: frozenset[int] = frozenset()
        self.fenced = False
        #: The shards of the latest assignment this replica held right up to the rebalance
        #: before it (no fence, no new consumer between): nobody else probed them meanwhile,
        #: so the results known here are their latest.
        self.returning: frozenset[int] = frozenset()
        #: Shards given up in the rebalance under way, and when (monotonic).
        self._released: tuple[frozenset[int], float] = (frozenset(), 0.0)
        self.lease_seconds = (
            config.session_timeout - LEASE_MARGIN_HEARTBEATS * config.heartbeat_interval
        )
        self._joined = False  # a member of the current generation, as far as we know
        self._lease_from = 0.0  # monotonic: send time of the latest accepted commit
        self._epoch = 0  # bumped on every assignment change; a commit counts for its epoch only
        self._ends: dict[int, int] = {}
        self._ends_at = 0.0
        self._lock = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._unfencing: asyncio.Task[None] | None = None
        self._stopping = False
        self._trouble: str | None = None  # the last problem logged (logged once until it ends)
        self._metrics(registry)

    # -- metrics ------------------------------------------------------------------------------

    def _metrics(self, registry: CollectorRegistry) -> None:
        prefix = f"alivemcp_cluster_{self.role}_" if self.role else "alivemcp_cluster_"
        Gauge(
            f"{prefix}member",
            "1 while this replica is a member of the group in good standing (joined, lease "
            "live); 0 while joining, fenced, or away from Kafka.",
            registry=registry,
        ).set_function(lambda: 1.0 if self.member else 0.0)
        Gauge(
            f"{prefix}shards_held",
            "Shards this replica holds in its group (probing: the checks it probes; verdict: "
            "the checks whose verdicts, pages and alert state it keeps).",
            registry=registry,
        ).set_function(lambda: float(len(self.held)))
        Gauge(f"{prefix}shards", "Shards in all (cluster.shards).", registry=registry).set(
            self.config.shards
        )
        Gauge(
            f"{prefix}lease_age_seconds",
            "Seconds since the last commit the group coordinator accepted (the lease ends "
            "at session_timeout - 2 x heartbeat_interval); 0 when holding no shards.",
            registry=registry,
        ).set_function(self._lease_age)
        self._rebalances = Counter(
            f"{prefix}rebalances",
            "Shard assignments received from the group.",
            registry=registry,
        )
        self._fences = Counter(
            f"{prefix}fenced",
            "Times this replica stopped probing its shards because its lease ran out "
            "(no contact with the group coordinator).",
            registry=registry,
        )
        self._withheld = Counter(
            f"{prefix}results_withheld",
            "Results of this replica's runs not published: their shard was no longer held, "
            "or the lease had run out, when the run finished.",
            registry=registry,
        )
        self._listener_errors = Counter(
            f"{prefix}listener_errors",
            "Shard listeners (probing, results stream, alert state) that failed or overran "
            "when told of shards gained or lost.",
            ["listener"],
            registry=registry,
        )
        self._handover = Histogram(
            f"{prefix}handover_seconds",
            "Time the listeners took to act on shards gained (assign) or lost (revoke).",
            ["phase"],
            registry=registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
        )
        for listener in self.listeners:
            self._listener_errors.labels(listener=listener.name)
        for phase in ("assign", "revoke"):
            self._handover.labels(phase=phase)
        self._pause = Histogram(
            f"{prefix}rebalance_pause_seconds",
            "Time from giving up this replica's shards in a rebalance to holding the new "
            "assignment: the checks it kept were not probed meanwhile.",
            registry=registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
        )

    def _lease_age(self) -> float:
        return time.monotonic() - self._lease_from if self.held else 0.0

    # -- what the rest of the replica asks -----------------------------------------------------

    @property
    def member(self) -> bool:
        return self._joined and not self.fenced

    def owns(self, name: str) -> bool:
        """Whether the check ``name`` is in a shard this replica holds."""
        return self.shard_of(name) in self.held

    def lease_live(self) -> bool:
        return time.monotonic() <= self._lease_from + self.lease_seconds

    def may_publish(self, name: str) -> bool:
        """Whether a result of ``name`` produced now may go out (held and lease live)."""
        return self.owns(name) and self.lease_live()

    def admit(self, name: str) -> bool:
        """:meth:`may_publish`, counting the results withheld."""
        if self.may_publish(name):
            return True
        self._withheld.inc()
        return False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group in the background (Kafka unreachable: retried)."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="alivemcp-cluster-node")
            self._lease_task = asyncio.create_task(self._lease(), name="alivemcp-cluster-lease")

    async def stop(self, timeout: float = 5.0) -> None:
        """Tell the listeners the shards are gone (probing stops, state is written), then
        leave. Static membership: the coordinator keeps the shards for this replica id until
        the session times out, so a replica restarted within it gets them back without a
        rebalance."""
        self._stopping = True
        deadline = time.monotonic() + timeout
        for task in (self._lease_task, self._unfencing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                async with self._lock:
                    self._epoch += 1
                    shards, self.held = self.held, frozenset()
                    self.returning = frozenset()
                    if shards:
                        await self._tell_revoked(shards)
        except TimeoutError:
            log.error("cluster node stop: listeners did not finish in time")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = self._lease_task = self._unfencing = None

    # -- the group consumer -------------------------------------------------------------------

    async def _new_consumer(self) -> AIOKafkaConsumer:
        """The group consumer, subscribed with the rebalance listener, not started."""
        config = self.config
        session_ms = int(config.session_timeout * 1000)
        consumer = await self.kafka.consumer(
            group_id=self.group,
            group_instance_id=config.replica_id,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=int(config.heartbeat_interval * 1000),
            # The coordinator drops a member that does not rejoin within this; never less than
            # the session timeout, which the lease is built on.
            rebalance_timeout_ms=session_ms,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            partition_assignment_strategy=(_sticky_assignor(),),
            fetch_max_bytes=1024,
            max_partition_fetch_bytes=1024,
        )
        consumer.subscribe([self.topic], listener=_Rebalance(self))
        return consumer

    async def _run(self) -> None:
        while not self._stopping:
            consumer: AIOKafkaConsumer | None = None
            try:
                # Known to the node before it starts: the first assignment may come while
                # start() is still awaiting.
                consumer = self._consumer = await self._new_consumer()
                await consumer.start()
                self._resolved("group consumer started")
                await self._poll(consumer)
            except (KafkaError, KafkaPlumbingError, OSError) as exc:
                self._problem("cannot take part in the cluster's consumer group; retrying", exc)
            except asyncio.CancelledError as exc:
                if not _stray_cancel():
                    raise
                # aiokafka's group coordination ended with a CancelledError of its own (its
                # poll passes the coordination task's end on): the consumer is dead, and the
                # loop must go on to rebuild it, or the replica leaves the group for good.
                self._problem("the group consumer's coordination ended; rebuilding it", exc)
            finally:
                self._consumer = None
                if consumer is not None:
                    await self._leave_generation("group consumer closed")
                    await close_quietly(consumer, 5.0)
            if not self._stopping:
                await asyncio.sleep(RETRY_SECONDS)

    async def _poll(self, consumer: AIOKafkaConsumer) -> None:
        """Poll the paused consumer: aiokafka counts a member idle for ``max_poll_interval``
        as gone, and errors of its group coordination come out here."""
        errors = 0
        while not self._stopping:
            try:
                await consumer.getmany(timeout_ms=POLL_MS)
                errors = 0
            except KafkaError as exc:
                errors += 1
                self._problem("consumer group error", exc)
                if errors >= POLL_ERRORS_BEFORE_REBUILD:
                    raise
                await asyncio.sleep(RETRY_SECONDS)

    async def _leave_generation(self, why: str | None) -> None:
        """Give up every shard: the group revokes them (``why`` None: a normal rebalance, told
        by aiokafka) or this member's generation ended (``why`` says how; logged)."""
        async with self._lock:
            self._epoch += 1
            self._joined = False
            self.assigned = frozenset()
            shards, self.held = self.held, frozenset()
            self.returning = frozenset()
            self._released = (shards if why is None else frozenset(), time.monotonic())
            if shards:
                if why is not None:
                    log.warning("shards released", reason=why, shards=len(shards))
                await self._tell_revoked(shards)

    # -- rebalances (awaited by aiokafka) -----------------------------------------------------

    async def _assigned_by_group(self, partitions: set[TopicPartition]) -> None:
        consumer = self._consumer
        if consumer is not None and partitions:
            consumer.pause(*partitions)  # the membership engine: it never reads a record
        shards = frozenset(tp.partition for tp in partitions if tp.topic == self.topic)
        async with self._lock:
            self._epoch += 1
            self._rebalances.inc()
            self._joined = True
            self.assigned = shards
            released, released_at = self._released
            self._released = (frozenset(), 0.0)
            self.returning = shards & released
            if released:
                self._pause.observe(time.monotonic() - released_at)
            self._lease_from = time.monotonic()  # the coordinator just answered SyncGroup
            self._ends = {}
            if self.fenced:
                self.fenced = False
                log.warning("back in the consumer group: probing resumes", shards=len(shards))
            log.info("shards assigned", shards=sorted(shards), replica=self.config.replica_id)
            if self._stopping:
                return
            self.held = shards
            if shards:
                await self._tell_assigned(shards)

    # -- the lease ----------------------------------------------------------------------------

    async def _lease(self) -> None:
        interval = self.config.heartbeat_interval
        commit: asyncio.Task[None] | None = None
        try:
            while not self._stopping:
                if self.assigned and (commit is None or commit.done()):
                    commit = asyncio.create_task(
                        self._commit(self._epoch, time.monotonic()),
                        name="alivemcp-cluster-lease-commit",
                    )
                if self.held and not self.lease_live():
                    await self._fence()
                wait = interval
                if self.held:  # wake up when the lease runs out, not a heartbeat later
                    wait = min(
                        wait,
                        max(0.01, self._lease_from + self.lease_seconds - time.monotonic() + 0.001),
                    )
                await asyncio.sleep(wait)
        finally:
            if commit is not None and not commit.done():
                commit.cancel()

    async def _commit(self, epoch: int, sent_at: float) -> None:
        """One lease commit, bounded by the lease itself (aiokafka waits for a coordinator
        as long as it takes)."""
        consumer = self._consumer
        shards = self.assigned
        if consumer is None or not shards:
            return
        try:
            async with asyncio.timeout(max(self.config.heartbeat_interval, self.lease_seconds)):
                offsets = await self._lease_offsets(consumer, shards)
                if not offsets:
                    return
                await consumer.commit(offsets)
        except (KafkaError, TimeoutError) as exc:
            if self.held:
                log.debug("lease commit failed", error=f"{type(exc).__name__}: {exc}")
            return
        if epoch != self._epoch:
            return  # the assignment changed meanwhile: this commit proves nothing about it
        self._lease_from = max(self._lease_from, sent_at)
        # Back only on a commit recent enough to hold a lease (one sent long ago and answered
        # by a new coordinator proves membership then, not now); in a task of its own, so
        # that lease commits go on while the listeners take the shards back.
        if (
            self.fenced
            and self.lease_live()
            and (self._unfencing is None or self._unfencing.done())
        ):
            self._unfencing = asyncio.create_task(
                self._unfence(epoch), name="alivemcp-cluster-unfence"
            )

    async def _lease_offsets(
        self, consumer: AIOKafkaConsumer, shards: frozenset[int]
    ) -> dict[TopicPartition, tuple[int, str]]:
        now = time.monotonic()
        if not self._ends or now - self._ends_at > ENDS_EVERY_SECONDS:
            tps = [TopicPartition(self.topic, p) for p in sorted(shards)]
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(self.config.heartbeat_interval):
                    ends = await consumer.end_offsets(tps)
                self._ends = {tp.partition: offset for tp, offset in ends.items()}
                self._ends_at = now
        meta = f"alivemcp lease {self.config.replica_id}"
        return {
            TopicPartition(self.topic, p): (self._ends[p], meta) for p in shards if p in self._ends
        }

    async def _fence(self) -> None:
        async with self._lock:
            if self.fenced or not self.held or self.lease_live() or self._stopping:
                return
            self.fenced = True
            self._fences.inc()
            shards, self.held = self.held, frozenset()
            self.returning = frozenset()
            log.error(
                "no contact with the group coordinator for longer than the lease: stopped "
                "probing this replica's shards (the group gives them to others after the "
                "session timeout); probing resumes when the group answers again",
                lease_seconds=round(self.lease_seconds, 3),
                shards=len(shards),
                replica=self.config.replica_id,
            )
            await self._tell_revoked(shards)

    async def _unfence(self, epoch: int) -> None:
        async with self._lock:
            if not self.fenced or epoch != self._epoch or self._stopping or not self.lease_live():
                return
            self.fenced = False
            self._epoch += 1
            self.held = self.assigned
            self.returning = frozenset()  # others may have had them while fenced
            log.warning(
                "the group coordinator answers again: probing resumes", shards=len(self.held)
            )
            if self.held:
                await self._tell_assigned(self.held)

    # -- telling the listeners (under the lock) -----------------------------------------------

    async def _tell_assigned(self, shards: frozenset[int]) -> None:
        started = time.monotonic()
        for listener in self.listeners:
            await self._tell(listener, listener.on_assigned, shards)
        self._handover.labels(phase="assign").observe(time.monotonic() - started)

    async def _tell_revoked(self, shards: frozenset[int]) -> None:
        started = time.monotonic()
        for listener in reversed(self.listeners):
            await self._tell(listener, listener.on_revoked, shards)
        self._handover.labels(phase="revoke").observe(time.monotonic() - started)

    async def _tell(
        self,
        listener: ShardListener,
        call: Callable[[frozenset[int]], Awaitable[None]],
        shards: frozenset[int],
    ) -> None:
        # Bounded: a listener stuck on Kafka must not hold the group (the coordinator drops
        # a member that does not rejoin within the session timeout).
        # A listener's stray CancelledError (see _stray_cancel) is its failure too: passed on
        # from a rebalance callback, it would end aiokafka's group coordination.
        try:
            async with asyncio.timeout(self.config.session_timeout):
                await call(shards)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and not _stray_cancel():
                raise
            self._listener_errors.labels(listener=listener.name).inc()
            log.error(
                "shard listener failed",
                listener=listener.name,
                error=f"{type(exc).__name__}: {exc}",
                shards=len(shards),
            )

    # -- logging Kafka trouble once -----------------------------------------------------------

    def _problem(self, what: str, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if self._trouble != text:
            self._trouble = text
            log.warning(what, error=text, kafka=self.kafka.describe())

    def _resolved(self, what: str) -> None:
        if self._trouble is not None:
            self._trouble = None
            log.info(what, kafka=self.kafka.describe())
