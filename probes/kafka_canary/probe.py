"""``kafka_canary``: the produce-path canary.

The cloud console can be green while a broker's leader election hangs every producer that
writes to its partitions. This probe is such a producer: an idempotent ``acks=all`` producer
writes one message to EVERY partition of a dedicated canary topic on each run (so every
partition leader, and therefore every broker, is exercised), then reads its own messages back
to measure the end-to-end latency a real consumer would see.

The canary topic is created if missing: replication factor min(3, brokers),
``min.insync.replicas`` 2 where the replication factor allows it, short retention, and one
partition per broker with that broker as preferred leader. A broker added later (live, but
nobody's preferred leader) gets a partition of its own on the next run.

- ``down``: a produce failed or did not finish within ``produce_timeout`` (the reason names
  the partition and the broker that leads it); a partition whose leader is not answering the
  prober (it hung on an earlier request and has not answered since) is not written to and
  counts as failed, named with that broker;
- ``degraded``: produce or round-trip latency above its threshold, a message that did not
  come back within ``roundtrip_timeout``, a partition that could not be read back, or no
  broker handing out producer ids (new idempotent producers, every Kafka client's default,
  cannot start: usually the KRaft controller is unreachable; the canary then writes without
  idempotence, and the reason names what each broker answered).

Every step (metadata, producer start, reader positions, each produce, the read back) gets a
slice of the check's timeout, so a hung broker ends the run with a verdict naming it, never
with the engine's anonymous timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.kafka import (
    ClusterMetadata,
    KafkaClusterClient,
    PartitionReader,
    PartitionWriter,
    RunBudget,
    cluster_failure,
)
from alivemcp.probe import Observable, Probe, ProbeResult
from probes.kafka_canary.params import KafkaCanaryParams
from probes.kafka_canary.verdict import Failed, Outcome, Produced, verdict

__all__ = ["KafkaCanaryProbe"]

_UNKNOWN_TOPIC = 3


class KafkaCanaryProbe(Probe[KafkaCanaryParams]):
    Params = KafkaCanaryParams
    summary = "Produce to every partition of a canary topic (acks=all) and read it back"
    default_timeout = 30.0
    observables = (
        Observable("partitions", "Partitions the run covered."),
        Observable("partitions_failed", "Canary partitions whose produce failed."),
        Observable("produce_latency_max_seconds", "Slowest acks=all produce of the run."),
        Observable("roundtrip_latency_max_seconds", "Slowest produce-to-read-back of the run."),
        Observable("messages_not_read_back", "Canary messages produced but not read back."),
        Observable("produce_latency_seconds", "acks=all produce to one partition.", ("partition",)),
        Observable(
            "roundtrip_latency_seconds", "Produce to read-back on one partition.", ("partition",)
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reader: PartitionReader | None = None
        self._reader_cluster: KafkaClusterClient | None = None

    async def teardown(self) -> None:
        await self._drop_reader()

    async def probe(self) -> ProbeResult:
        p = self.params
        cluster = plumbing_of(self.context).kafka.cluster(p.cluster)
        budget = RunBudget.for_check(self.context.timeout)
        request = p.cluster.request_timeout
        try:
            snapshot = await self._ensure_topic(cluster, budget)
        except ProbeError as err:
            return cluster_failure(err)
        if isinstance(snapshot, ProbeResult):
            return snapshot
        topic = snapshot.topics[p.topic]
        partitions = [part.partition for part in topic.partitions]
        leaders = {part.partition: part.leader for part in topic.partitions}
        in_sync = {part.partition: part.isr for part in topic.partitions}
        try:
            # Bootstrap plus InitProducerId, which waits for the KRaft controller to hand out
            # producer ids: during a controller failover that takes longer than one request.
            producer = await cluster.producer(timeout=budget.step(2 * request, share=0.5))
        except ProbeError as err:
            return cluster_failure(err, "cannot start the producer")
        # A producer still sending to a fenced (hung) leader would wait for its next periodic
        # metadata refresh: align it with the metadata just read.
        await cluster.refresh_leaders(producer, p.topic, leaders, budget.step(request, share=0.2))

        # A plain producer stands in while no broker hands out producer ids: said in the verdict.
        outcome = Outcome(partitions, without_idempotence=producer.without_idempotence)
        reader: PartitionReader | None = None
        try:
            # Bounded: resolving positions waits on every partition leader, and a hung one
            # must not eat the time the produce half of the check needs.
            reader, unread = await self._ensure_reader(
                cluster, partitions, leaders, budget.step(p.roundtrip_timeout, share=0.25)
            )
        except (ProbeError, TimeoutError) as exc:
            # Reading back is the second half of the check; producing still says a lot.
            await self._drop_reader()
            outcome.reader_error = str(exc) or f"no answer ({type(exc).__name__})"
            unread = {}
        run_id = uuid.uuid4().hex
        # Whatever produce leaves, the read back keeps a little of (its messages are
        # usually back within milliseconds of the acknowledgement).
        produce_for = budget.step(
            p.produce_timeout, keep=min(p.roundtrip_timeout, budget.remaining() * 0.25)
        )
        outcome.produced, outcome.failed = await self._produce_all(
            cluster, producer, partitions, leaders, run_id, produce_for
        )
        if any(f.error.startswith("timed out") for f in outcome.failed):
            await _explain_timeouts(cluster, outcome.failed, in_sync, budget.step(2.0, share=0.3))
        if any(not f.error.startswith(("timed out", "not sent")) for f in outcome.failed):
            # A send that failed outright may leave the idempotent producer's sequence state
            # behind; a fresh one is cheap compared with a canary stuck on a bad producer.
            await cluster.reset_producer()
        readable = [x for x in outcome.produced if x.partition not in unread]
        if reader is not None:
            outcome.roundtrip = await self._read_back(
                reader, run_id, readable, budget.step(p.roundtrip_timeout)
            )
        outcome.unread = {
            x.partition: unread[x.partition] for x in outcome.produced if x.partition in unread
        }
        return verdict(p, outcome)

    # -- topic ---------------------------------------------------------------------------------

    async def _ensure_topic(
        self, cluster: KafkaClusterClient, budget: RunBudget
    ) -> ClusterMetadata | ProbeResult:
        p = self.params
        request = p.cluster.request_timeout
        snapshot = await cluster.metadata([p.topic], timeout=budget.step(request, share=0.3))
        topic = snapshot.topics.get(p.topic)
        if topic is not None and topic.error_code == 0 and topic.partitions:
            if p.create_topic:
                return await self._cover_new_brokers(cluster, snapshot, budget)
            return snapshot
        if topic is not None and topic.error_code not in (0, _UNKNOWN_TOPIC):
            return ProbeResult.down(
                f"canary topic {p.topic}: metadata error code {topic.error_code}"
            )
        if not p.create_topic:
            return ProbeResult.down(f"canary topic {p.topic} does not exist (create_topic off)")
        brokers = sorted(snapshot.brokers)
        if not brokers:
            return ProbeResult.down("the cluster reports no live brokers")
        rf = p.replication_factor or min(3, len(brokers))
        if rf > len(brokers):
            return ProbeResult.down(
                f"cannot create canary topic {p.topic}: replication factor {rf} > "
                f"{len(brokers)} live brokers"
            )
        min_isr = p.min_insync_replicas or (2 if rf >= 3 else 1)
        count = max(p.partitions or len(brokers), 1)
        # Partition i prefers broker i (round robin) as leader: every broker leads one.
        assignments = {
            i: [brokers[(i + k) % len(brokers)] for k in range(rf)] for i in range(count)
        }
        configs = {
            "min.insync.replicas": str(min_isr),
            "retention.ms": str(int(p.retention * 1000)),
            "segment.ms": str(int(p.retention * 1000)),
            "cleanup.policy": "delete",
        }
        try:
            await cluster.create_topic(
                p.topic,
                assignments=assignments,
                configs=configs,
                timeout=budget.step(request, share=0.3),
            )
        except ProbeError as err:  # e.g. not allowed to create topics: the prober's identity
            return cluster_failure(err, f"cannot create canary topic {p.topic}")
        for _ in range(20):  # leaders are elected within moments of creation
            snapshot = await cluster.metadata([p.topic], timeout=budget.step(request, share=0.3))
            topic = snapshot.topics.get(p.topic)
            if topic and topic.partitions and all(x.leader >= 0 for x in topic.partitions):
                return snapshot
            if budget.remaining() < 1.0:
                break
            await asyncio.sleep(0.25)
        return ProbeResult.down(f"canary topic {p.topic} created but its partitions have no leader")

    async def _cover_new_brokers(
        self, cluster: KafkaClusterClient, snapshot: ClusterMetadata, budget: RunBudget
    ) -> ClusterMetadata:
        """Add a partition for every live broker that is nobody's preferred leader (a broker
        added to the cluster since the topic was created), so every broker stays exercised.
        A broker that is merely down is not live and is left alone."""
        p = self.params
        topic = snapshot.topics[p.topic]
        preferred = {part.replicas[0] for part in topic.partitions if part.replicas}
        live = sorted(snapshot.brokers)
        uncovered = [b for b in live if b not in preferred]
        if not uncovered:
            return snapshot
        rf = min(max(len(part.replicas) for part in topic.partitions), len(live))
        assignments = []
        for broker in uncovered:
            start = live.index(broker)
            assignments.append([live[(start + k) % len(live)] for k in range(rf)])
        request = p.cluster.request_timeout
        try:
            await cluster.add_partitions(
                p.topic,
                len(topic.partitions) + len(assignments),
                assignments,
                timeout=budget.step(request, share=0.3),
            )
        except ProbeError:
            return snapshot  # e.g. no Alter permission: keep probing what exists
        for _ in range(20):
            fresh = await cluster.metadata([p.topic], timeout=budget.step(request, share=0.3))
            grown = fresh.topics.get(p.topic)
            if (
                grown
                and len(grown.partitions) > len(topic.partitions)
                and all(x.leader >= 0 for x in grown.partitions)
            ):
                return fresh
            if budget.remaining() < 1.0:
                break
            await asyncio.sleep(0.25)
        return snapshot

    # -- reader --------------------------------------------------------------------------------

    async def _ensure_reader(
        self,
        cluster: KafkaClusterClient,
        partitions: Sequence[int],
        leaders: Mapping[int, int],
        timeout: float,
    ) -> tuple[PartitionReader, dict[int, str]]:
        """The reader, positioned on every partition it can be; the partitions it cannot
        read (their leader did not answer in time), with why."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._reader is not None and self._reader_cluster is not cluster:
            await self._drop_reader()
        if self._reader is None:
            self._reader = await cluster.new_consumer(timeout=timeout / 2)
            self._reader_cluster = cluster
        reader = self._reader
        await reader.follow(self.params.topic, partitions)
        # Resolve the positions now, before this run's messages exist.
        left = max(0.0, deadline - loop.time())
        unread: dict[int, str] = {}
        for partition, err in (await reader.positions(left)).items():
            leader = leaders.get(partition, -1)
            suspicion = cluster.suspect(leader) if leader >= 0 else None
            if suspicion is not None:
                unread[partition] = suspicion.describe()
            elif err.kind is ErrorKind.TIMEOUT:
                unread[partition] = (
                    f"leader {cluster.broker_name(leader)} did not answer ListOffsets within "
                    f"{round(left, 1):g}s"
                )
            else:
                unread[partition] = err.detail
        return reader, unread

    async def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()

    # -- one run -------------------------------------------------------------------------------

    async def _produce_all(
        self,
        cluster: KafkaClusterClient,
        producer: PartitionWriter,
        partitions: Sequence[int],
        leaders: Mapping[int, int],
        run_id: str,
        timeout: float,
    ) -> tuple[list[Produced], list[Failed]]:
        """One message to every partition, each with ``timeout`` of its own (in parallel).
        A partition whose leader is a suspect (it hung and has not answered since) is not
        written to: the send could only wait for the timeout."""
        topic = self.params.topic

        async def one(partition: int) -> Produced | Failed:
            # The broker this send goes to, as the producer sees it now (what a hung send
            # is waiting for, even if leadership moves while it waits); else the metadata's.
            leader = producer.leader(topic, partition)
            if leader is None:
                leader = leaders.get(partition, -1)
            suspicion = cluster.suspect(leader) if leader >= 0 else None
            if suspicion is not None:
                return Failed(partition, leader, f"not sent: {suspicion.describe()}")
            started = time.perf_counter()
            value = json.dumps(
                {"run": run_id, "partition": partition, "sent_at": time.time()}
            ).encode()
            try:
                async with asyncio.timeout(timeout):
                    offset = await producer.send(topic, partition, value, key=run_id.encode())
            except TimeoutError:
                return Failed(partition, leader, f"timed out after {round(timeout, 1):g}s")
            except ProbeError as err:
                return Failed(partition, leader, err.detail)
            return Produced(partition, offset, time.perf_counter() - started)

        results = await asyncio.gather(*(one(x) for x in partitions))
        produced = [r for r in results if isinstance(r, Produced)]
        failed = [r for r in results if isinstance(r, Failed)]
        return produced, failed

    async def _read_back(
        self,
        reader: PartitionReader,
        run_id: str,
        produced: Sequence[Produced],
        timeout: float,
    ) -> dict[int, float]:
        """Seconds from send to read for each partition whose message came back in time."""
        waiting = {x.partition: x for x in produced}
        seen: dict[int, float] = {}
        deadline = time.monotonic() + timeout
        run_started = time.time() - max((x.latency for x in produced), default=0.0)
        while waiting and time.monotonic() < deadline:
            try:
                messages = await reader.read(min(deadline - time.monotonic(), 0.5))
            except ProbeError:
                await asyncio.sleep(0.1)
                continue
            now = time.time()
            for partition, value in messages:
                message = _decode(value)
                if message is None or message.get("run") != run_id:
                    continue  # an earlier run's late message, or someone else's
                if partition in waiting:
                    sent_at = message.get("sent_at")
                    start = sent_at if isinstance(sent_at, int | float) else run_started
                    seen[partition] = max(0.0, now - start)
                    del waiting[partition]
        return seen


async def _explain_timeouts(
    cluster: KafkaClusterClient,
    failed: Sequence[Failed],
    in_sync: Mapping[int, Sequence[int]],
    timeout: float,
) -> None:
    """Say who a produce that timed out was waiting on. With acks=all the leader answers
    only once every in-sync replica has the message, so a hung follower stalls partitions
    led by healthy brokers until it drops out of the ISR: the leader and the in-sync
    replicas are asked directly (a silent one becomes a suspect) and the silent one named."""
    timed_out = [f for f in failed if f.error.startswith("timed out")]
    asked = {f.leader for f in timed_out if f.leader >= 0}
    asked.update(r for f in timed_out for r in in_sync.get(f.partition, ()))
    checked = await cluster.ask_brokers(sorted(asked), timeout)
    for f in timed_out:
        leader = checked.get(f.leader)
        if leader is not None:
            f.error += f": {leader.name} did not answer"
            continue
        silent = [
            s.name
            for r in in_sync.get(f.partition, ())
            if r != f.leader
            for s in [checked.get(r)]
            if s is not None
        ]
        if silent:
            f.error += f": waiting for in-sync replica {', '.join(silent)}, which did not answer"


def _decode(value: bytes | None) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        message = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None
