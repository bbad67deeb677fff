"""Consumer groups and partition offsets, read with Kafka's own requests in batches.

aiokafka's admin client asks one request per group or partition and hides which broker did
not answer; a lag check over thousands of partitions needs a bounded number of requests per
run and a name for every broker that stayed silent. So this module speaks the protocol
directly, through :meth:`KafkaClusterClient.send_to`: FindCoordinator and OffsetFetch per
group, one DescribeGroups per coordinator, one ListOffsets and one Fetch per partition leader,
one ListGroups per broker.

Every failure is a :class:`KafkaPlumbingError` whose target names the broker (or the group),
so what a hung broker owes can be reported as its own.
"""

from __future__ import annotations

import asyncio
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsRequest_v3,
    DescribeGroupsResponse_v3,
    ListGroupsRequest,
)
from aiokafka.protocol.api import RequestStruct
from aiokafka.protocol.commit import OffsetFetchRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.kafka import KafkaClusterClient, PartitionId
from alivemcp.plumbing.kafka_errors import KafkaPlumbingError, error_name, kind_for_code

__all__ = ["ConsumerGroupReader", "GroupMembership", "first_record_time"]

#: Coordinator errors that a fresh FindCoordinator may cure.
_COORDINATOR_ERRORS = frozenset({14, 15, 16})  # load in progress, not available, not coordinator
_GROUP_AUTHORIZATION_FAILED = 30
#: Bytes asked per partition when reading the first unconsumed message: one producer batch
#: (16 KiB by default in Java and aiokafka) fits with room to spare.
_FETCH_PARTITION_BYTES = 64 * 1024
_FETCH_MAX_BYTES = 16 * 1024 * 1024

#: A message as the time-lag reader asks for it: (topic, partition, offset).
MessageId = tuple[str, int, int]


class _DescribeGroupsRequestV3(RequestStruct):
    """DescribeGroups v3 parsed with the v3 response schema. aiokafka 0.14 pairs the v3
    request with the v2 response, so every group after the first is misread (its trailing
    ``authorized_operations`` is taken for the next group's fields)."""

    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = DescribeGroupsRequest_v3.SCHEMA


class _DescribeGroups(DescribeGroupsRequest):
    def build(self, request_struct_class: type[Any]) -> Any:
        if request_struct_class.API_VERSION == 3:
            return _DescribeGroupsRequestV3(self._groups, self._include_authorized_operations)
        return super().build(request_struct_class)


class _NoCoordinator(KafkaPlumbingError):
    """FindCoordinator answered an error: asking again at once would not help."""


@dataclass(frozen=True, slots=True)
class GroupMembership:
    """What DescribeGroups says about one group."""

    state: str
    #: True: has members; False: Empty/Dead; None: not visible (a KIP-848 group answers
    #: "Dead" to this classic request even while it consumes).
    members_active: bool | None


