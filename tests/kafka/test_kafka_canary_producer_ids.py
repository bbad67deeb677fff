"""kafka_canary while no broker hands out producer ids: the active KRaft controller hangs.

A broker hands out producer ids (InitProducerId, how an idempotent producer starts) from a
block the active controller allocated to it. A broker without a block asks the controller for
one and answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; when the controller it asks is paused,
that request waits for the broker's controller request timeout (30 s), so a fresh idempotent
producer cannot start for that long although every partition takes writes. The canary must
still write to every partition (with a plain ``acks=all`` producer standing in) and say why,
inside its timeout, never end with "cannot start the producer".

The cluster is the module's own: a broker that ever handed out a producer id keeps a block
(the shared clusters' brokers have them). ``test_kafka_cli`` met this state by chance, when the
broker it paused was the controller and neither other broker had a block yet.

The producer start also asks for its producer id one broker at a time, each attempt bounded:
a broker that hangs right when it is asked costs one attempt, not the start (on the shared
cluster: any broker will do, the one asked first is paused once the client has bootstrapped).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from alivemcp.errors import ProbeError
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import (
    ClusterMetadata,
    KafkaClusterClient,
    KafkaConnection,
    Suspicion,
)
from alivemcp.plumbing.kafka_brokers import Steering
from alivemcp.plumbing.kafka_builds import WAIT_SHARE
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import run_check
from tests.support import run_until as until
from tests.support.kafka import RELAXED, active_controller, init_producer_id_error

TOPIC = "ids-canary"
TIMEOUT = 30.0
COORDINATOR_LOAD_IN_PROGRESS = 14


@pytest.fixture(scope="module")
async def fresh_cluster3() -> AsyncIterator[KafkaCluster]:
    """Three fast-fencing nodes no producer has asked for a producer id yet."""
    cluster = await KafkaCluster(size=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_canary_writes_everywhere_while_the_controller_hands_out_no_producer_ids(
    fresh_cluster3: KafkaCluster,
) -> None:
    cluster = fresh_cluster3
    conn = {"bootstrap_servers": cluster.bootstrap, "request_timeout": 5}
    setup = Plumbing()
    try:
        kc = setup.kafka.cluster(KafkaConnection(**conn))
        # As the canary creates it (one partition led by each broker), before the controller
        # hangs: creating a topic needs the controller.
        await kc.create_topic(
            TOPIC,
            assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]},
            configs={"min.insync.replicas": "2"},
        )
    finally:
        await setup.aclose()
    await until(_metadata(cluster), _led_by({1, 2, 3}), "the canary topic's leaders")
    # A broker sends its requests for a block of producer ids to the controller it last
    # reached (a loaded machine sees elections): each just reached the active one.
    controller = await until(
        _controller_every_broker_reaches(cluster),
        lambda leader: leader is not None,
        "every broker reaching the same active controller",
        pause=0.2,
    )
    healthy = {n.node_id for n in cluster.nodes} - {controller}
    params = {"cluster": conn, "topic": TOPIC, **RELAXED}

    with cluster.paused(controller):
        # Fenced and out of every ISR: leadership moved, RF 3 / min ISR 2 still holds, so a
        # producer that has an id writes everywhere (the state test_kafka_cli checks).
        await until(_metadata(cluster), _led_by(healthy), "the paused controller fenced")
        # No healthy broker has a block of producer ids: each answers "not yet" and asks the
        # paused controller for one (the state under test).
        for node_id in sorted(healthy):
            assert await init_producer_id_error(cluster, node_id) == COORDINATOR_LOAD_IN_PROGRESS

        started = time.monotonic()
        result = await run_check("kafka_canary", params, timeout=TIMEOUT)
        took = time.monotonic() - started

    assert took < TIMEOUT, result
    assert not result.reason.startswith("timeout after"), result.reason
    assert "cannot start the producer" not in result.reason
    assert result.status == Status.DEGRADED, result.reason
    assert result.observations["partitions"] == 3
    assert result.observations["partitions_failed"] == 0
    assert result.observations["messages_not_read_back"] == 0
    expected = "new idempotent producers cannot start: no broker handed out a producer id within "
    assert expected in result.reason, result.reason
    for node_id in healthy:
        assert f"broker {node_id} (127.0.0.1:{cluster.node(node_id).port})" in result.reason
    assert "COORDINATOR_LOAD_IN_PROGRESS (waiting for the controller)" in result.reason
    assert result.details is not None
    assert result.details["without_idempotence"] in result.reason


async def test_producer_start_asks_another_broker_when_the_one_asked_hangs(
    kafka_cluster3: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = kafka_cluster3
    await until(_metadata(cluster, None), _whole, "every broker live and in sync")
    controller = await active_controller(cluster)
    hung = max(n.node_id for n in cluster.nodes if n.node_id != controller)
    plumbing = Plumbing()
    # The default request timeout (10 s) outlasts the start's time: a request to the hung
    # broker left to aiokafka's own timeout would end the start.
    kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
    await kc.metadata(timeout=10)  # the admin client is up before the broker hangs

    # Healthy brokers are asked in random order: here the one about to hang comes first.
    def hung_first(self: Steering, nodes: Iterable[int]) -> list[int]:
        return sorted(nodes, key=lambda n: (n != hung, n))

    monkeypatch.setattr(Steering, "order", hung_first)
    # It hangs once the producer's client has bootstrapped: that client's metadata lists it
    # as live (fencing takes seconds) and the build's asks saw it answer.
    bootstrap = AIOKafkaClient.bootstrap

    async def bootstrap_then_hang(self: AIOKafkaClient) -> None:
        await bootstrap(self)
        if not cluster.node(hung).paused:
            cluster.pause(hung)

    monkeypatch.setattr(AIOKafkaClient, "bootstrap", bootstrap_then_hang)
    try:
        started = time.monotonic()
        writer = await kc.producer(timeout=10)
        took = time.monotonic() - started
        suspicion = await until(
            lambda: _suspicion(kc, hung), bool, "the hung broker suspected", within=10, pause=0.2
        )
    finally:
        monkeypatch.undo()
        if cluster.node(hung).paused:
            cluster.resume(hung)
        await plumbing.aclose()

    assert writer.without_idempotence is None
    # Within the start's time (aiokafka alone waits on the hung broker past it).
    assert took < 10 * WAIT_SHARE, f"producer start took {took:.1f}s"
    assert suspicion.name == f"broker {hung} (127.0.0.1:{cluster.node(hung).port})"
    # The shared cluster goes back as it was: every broker live, every replica in sync.
    await until(_metadata(cluster, None), _whole, "the hung broker back in sync")


def _controller_every_broker_reaches(
    cluster: KafkaCluster,
) -> Callable[[], Awaitable[int | None]]:
    """The active controller when every broker forwarded DescribeQuorum to that one (the
    broker's channel to the controller points at it now), else None."""

    async def ask() -> int | None:
        try:
            leaders = {await active_controller(cluster, via=n.node_id) for n in cluster.nodes}
        except (AssertionError, KafkaError, OSError, TimeoutError):
            return None  # an election under way
        return leaders.pop() if len(leaders) == 1 else None

    return ask


async def _suspicion(kc: KafkaClusterClient, node_id: int) -> Suspicion | None:
    return kc.suspect(node_id)


def _whole(snapshot: ClusterMetadata | None) -> bool:
    return (
        snapshot is not None
        and len(snapshot.brokers) == 3
        and all(
            set(p.isr) == set(p.replicas) for t in snapshot.topics.values() for p in t.partitions
        )
    )


def _metadata(
    cluster: KafkaCluster, topics: Sequence[str] | None = (TOPIC,)
) -> Callable[[], Awaitable[ClusterMetadata | None]]:
    """A fresh client's metadata of ``topics`` (all: None), or None when it could not be
    read."""

    async def read() -> ClusterMetadata | None:
        plumbing = Plumbing()
        try:
            kc = plumbing.kafka.cluster(
                KafkaConnection(bootstrap_servers=cluster.bootstrap, request_timeout=5)
            )
            return await kc.metadata(topics, timeout=5)
        except ProbeError:
            return None
        finally:
            await plumbing.aclose()

    return read


def _led_by(brokers: set[int]) -> Callable[[ClusterMetadata | None], bool]:
    """Whether a metadata answer shows exactly ``brokers`` live, leading every partition of
    the canary topic, and alone in its ISRs."""

    def done(snapshot: ClusterMetadata | None) -> bool:
        if snapshot is None:
            return False
        topic = snapshot.topics.get(TOPIC)
        return (
            set(snapshot.brokers) == brokers
            and topic is not None
            and bool(topic.partitions)
            and all(p.leader in brokers and set(p.isr) <= brokers for p in topic.partitions)
        )

    return done
