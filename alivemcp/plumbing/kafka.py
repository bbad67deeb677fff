"""Kafka plumbing: one set of long-lived clients per cluster, shared by every Kafka probe.

Probes embed :class:`KafkaConnection` as their ``cluster:`` param and borrow a
:class:`KafkaClusterClient` from ``context.plumbing.kafka.cluster(conn)``. A cluster's clients
(an admin client and an idempotent ``acks=all`` producer) are created on first use; when the
connection breaks they are closed and rebuilt on the next call rather than leaked.

Every failure leaves this plumbing as a :class:`~alivemcp.errors.ProbeError` (a
:class:`KafkaPlumbingError`): probes never see an aiokafka type. The parts live in modules of
their own and are re-exported here: connection settings (``kafka_settings``), metadata
snapshots (``kafka_metadata``), errors (``kafka_errors``), hung brokers and run budgets
(``kafka_brokers``), MSK IAM tokens (``kafka_iam``), partition readers and writers
(``kafka_partitions``), how a probe words a cluster it could not use (``kafka_reasons``).
Consumer groups and offsets are read by ``kafka_offsets``, MSK's CloudWatch metrics by
``kafka_cloudwatch``.

:class:`KafkaClusterClient` is built in layers, each a class in a module of its own and the
base of the next: reaching the cluster and asking one server directly (``kafka_access``),
suspecting the brokers that do not answer (``kafka_suspects``), building, sharing and closing
the clients (``kafka_builds``), and, here, the requests the probes make.

Metadata requests never auto-create topics: Kafka's default ``auto.create.topics.enable=true``
would otherwise turn "does this topic exist?" (or a probe still watching a deleted topic)
into "create it".
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiokafka.client
from aiokafka import TopicPartition
from aiokafka.admin import NewPartitions, NewTopic
from aiokafka.client import ConnectionGroup
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.metadata import MetadataRequest

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.kafka_access import AwsSource
from alivemcp.plumbing.kafka_brokers import (
    BrokerHealth,
    RunBudget,
    Suspicion,
    broker_name,
    inner_client,
    seconds_text,
    steering_of,
)
from alivemcp.plumbing.kafka_builds import WAIT_SHARE, ClientBuilds
from alivemcp.plumbing.kafka_errors import (
    KafkaPlumbingError,
    error_name,
    kafka_error,
    kind_for_code,
)
from alivemcp.plumbing.kafka_iam import MskIamTokenProvider
from alivemcp.plumbing.kafka_metadata import (
    BrokerInfo,
    ClusterMetadata,
    PartitionState,
    TopicState,
    parse_metadata,
)
from alivemcp.plumbing.kafka_partitions import PartitionReader, PartitionWriter, close_quietly
from alivemcp.plumbing.kafka_reasons import cluster_failure, cluster_problem, format_list
from alivemcp.plumbing.kafka_settings import KafkaConnection
from alivemcp.plumbing.kafka_suspects import RETEST_EVERY

__all__ = [
    "RETEST_EVERY",
    "AwsSource",
    "BrokerHealth",
    "BrokerInfo",
    "ClusterMetadata",
    "KafkaClients",
    "KafkaClusterClient",
    "KafkaConnection",
    "KafkaPlumbingError",
    "MskIamTokenProvider",
    "PartitionId",
    "PartitionReader",
    "PartitionState",
    "PartitionWriter",
    "RunBudget",
    "Suspicion",
    "TopicState",
    "broker_name",
    "close_quietly",
    "cluster_failure",
    "cluster_problem",
    "format_list",
]

#: A partition as probes name it: (topic, partition number).
PartitionId = tuple[str, int]


class _MetadataRequestNoAutoCreate(MetadataRequest):
    """A metadata request that never asks the broker to create the topics it names."""

    def __init__(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        super().__init__(topics, allow_auto_topic_creation=False)


# aiokafka's producer and consumer refresh metadata for every topic they touched, with
# auto-creation allowed (the protocol default). The prober must never create topics as a side
# effect of looking at them, so the clients this process builds use the non-creating request.
aiokafka.client.MetadataRequest = _MetadataRequestNoAutoCreate


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    TimeoutError,
    OSError,
)


class KafkaClusterClient(ClientBuilds):
    """Long-lived clients for one cluster, and the small async helpers the probes need.

    Every helper takes an optional ``timeout``: the seconds its step may take (from the
    probe's :class:`RunBudget`). A step that runs out raises a :class:`KafkaPlumbingError` of
    kind ``timeout`` naming the broker(s) it was waiting on, and those brokers become suspects
    (:class:`BrokerHealth`), avoided by every client of the cluster until they answer a
    background re-test. Every other failure is a :class:`KafkaPlumbingError` too.

    Its layers (see the module's docstring) are its bases; the requests are here.
    """

    async def _guard(self, call: Any, operation: str) -> Any:
        """Await ``call``; on a connection-level failure rebuild the clients. Every failure
        is raised as a :class:`KafkaPlumbingError` that says what happened."""
        try:
            return await call
        except KafkaPlumbingError:
            raise
        except _CONNECTION_ERRORS as exc:
            await self.reset()
            raise self._translate(exc, operation) from exc
        except KafkaError as exc:  # the broker's answer was an error: the clients are fine
            raise kafka_error(
                exc,
                target=self.conn.describe(),
                operation=operation,
                timeout=self.conn.request_timeout,
            ) from exc

    async def _bounded(self, call: Any, client: Any, what: str, timeout: float | None) -> Any:
        """Await ``call`` (a request made through ``client``) within ``timeout``; running out
        raises a ``timeout`` :class:`KafkaPlumbingError` naming the broker(s) still owing an
        answer."""
        if timeout is None:
            return await self._guard(call, what)
        bound = asyncio.timeout(timeout * WAIT_SHARE)
        try:
            async with bound:
                return await self._guard(call, what)
        except TimeoutError as exc:
            if not bound.expired():
                raise
            steering = steering_of(client)
            stuck = steering.stuck() if steering is not None else []
            reason = await self._blame(stuck, timeout * WAIT_SHARE, timeout)
            raise self._error(ErrorKind.TIMEOUT, what, reason) from exc

    async def _send_any(self, request: Any, what: str, timeout: float | None = None) -> Any:
        """Send a cluster-wide question to one broker, trying others if it does not answer:
        healthy brokers first (random order), suspects last. Each attempt gets a slice of the
        step so a hung broker costs one slice (and becomes a suspect), not the whole step."""
        loop = asyncio.get_running_loop()
        step = self.conn.request_timeout if timeout is None else timeout
        deadline = loop.time() + step
        admin = await self.admin(timeout=None if timeout is None else step)
        client = admin._client
        steering = steering_of(admin)
        assert steering is not None
        nodes = steering.order(steering.nodes())[:3]
        if not nodes:
            raise self._error(ErrorKind.CONNECT, what, "no broker known to ask")
        per_attempt = min(self.conn.request_timeout, step / min(2, len(nodes)))
        failures: list[str] = []
        last: BaseException | None = None
        hung = False
        for index, node_id in enumerate(nodes):
            left = deadline - loop.time()
            if left <= 0:
                break
            attempt = left if index == len(nodes) - 1 else min(per_attempt, left)
            address = self._address(node_id, steering)
            skipped = steering.skipped(node_id)
            if skipped is not None:
                failures.append(f"{skipped.describe()} (skipped)")
                hung = True
                continue
            try:
                async with asyncio.timeout(attempt):
                    response = await client.send(node_id, request)
            except (TimeoutError, RequestTimedOutError) as exc:
                last, hung = exc, True
                reason = f"did not answer {what} within {seconds_text(attempt)}"
                if address is None:
                    failures.append(f"broker {node_id} {reason}")
                else:
                    failures.append(self._suspect(address, node_id, reason).describe())
                continue
            except (*_CONNECTION_ERRORS, KafkaError) as exc:
                last = exc
                failures.append(f"{steering.name(node_id)}: {type(exc).__name__}: {exc}")
                continue
            if address is not None:
                self.health.answered(address)
            return response
        if hung or last is None:
            if not failures:
                failures.append(f"no answer within {seconds_text(step)}")
            # No broker answered: rebuild the clients on the next call (closing them may wait
            # on the hung brokers, so it happens in the background).
            self._drop_clients()
            raise self._error(
                ErrorKind.TIMEOUT,
                what,
                f"no Kafka answer within {seconds_text(step)}: " + "; ".join(failures),
            )
        raise last  # the caller's guard translates it

    async def send_to(
        self,
        node_id: int,
        request: Any,
        what: str,
        timeout: float | None = None,
        *,
        group: ConnectionGroup = ConnectionGroup.DEFAULT,
    ) -> Any:
        """Send ``request`` to one broker (a coordinator, a partition leader) within
        ``timeout``. A suspect broker is not asked while another is healthy; one that does
        not answer becomes a suspect. Both raise a ``timeout`` :class:`KafkaPlumbingError`
        whose target is the broker; any other failure a :class:`KafkaPlumbingError` too."""
        admin = await self.admin(timeout=timeout)
        steering = steering_of(admin)
        assert steering is not None
        skipped = steering.skipped(node_id)
        if skipped is not None:
            raise self._error(
                ErrorKind.TIMEOUT, what, f"not asked ({skipped.reason})", target=skipped.name
            )
        seconds = self.conn.request_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(seconds):
                response = await admin._client.send(node_id, request, group=group)
        except (TimeoutError, RequestTimedOutError) as exc:
            address = self._address(node_id, steering)
            reason = f"did not answer {what} within {seconds_text(seconds)}"
            if address is None:
                raise self._error(
                    ErrorKind.TIMEOUT, what, reason, target=f"broker {node_id}"
                ) from exc
            suspicion = self._suspect(address, node_id, reason)
            raise self._error(
                ErrorKind.TIMEOUT, what, suspicion.reason, target=suspicion.name
            ) from exc
        except (KafkaError, OSError, ValueError, struct.error) as exc:  # ValueError: garbage
            raise kafka_error(
                exc, target=self.broker_name(node_id), operation=what, timeout=seconds
            ) from exc
        address = self._address(node_id, steering)
        if address is not None:
            self.health.answered(address)
        return response

    async def pick_node(self, timeout: float | None = None) -> int:
        """A broker to ask a cluster-wide question: a healthy one if any."""
        admin = await self.admin(timeout=timeout)
        node = admin._client.get_random_node()
        if node is None:
            raise self._error(ErrorKind.CONNECT, "pick a broker", "no broker known")
        return int(node)

    async def metadata(
        self, topics: Sequence[str] | None = None, timeout: float | None = None
    ) -> ClusterMetadata:
        """Brokers, controller and topic/partition states (all topics when ``topics`` is
        None). Never creates a topic; a missing one comes back with error code 3."""
        request = _MetadataRequestNoAutoCreate(list(topics) if topics is not None else None)
        response = await self._guard(self._send_any(request, "Metadata", timeout), "Metadata")
        snapshot = parse_metadata(response)
        self.brokers = dict(snapshot.brokers)
        self._addresses.update({n: b.address for n, b in snapshot.brokers.items()})
        for suspicion in self.health.suspects():  # a bootstrap server is a broker after all
            if suspicion.node_id is None:
                suspicion.node_id = self._node_at(suspicion.address)
        # Keep the admin's view of live brokers current: a fenced broker drops out of it.
        # (aiokafka logs an error for every missing topic in an update, hence the filter.)
        if self._admin is not None and all(t.error_code == 0 for t in snapshot.topics.values()):
            self._admin._client.cluster.update_metadata(response)
        return snapshot

    async def topic_configs(
        self,
        topics: Iterable[str],
        keys: Sequence[str] = ("min.insync.replicas",),
        timeout: float | None = None,
    ) -> dict[str, dict[str, str]]:
        """Effective topic configs (``keys`` only), by topic; topics that failed are absent."""
        names = list(topics)
        if not names:
            return {}
        resources = [(2, name, list(keys)) for name in names]
        response = await self._guard(
            self._send_any(DescribeConfigsRequest(resources, False), "DescribeConfigs", timeout),
            "DescribeConfigs",
        )
        out: dict[str, dict[str, str]] = {}
        for resource in response.resources:
            error_code, _message, _rtype, name, entries = resource[:5]
            if error_code:
                continue
            out[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
        return out

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        assignments: Mapping[int, Sequence[int]] | None = None,
        timeout: float | None = None,
    ) -> bool:
        """Create a topic; False if it already existed. The broker's error otherwise, as a
        :class:`KafkaPlumbingError` (``create_topics`` reports errors in the response instead
        of raising)."""
        admin = await self.admin(timeout)
        if assignments:
            topic = NewTopic(
                name,
                -1,
                -1,
                replica_assignments={p: list(r) for p, r in assignments.items()},
                topic_configs=dict(configs or {}),
            )
        else:
            topic = NewTopic(
                name, partitions, replication_factor, topic_configs=dict(configs or {})
            )
        response = await self._bounded(admin.create_topics([topic]), admin, "CreateTopics", timeout)
        if any(result[1] == TopicAlreadyExistsError.errno for result in response.topic_errors):
            return False
        self._raise_topic_errors(response, name, "CreateTopics")
        return True

    async def add_partitions(
        self,
        name: str,
        total: int,
        assignments: Sequence[Sequence[int]],
        timeout: float | None = None,
    ) -> None:
        """Grow a topic to ``total`` partitions placed on ``assignments`` (one replica list
        per new partition, preferred leader first)."""
        admin = await self.admin(timeout)
        request = {name: NewPartitions(total, [list(a) for a in assignments])}
        response = await self._bounded(
            admin.create_partitions(request), admin, "CreatePartitions", timeout
        )
        self._raise_topic_errors(response, name, "CreatePartitions")

    async def refresh_leaders(
        self, client: Any, topic: str, leaders: Mapping[int, int], timeout: float
    ) -> None:
        """Bring ``client``'s view of ``topic``'s leaders up to date when it differs from
        ``leaders`` (fresh metadata): a client still sending to a fenced, hung leader would
        otherwise wait for its next periodic refresh."""
        inner = inner_client(client)
        seen = {p: inner.cluster.leader_for_partition(TopicPartition(topic, p)) for p in leaders}
        if all(seen[p] == leader for p, leader in leaders.items()):
            return
        with contextlib.suppress(TimeoutError, KafkaError):
            async with asyncio.timeout(timeout):
                if topic in inner._topics:
                    await inner.force_metadata_update()
                else:
                    await inner.add_topic(topic)  # a client's first look: the same refresh

    def _raise_topic_errors(self, response: Any, topic: str, operation: str) -> None:
        for result in response.topic_errors:
            error_code, message = result[1], result[2] if len(result) > 2 else ""
            if error_code:
                detail = (
                    f"{error_name(error_code)}: {message}" if message else error_name(error_code)
                )
                raise KafkaPlumbingError(
                    kind_for_code(error_code),
                    target=f"topic {topic}",
                    operation=operation,
                    detail=detail,
                    code=error_name(error_code),
                )


class KafkaClients:
    """Every cluster's clients in this process, keyed by connection settings."""

    def __init__(self, plumbing: AwsSource) -> None:
        self._plumbing = plumbing
        self._clusters: dict[tuple[Any, ...], KafkaClusterClient] = {}

    def cluster(self, conn: KafkaConnection) -> KafkaClusterClient:
        key = conn.identity_key()
        cluster = self._clusters.get(key)
        if cluster is None:
            cluster = self._clusters[key] = KafkaClusterClient(conn, self._plumbing)
        return cluster

    async def aclose(self) -> None:
        clusters = list(self._clusters.values())
        self._clusters.clear()
        for cluster in clusters:
            await cluster.aclose()