class ConsumerGroupReader:
    """Reads consumer groups and offsets of one cluster; remembers each group's coordinator
    between calls (a probe keeps one reader for its lifetime)."""

    def __init__(self, cluster: KafkaClusterClient) -> None:
        self.cluster = cluster
        self._coordinators: dict[str, int] = {}

    def coordinator(self, group: str) -> int | None:
        """The group's coordinator as last found (None before the first lookup)."""
        return self._coordinators.get(group)

    async def list_groups(self, timeout: float) -> list[str]:
        """Every consumer group on every live broker. A broker that does not answer makes
        the list incomplete: that raises a ``timeout`` error naming it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        snapshot = await self.cluster.metadata([], timeout=timeout / 2)
        groups: set[str] = set()
        silent: list[str] = []

        async def one(node_id: int) -> None:
            left = max(0.0, deadline - loop.time())
            try:
                response = await self.cluster.send_to(
                    node_id, ListGroupsRequest(), "ListGroups", left
                )
            except KafkaPlumbingError as err:
                if err.kind is not ErrorKind.TIMEOUT:
                    raise
                silent.append(f"{err.target}: {err.detail}")
                return
            if response.error_code:
                raise self._answered("ListGroups", node_id, response.error_code)
            groups.update(group[0] for group in response.groups)

        await asyncio.gather(*(one(n) for n in snapshot.brokers))
        if silent:
            raise KafkaPlumbingError(
                ErrorKind.TIMEOUT,
                target=self.cluster.conn.describe(),
                operation="ListGroups",
                detail="cannot list every consumer group: " + "; ".join(silent),
            )
        return sorted(groups)

    async def committed(self, group: str, timeout: float) -> dict[PartitionId, int]:
        """The group's committed offsets (partitions without a commit are absent), from its
        coordinator. A coordinator that moved or did not answer is looked up once more."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in range(2):
            remembered = group in self._coordinators
            try:
                node = await self._coordinator(group, deadline - loop.time())
                left = max(0.0, deadline - loop.time())
                # A coordinator remembered from an earlier run may have moved off a hung
                # broker since: it gets half the time, so a fresh lookup still fits.
                response = await self.cluster.send_to(
                    node,
                    OffsetFetchRequest(group, None),
                    "OffsetFetch",
                    left / 2 if remembered and attempt == 0 else left,
                )
            except _NoCoordinator:
                raise
            except KafkaPlumbingError as err:
                self._coordinators.pop(group, None)
                # A silent broker is worth a second lookup only if it was remembered (the
                # group may have moved); any other error may be a coordinator change.
                retry = remembered if err.kind is ErrorKind.TIMEOUT else True
                if attempt == 0 and retry:
                    continue
                raise
            code = getattr(response, "error_code", 0)
            if code in _COORDINATOR_ERRORS:
                self._coordinators.pop(group, None)
                if attempt == 0:
                    continue
            if code == _GROUP_AUTHORIZATION_FAILED:
                raise KafkaPlumbingError(
                    ErrorKind.PERMISSION,
                    target=f"group {group}",
                    operation="OffsetFetch",
                    detail="not authorized to read the group's offsets",
                    code=error_name(code),
                )
            if code:
                raise self._answered("OffsetFetch", node, code)
            committed: dict[PartitionId, int] = {}
            for topic, parts in response.topics:
                for part in parts:
                    partition, offset, _meta, error_code = part[:4]
                    if not error_code and offset >= 0:
                        committed[(topic, partition)] = offset
            return committed
        raise KafkaPlumbingError(
            ErrorKind.UNAVAILABLE,
            target=f"group {group}",
            operation="OffsetFetch",
            detail="the coordinator kept moving",
        )

    async def membership(self, groups: Iterable[str], timeout: float) -> dict[str, GroupMembership]:
        """State and membership of the groups whose coordinator is known; one DescribeGroups
        per coordinator. Groups whose coordinator did not answer are absent."""
        by_node: dict[int, list[str]] = defaultdict(list)
        for group in groups:
            node = self._coordinators.get(group)
            if node is not None:
                by_node[node].append(group)
        found: dict[str, GroupMembership] = {}

        async def one(node: int, names: list[str]) -> None:
            try:
                response = await self.cluster.send_to(
                    node, _DescribeGroups(names), "DescribeGroups", timeout
                )
            except KafkaPlumbingError:
                return  # membership stays unknown
            for row in response.groups:
                error_code, name, state, members = row[0], row[1], row[2], row[5]
                if error_code:
                    continue
                active = len(members) > 0 if state != "Dead" else None
                found[name] = GroupMembership(state, active)

        await asyncio.gather(*(one(node, names) for node, names in by_node.items()))
        return found

    async def log_end_offsets(
        self, leaders: Mapping[PartitionId, int], timeout: float
    ) -> tuple[dict[PartitionId, int], dict[PartitionId, str]]:
        """Log-end offsets of the partitions, one ListOffsets per leader (``leaders``: the
        partition's leader); and why the others could not be read (naming the leader that
        did not answer)."""
        by_node: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for (topic, partition), node in leaders.items():
            by_node[node][topic].append((partition, -1))  # -1: latest offset
        log_end: dict[PartitionId, int] = {}
        unreadable: dict[PartitionId, str] = {}

        async def one(node: int, topics: Mapping[str, list[tuple[int, int]]]) -> None:
            request = OffsetRequest(-1, 0, list(topics.items()))
            try:
                response = await self.cluster.send_to(node, request, "ListOffsets", timeout)
            except KafkaPlumbingError as err:
                for topic, parts in topics.items():
                    for partition, _ in parts:
                        unreadable[(topic, partition)] = str(err)
                return
            for topic, parts in response.topics:
                for part in parts:
                    partition, error_code = part[0], part[1]
                    if error_code:
                        unreadable[(topic, partition)] = error_name(error_code)
                    else:
                        log_end[(topic, partition)] = int(part[-1])

        await asyncio.gather(*(one(node, topics) for node, topics in by_node.items()))
        return log_end, unreadable

    async def record_times(
        self, messages: Sequence[MessageId], leaders: Mapping[PartitionId, int], timeout: float
    ) -> dict[MessageId, float]:
        """Write times (unix seconds) of the first data record at or after each message's
        offset, read with one Fetch per leader (more when one partition is asked at several
        offsets: a Fetch names each partition once). Messages not read are absent."""
        rounds: list[dict[int, dict[str, list[tuple[int, int, int]]]]] = []
        taken: list[set[PartitionId]] = []
        for topic, partition, offset in messages:
            node = leaders.get((topic, partition))
            if node is None:
                continue
            i = next((n for n, used in enumerate(taken) if (topic, partition) not in used), None)
            if i is None:
                rounds.append(defaultdict(lambda: defaultdict(list)))
                taken.append(set())
                i = len(rounds) - 1
            taken[i].add((topic, partition))
            rounds[i][node][topic].append((partition, offset, _FETCH_PARTITION_BYTES))
        asked = {
            (round_no, node, topic, partition): offset
            for round_no, by_node in enumerate(rounds)
            for node, topics in by_node.items()
            for topic, parts in topics.items()
            for partition, offset, _ in parts
        }
        found: dict[MessageId, float] = {}

        async def one(round_no: int, node: int, topics: Mapping[str, list[Any]]) -> None:
            request = FetchRequest(0, 0, _FETCH_MAX_BYTES, 0, list(topics.items()))
            try:
                response = await self.cluster.send_to(node, request, "Fetch", timeout)
            except KafkaPlumbingError:
                return  # not read: the caller estimates instead
            for topic, parts in response.topics:
                for part in parts:
                    partition, error_code, data = part[0], part[1], part[-1]
                    offset = asked.get((round_no, node, topic, partition))
                    if error_code or not data or offset is None:
                        continue
                    written = first_record_time(data, offset)
                    if written is not None:
                        found[(topic, partition, offset)] = written

        await asyncio.gather(
            *(
                one(round_no, node, topics)
                for round_no, by_node in enumerate(rounds)
                for node, topics in by_node.items()
            )
        )
        return found

    async def _coordinator(self, group: str, timeout: float) -> int:
        cached = self._coordinators.get(group)
        if cached is not None:
            return cached
        response = await self.cluster.send_to(
            await self.cluster.pick_node(timeout),
            FindCoordinatorRequest(group, 0),
            "FindCoordinator",
            timeout,
        )
        if response.error_code:
            raise _NoCoordinator(
                kind_for_code(response.error_code),
                target=f"group {group}",
                operation="FindCoordinator",
                detail=f"no coordinator: {error_name(response.error_code)}",
                code=error_name(response.error_code),
            )
        self._coordinators[group] = response.coordinator_id
        return int(response.coordinator_id)

    def _answered(self, operation: str, node: int, code: int) -> KafkaPlumbingError:
        return KafkaPlumbingError(
            kind_for_code(code),
            target=self.cluster.broker_name(node),
            operation=operation,
            detail=f"answered {error_name(code)}",
            code=error_name(code),
        )


def first_record_time(data: bytes, offset: int) -> float | None:
    """Timestamp (unix seconds) of the first data record at or after ``offset`` in a Fetch
    answer's record bytes; None when there is none or the bytes do not decode."""
    try:
        records = MemoryRecords(bytes(data))
        while True:
            batch = records.next_batch()
            if batch is None:
                return None
            if getattr(batch, "is_control_batch", False):
                continue
            for record in batch:
                if record.offset >= offset and record.timestamp is not None:
                    if record.timestamp < 0:
                        return None
                    return float(record.timestamp) / 1000.0
    except (KafkaError, ValueError, IndexError, struct.error):
        return None  # a corrupt or truncated answer: the caller estimates instead
