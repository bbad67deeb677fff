"""The Kafka source: one :class:`LagSnapshot` per run, read from the brokers in batches.

Per run: one OffsetFetch per group (to its coordinator, remembered between runs), one
DescribeGroups per coordinator, one Metadata, one ListOffsets per partition leader and, for
``time_lag: fetch``, one Fetch per leader (more only when several groups of one partition wait
at different offsets). A ``group_pattern`` adds a ListGroups per broker.

Each stage gets a slice of the run's :class:`RunBudget`: a broker that does not answer costs
its stage that slice, is named where its answer is missing (the group it coordinates, the
partitions it leads) and is not asked again until it answers a re-test.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping

from alivemcp.errors import ProbeError
from alivemcp.plumbing.kafka import KafkaClusterClient, PartitionId, RunBudget
from alivemcp.plumbing.kafka_errors import error_name
from alivemcp.plumbing.kafka_offsets import ConsumerGroupReader
from probes.kafka_consumer_lag.evaluate import GroupReading, LagSnapshot
from probes.kafka_consumer_lag.params import KafkaConsumerLagParams

__all__ = ["KafkaLagReader"]

_UNKNOWN_TOPIC_OR_PARTITION = 3


class KafkaLagReader:
    """Reads a :class:`LagSnapshot` with a bounded number of requests per run; raises
    :class:`ProbeError` only when nothing can be read (the cluster, or the group list)."""

    def __init__(self, cluster: KafkaClusterClient) -> None:
        self.cluster = cluster
        self._groups = ConsumerGroupReader(cluster)

    async def read(self, params: KafkaConsumerLagParams, budget: RunBudget) -> LagSnapshot:
        cluster = self.cluster
        request = cluster.conn.request_timeout
        await cluster.admin(timeout=budget.step(request, share=0.3))
        named = frozenset(params.groups)
        groups = set(named)
        if params.group_pattern is not None:
            pattern = re.compile(params.group_pattern)
            listed = await self._groups.list_groups(timeout=budget.step(request, share=0.25))
            groups.update(g for g in listed if pattern.fullmatch(g))
        ordered = sorted(groups)
        timeout = budget.step(request, share=0.3)
        readings = dict(
            zip(
                ordered,
                await asyncio.gather(*(self._group_offsets(g, timeout) for g in ordered)),
                strict=True,
            )
        )
        await self._membership(readings, budget.step(request, share=0.2))
        wanted = params.topic_wanted()
        for reading in readings.values():
            reading.committed = {tp: o for tp, o in reading.committed.items() if wanted(tp[0])}
        present = {
            g: r for g, r in readings.items() if r.committed or r.error is not None or g in named
        }
        partitions = {tp for r in present.values() for tp in r.committed}
        at = time.time()
        log_end: dict[PartitionId, int] = {}
        unreadable: dict[PartitionId, str] = {}
        leaders: dict[PartitionId, int] = {}
        if partitions:
            leaders, unreadable = await self._leaders(partitions, budget.step(request, share=0.4))
            at = time.time()
            log_end, unread = await self._groups.log_end_offsets(
                leaders, budget.step(request, share=0.6)
            )
            unreadable.update(unread)
        snapshot = LagSnapshot(
            at=at,
            groups=present,
            log_end=log_end,
            named_groups=named,
            unreadable=unreadable,
            selected=len(groups),
        )
        if params.time_lag == "fetch" and params.max_fetch_partitions > 0:
            snapshot.record_times = await self._first_unconsumed(
                snapshot, leaders, params.max_fetch_partitions, budget.step(request)
            )
        return snapshot

    async def _group_offsets(self, group: str, timeout: float) -> GroupReading:
        try:
            committed = await self._groups.committed(group, timeout)
        except ProbeError as err:  # this group is unknown; the others are still judged
            return GroupReading(error=f"cannot read committed offsets: {err}")
        return GroupReading(committed=committed)

    async def _membership(self, readings: dict[str, GroupReading], timeout: float) -> None:
        """Membership (active consumers or not) tells Burrow's STOP from STALL. Failures here
        only make membership unknown."""
        readable = [g for g, r in readings.items() if r.error is None]
        for group, found in (await self._groups.membership(readable, timeout)).items():
            readings[group].state = found.state
            readings[group].members_active = found.members_active

    async def _leaders(
        self, partitions: set[PartitionId], timeout: float
    ) -> tuple[dict[PartitionId, int], dict[PartitionId, str]]:
        """Each partition's leader; why the others cannot be read. A deleted topic's old
        commits are not lag: its partitions are in neither."""
        metadata = await self.cluster.metadata(
            sorted({tp[0] for tp in partitions}), timeout=timeout
        )
        by_tp = {(t.name, p.partition): p for t in metadata.topics.values() for p in t.partitions}
        leaders: dict[PartitionId, int] = {}
        unreadable: dict[PartitionId, str] = {}
        for tp in partitions:
            state = metadata.topics.get(tp[0])
            if state is None or state.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if state.error_code:
                unreadable[tp] = f"topic metadata: {error_name(state.error_code)}"
                continue
            part = by_tp.get(tp)
            if part is None:
                continue
            if part.leader < 0:
                unreadable[tp] = "partition offline (no leader)"
            else:
                leaders[tp] = part.leader
        return leaders, unreadable

    async def _first_unconsumed(
        self,
        snapshot: LagSnapshot,
        leaders: Mapping[PartitionId, int],
        limit: int,
        timeout: float,
    ) -> dict[tuple[str, int, int], float]:
        """Write times of the first message each lagging group has not consumed: the
        ``limit`` partitions lagging most are read, the rest are estimated."""
        wanted: dict[tuple[str, int, int], int] = {}
        for reading in snapshot.groups.values():
            for tp, committed in reading.committed.items():
                end = snapshot.log_end.get(tp)
                if end is not None and committed < end:
                    key = (tp[0], tp[1], committed)
                    wanted[key] = max(wanted.get(key, 0), end - committed)
        chosen = sorted(wanted, key=lambda k: wanted[k], reverse=True)[:limit]
        return await self._groups.record_times(chosen, leaders, timeout)
