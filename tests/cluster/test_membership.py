"""ClusterNode on a real three-broker Kafka: topics, shard assignment, handover order, static
membership and the lease that fences a replica cut off from the group coordinator.

Nodes run in the test process with a recording listener; every callback is timed, so a
shard's holders can be laid on one time line: a shard is never held by two replicas at once
(held = from the start of ``on_assigned`` to the end of ``on_revoked``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from prometheus_client import CollectorRegistry

from alivemcp.cluster._kafka import ClusterKafka
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.node import ClusterNode
from alivemcp.cluster.topics import ClusterTopicsError, ensure_topics
from alivemcp.plumbing import Plumbing
from tests.support.cluster import GatedKafkaCluster, cluster_section, unique_prefix

SHARDS = 12


@dataclass
class Event:
    replica: str
    kind: str  # assigned | revoked
    shards: frozenset[int]
    start: float
    end: float


@dataclass
class Recorder:
    """A ShardListener that notes every callback (and can be slow to let go)."""

    replica: str
    events: list[Event]
    revoke_delay: float = 0.0
    held: set[int] = field(default_factory=set)
    name: str = "recorder"

    async def on_assigned(self, shards: frozenset[int]) -> None:
        start = time.monotonic()
        self.held |= shards
        self.events.append(Event(self.replica, "assigned", shards, start, time.monotonic()))

    async def on_revoked(self, shards: frozenset[int]) -> None:
        start = time.monotonic()
        await asyncio.sleep(self.revoke_delay)
        self.held -= shards
        self.events.append(Event(self.replica, "revoked", shards, start, time.monotonic()))


@dataclass
class CancelsOnce(Recorder):
    """A Recorder whose first ``on_assigned`` ends in a CancelledError nobody sent it: a task
    of its own cancelled and awaited, as aiokafka's ``consumer.stop()`` does with a fetch in
    its back-off (the alert-state reader's, when Kafka went away during a handover)."""

    name: str = "cancels-once"
    raised: bool = False

    async def on_assigned(self, shards: frozenset[int]) -> None:
        await super().on_assigned(shards)
        if not self.raised:
            self.raised = True
            inner = asyncio.create_task(asyncio.Event().wait())
            inner.cancel()
            await inner


def holdings(events: list[Event]) -> dict[int, list[tuple[str, float, float]]]:
    """Per shard: (replica, held from, held until) for every stretch a replica held it."""
    open_: dict[tuple[str, int], float] = {}
    spans: dict[int, list[tuple[str, float, float]]] = {}
    for event in sorted(events, key=lambda e: e.start):
        for shard in event.shards:
            key = (event.replica, shard)
            if event.kind == "assigned":
                open_.setdefault(key, event.start)
            elif key in open_:
                spans.setdefault(shard, []).append((event.replica, open_.pop(key), event.end))
    for (replica, shard), since in open_.items():
        spans.setdefault(shard, []).append((replica, since, float("inf")))
    return spans


def assert_never_held_twice(events: list[Event]) -> None:
    for shard, spans in holdings(events).items():
        spans.sort(key=lambda s: s[1])
        for (r1, _, end1), (r2, start2, _) in itertools.pairwise(spans):
            assert start2 >= end1, (
                f"shard {shard} held by {r2} from {start2:.3f} while {r1} held it until {end1:.3f}"
            )


@dataclass
class Replica:
    node: ClusterNode
    recorder: Recorder
    kafka: ClusterKafka
    plumbing: Plumbing
    registry: CollectorRegistry

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels)
        assert value is not None, (name, labels)
        return value

    async def close(self) -> None:
        await self.node.stop(5)
        await self.kafka.aclose()
        await self.plumbing.aclose()


class Group:
    def __init__(self, cluster: GatedKafkaCluster, prefix: str) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.events: list[Event] = []
        self.replicas: list[Replica] = []

    def config(self, replica: str, *, gated: bool = False) -> ClusterConfig:
        bootstrap = self.cluster.gated_bootstrap if gated else self.cluster.bootstrap
        return ClusterConfig.model_validate(
            cluster_section(bootstrap, self.prefix, replica=replica, shards=SHARDS)
        )

    async def start(
        self,
        replica: str,
        *,
        gated: bool = False,
        revoke_delay: float = 0.0,
        listener: type[Recorder] = Recorder,
    ) -> Replica:
        config = self.config(replica, gated=gated)
        plumbing = Plumbing()
        kafka = ClusterKafka(config.kafka, plumbing)
        recorder = listener(replica, self.events, revoke_delay)
        registry = CollectorRegistry()
        node = ClusterNode(config, kafka, [recorder], registry)
        await node.start()
        member = Replica(node, recorder, kafka, plumbing, registry)
        self.replicas.append(member)
        return member

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.replicas), return_exceptions=True)


@pytest.fixture
async def group(kafka3: GatedKafkaCluster) -> AsyncIterator[Group]:
    prefix = unique_prefix("member")
    group = Group(kafka3, prefix)
    plumbing = Plumbing()
    config = group.config("setup")
    kafka = ClusterKafka(config.kafka, plumbing)
    await ensure_topics(config, kafka)
    await kafka.aclose()
    await plumbing.aclose()
    try:
        yield group
    finally:
        kafka3.heal()
        await group.close()


async def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> float:
    """Poll ``predicate`` until true; returns when (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def settled(replicas: list[Replica], sizes: list[int] | None = None) -> bool:
    held = [r.recorder.held for r in replicas]
    union: set[int] = set().union(*held)
    if union != set(range(SHARDS)) or sum(map(len, held)) != SHARDS:
        return False
    return sizes is None or sorted(map(len, held)) == sorted(sizes)


# -- topics ---------------------------------------------------------------------------------


async def _admin(cluster: GatedKafkaCluster) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    await admin.start()
    return admin


async def test_topics_are_created_with_the_configured_layout(kafka3: GatedKafkaCluster) -> None:
    prefix = unique_prefix("topics")
    config = ClusterConfig.model_validate(
        cluster_section(
            kafka3.bootstrap,
            prefix,
            shards=5,
            replication_factor=3,
            min_insync_replicas=2,
            results_retention="2d",
        )
    )
    plumbing = Plumbing()
    kafka = ClusterKafka(config.kafka, plumbing)
    admin = await _admin(kafka3)
    try:
        created = await ensure_topics(config, kafka)
        names = [config.topics.results, config.topics.status_changes, config.topics.alert_state]
        assert sorted(created) == sorted(names)
        assert await ensure_topics(config, kafka) == []  # a second replica creates nothing
        for topic in await admin.describe_topics(names):
            assert len(topic["partitions"]) == 5
            assert all(len(p["replicas"]) == 3 for p in topic["partitions"])
        [described] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
        settings = {
            resource[3]: {entry[0]: entry[1] for entry in resource[4]}
            for resource in described.resources
        }
        assert settings[config.topics.alert_state]["cleanup.policy"] == "compact"
        assert settings[config.topics.results]["cleanup.policy"] == "delete"
        assert settings[config.topics.results]["retention.ms"] == str(2 * 86400 * 1000)
        assert settings[config.topics.status_changes]["retention.ms"] == str(30 * 86400 * 1000)
        assert {s["min.insync.replicas"] for s in settings.values()} == {"2"}
    finally:
        await admin.close()
        await kafka.aclose()
        await plumbing.aclose()


async def test_topics_that_cannot_serve_the_config_stop_the_start(
    kafka3: GatedKafkaCluster,
) -> None:
    prefix = unique_prefix("layout")
    admin = await _admin(kafka3)
    plumbing = Plumbing()
    try:
        await admin.create_topics([NewTopic(f"{prefix}-results", 5, 3)])
        config = ClusterConfig.model_validate(cluster_section(kafka3.bootstrap, prefix))
        kafka = ClusterKafka(config.kafka, plumbing)
        with pytest.raises(ClusterTopicsError) as wrong:
            await ensure_topics(config, kafka)
        assert f"'{prefix}-results' (results) has 5 partitions but cluster.shards is 12" in str(
            wrong.value
        )

        other = unique_prefix("absent")
        config = ClusterConfig.model_validate(
            cluster_section(kafka3.bootstrap, other, create_topics=False)
        )
        with pytest.raises(ClusterTopicsError) as missing:
            await ensure_topics(config, ClusterKafka(config.kafka, plumbing))
        assert "cluster topics missing" in str(missing.value)
        assert other + "-results" not in await admin.list_topics()  # nothing was created
    finally:
        await admin.close()
        await plumbing.aclose()


# -- membership -----------------------------------------------------------------------------


async def test_shards_are_shared_evenly_and_a_revoke_ends_before_another_replica_starts(
    group: Group,
) -> None:
    # A lets go slowly: the others must still not start its shards before it is done.
    a = await group.start("a", revoke_delay=1.0)
    await wait_until(lambda: settled([a]), 30, "a holds every shard")
    b = await group.start("b")
    c = await group.start("c")
    await wait_until(lambda: settled([a, b, c], [4, 4, 4]), 40, "4 shards each")
    assert_never_held_twice(group.events)
    revokes = [e for e in group.events if e.replica == "a" and e.kind == "revoked"]
    assert revokes and all(e.end - e.start >= 1.0 for e in revokes)
    assert b.metric("alivemcp_cluster_member") == 1.0
    assert b.metric("alivemcp_cluster_shards_held") == 4.0
    assert a.metric("alivemcp_cluster_rebalances_total") >= 2
    # The node's own view agrees with its listener's.
    assert a.node.held == frozenset(a.recorder.held)
    assert all(
        a.node.owns(n) == (a.node.shard_of(n) in a.recorder.held)
        for n in (f"check-{i}" for i in range(100))
    )


async def test_a_replica_restarted_within_the_session_gets_its_shards_back_without_a_rebalance(
    group: Group,
) -> None:
    a = await group.start("a")
    b = await group.start("b")
    await wait_until(lambda: settled([a, b], [6, 6]), 40, "6 shards each")
    before = set(b.recorder.held)
    events_of_a = len([e for e in group.events if e.replica == "a"])
    await b.close()  # static membership: no LeaveGroup, the group waits for "b"
    group.replicas.remove(b)
    b2 = await group.start("b")
    await wait_until(lambda: b2.recorder.held == before, 20, "b's shards back to b")
    # No rebalance: a was never told anything.
    assert len([e for e in group.events if e.replica == "a"]) == events_of_a
    assert_never_held_twice(group.events)


async def test_a_replica_cut_off_from_kafka_stops_before_the_others_take_its_shards(
    group: Group, kafka3: GatedKafkaCluster
) -> None:
    a = await group.start("a")
    c = await group.start("c", gated=True)
    await wait_until(lambda: settled([a, c], [6, 6]), 40, "6 shards each")
    lease = c.node.lease_seconds
    cut_at = time.monotonic()
    kafka3.cut()  # c still runs (and could reach targets); it cannot reach Kafka
    fenced_at = await wait_until(lambda: c.node.fenced, 20, "c fences itself")
    assert not c.node.may_publish("anything")
    # The flag is set first, then the listeners are told (the recorder yields once while it
    # is): a poll can see the flag a moment before the recorder lets go.
    await wait_until(lambda: not c.recorder.held, 2, "c's shards revoked once fenced")
    taken_at = await wait_until(lambda: len(a.recorder.held) == SHARDS, 40, "a takes every shard")
    # c stopped within its lease (plus a heartbeat of slack), and before a took over.
    assert fenced_at - cut_at <= lease + c.node.config.heartbeat_interval + 0.5
    assert fenced_at < taken_at
    assert_never_held_twice(group.events)
    assert c.metric("alivemcp_cluster_fenced_total") == 1.0
    assert c.metric("alivemcp_cluster_member") == 0.0
    print(
        f"\ncut-off replica fenced after {fenced_at - cut_at:.2f}s (lease {lease:g}s); "
        f"the other took its shards after {taken_at - cut_at:.2f}s"
    )

    kafka3.heal()
    await wait_until(lambda: settled([a, c], [6, 6]), 60, "c back with 6 shards")
    assert c.node.member and not c.node.fenced
    assert_never_held_twice(group.events)


async def test_a_listeners_stray_cancelled_error_is_its_failure_not_the_end_of_membership(
    group: Group,
) -> None:
    # Passed on from the rebalance callback, it ended aiokafka's group coordination, then the
    # node's membership loop: its shards released unfenced, and the replica never rejoined.
    a = await group.start("a", listener=CancelsOnce)
    errors = {"listener": CancelsOnce.name}
    # The error is counted once the listener's task has ended, a few loop turns after it raised.
    await wait_until(
        lambda: (
            a.recorder.raised
            and settled([a])
            and a.registry.get_sample_value("alivemcp_cluster_listener_errors_total", errors)
        ),
        30,
        "a holds every shard and its listener's error is counted",
    )
    assert a.metric("alivemcp_cluster_listener_errors_total", errors) == 1.0
    b = await group.start("b")
    await wait_until(lambda: settled([a, b], [6, 6]), 40, "a and b share the shards")
    assert a.node.member and a.node.held == frozenset(a.recorder.held)
    assert a.metric("alivemcp_cluster_listener_errors_total", errors) == 1.0
    assert_never_held_twice(group.events)


async def test_the_membership_loop_rebuilds_a_consumer_whose_coordination_ended(
    group: Group,
) -> None:
    a = await group.start("a")
    await wait_until(lambda: settled([a]), 30, "a holds every shard")
    first = a.node._consumer
    assert first is not None
    # How aiokafka's coordination ends when a CancelledError escapes into it: its poll then
    # raises that CancelledError, which is no cancellation of the node.
    first._coordinator._coordination_task.cancel()
    await wait_until(
        lambda: a.node._consumer not in (None, first) and a.node.member and settled([a]),
        30,
        "a back in the group on a new consumer",
    )
    assert a.node._task is not None and not a.node._task.done()
    assert [e.kind for e in group.events][-2:] == ["revoked", "assigned"]
