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
(``kafka_partitions``). Consumer groups and offsets are read by ``kafka_offsets``, MSK's
CloudWatch metrics by ``kafka_cloudwatch``.

Metadata requests never auto-create topics: Kafka's default ``auto.create.topics.enable=true``
would otherwise turn "does this topic exist?" (or a probe still watching a deleted topic)
into "create it".
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import aiokafka.client
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.client import ConnectionGroup
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.metadata import MetadataRequest

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.outcome import ProbeResult, Status
from alivemcp.plumbing.aws import aws_error_summary
from alivemcp.plumbing.kafka_brokers import (
    BrokerHealth,
    RunBudget,
    Steering,
    Suspicion,
    broker_name,
    inner_client,
    seconds_text,
    steering_of,
)
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
from alivemcp.plumbing.kafka_settings import KafkaConnection, split_servers
from alivemcp.verdict import status_for

if TYPE_CHECKING:
    from alivemcp.plumbing.aws import AwsClients


class AwsSource(Protocol):
    """Where the Kafka clients get AWS clients (MSK ARNs, IAM tokens): the plumbing itself,
    named by what is used of it, so this module needs nothing above it."""

    @property
    def aws(self) -> AwsClients: ...


__all__ = [
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


def cluster_problem(err: ProbeError) -> str:
    """How a reason says the cluster could not be used: the prober's own credentials were
    refused (or could not be made), or the cluster could not be reached or asked."""
    if err.kind is ErrorKind.AUTH:
        return f"cannot authenticate to the cluster: {err}"
    return f"cluster unreachable: {err}"


def cluster_failure(
    err: ProbeError, doing: str | None = None, *, otherwise: Status | None = None
) -> ProbeResult:
    """The result of a run that could not use the cluster: one rule for every Kafka probe.

    The prober's own credentials refused (or unusable) make it ``unknown``, "cannot
    authenticate to the cluster: ...": the cluster answered, only not to this identity. Any
    other failure is :func:`~alivemcp.verdict.status_for` its kind (or ``otherwise``, for a
    probe that cannot judge without the cluster), "cluster unreachable: ..." (or
    "<doing>: ...")."""
    if err.kind is ErrorKind.AUTH:
        return ProbeResult.unknown(cluster_problem(err))
    status = otherwise if otherwise is not None else status_for(err.kind)
    return ProbeResult(status, f"{doing}: {err}" if doing else cluster_problem(err))


def format_list(items: Sequence[str], limit: int) -> str:
    """``a, b, c (+7 more)``: at most ``limit`` items named (how reasons list partitions
    and brokers)."""
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


# --------------------------------------------------------------------------------------------
# Clients


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    TimeoutError,
    OSError,
)

#: How often suspect brokers are asked again in the background.
RETEST_EVERY = 3.0
#: Of a step's time, the share spent waiting for the answer; the rest is for asking the
#: brokers it was waiting on whether they answer at all (who hung, or only waited).
_WAIT_SHARE = 0.8


class _Asks:
    """One client build's direct asks of its bootstrap servers (connect, authenticate,
    ApiVersions), started together for the whole step and read by whoever needs them: the
    ranking, then a start that ran out of time. They end by their own timeout."""

    def __init__(
        self, started: float, tasks: Mapping[str, asyncio.Future[KafkaPlumbingError | None]]
    ) -> None:
        self.started = started
        self.tasks = dict(tasks)

    def when_done(self, callback: Callable[[_Asks], None]) -> None:
        """Call ``callback(self)`` once every ask has ended (their results, errors included,
        are taken then: none is left unread)."""
        ended = asyncio.gather(*self.tasks.values(), return_exceptions=True)
        ended.add_done_callback(lambda _: callback(self))

    def cancel(self) -> None:
        for task in self.tasks.values():
            task.cancel()


class KafkaClusterClient:
    """Long-lived clients for one cluster, and the small async helpers the probes need.

    Every helper takes an optional ``timeout``: the seconds its step may take (from the
    probe's :class:`RunBudget`). A step that runs out raises a :class:`KafkaPlumbingError` of
    kind ``timeout`` naming the broker(s) it was waiting on, and those brokers become suspects
    (:class:`BrokerHealth`), avoided by every client of the cluster until they answer a
    background re-test. Every other failure is a :class:`KafkaPlumbingError` too.
    """

    def __init__(self, conn: KafkaConnection, plumbing: AwsSource) -> None:
        self.conn = conn
        self._plumbing = plumbing
        self._lock = asyncio.Lock()
        self._producer_lock = asyncio.Lock()
        self._bootstrap: str | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._producer: AIOKafkaProducer | None = None
        self._token_provider: MskIamTokenProvider | None = None
        self._ssl_context: ssl.SSLContext | None = None
        #: Background work: clients closing, bootstrap servers still being judged.
        self._closing: set[asyncio.Future[None]] = set()
        self.health = BrokerHealth()
        #: Brokers of the last metadata answer, to name brokers by id and address.
        self.brokers: dict[int, BrokerInfo] = {}
        self._addresses: dict[int, str] = {}
        self._retest: asyncio.Task[None] | None = None
        #: Bootstrap servers' direct asks still running after their build (see _Asks).
        self._asking: set[_Asks] = set()

    def _error(
        self, kind: ErrorKind, operation: str, detail: str, target: str | None = None
    ) -> KafkaPlumbingError:
        return KafkaPlumbingError(
            kind, target=target or self.conn.describe(), operation=operation, detail=detail
        )

    def _refused(self, problem: KafkaPlumbingError, what: str) -> KafkaPlumbingError:
        """A broker's refusal of the prober's credentials, as the cluster's ``auth`` error."""
        return KafkaPlumbingError(
            ErrorKind.AUTH,
            target=self.conn.describe(),
            operation=what,
            detail=f"{broker_name(self._node_at(problem.target), problem.target)} refused the "
            f"prober's credentials: {problem.detail.removeprefix('cannot be asked: ')}",
            code=problem.code,
        )

    # -- building clients ---------------------------------------------------------------------

    async def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            self._bootstrap = (
                self.conn.bootstrap_servers
                if self.conn.bootstrap_servers is not None
                else await self._resolve_arn()
            )
        return self._bootstrap

    async def _resolve_arn(self) -> str:
        assert self.conn.cluster_arn is not None
        arn = self.conn.cluster_arn
        field = self.conn.broker_string_field()
        try:
            client = await self._plumbing.aws.client("kafka", self.conn.aws, self.conn.region)
            response = await client.get_bootstrap_brokers(ClusterArn=arn)
        except ProbeError as err:  # the AWS plumbing's own: its kind stands
            raise KafkaPlumbingError(
                err.kind,
                target=arn,
                operation="GetBootstrapBrokers",
                detail=f"cannot resolve the cluster's brokers: {aws_error_summary(err)}",
                code=err.code,
            ) from err
        brokers = response.get(field)
        if not brokers:
            offered = sorted(k for k, v in response.items() if k.startswith("Bootstrap") and v)
            raise self._error(
                ErrorKind.NOT_FOUND,
                "GetBootstrapBrokers",
                f"has no {field} for {self.conn.security_protocol}"
                f"/{self.conn.sasl_mechanism or '-'}; it offers {offered or 'none'}",
                target=arn,
            )
        return str(brokers)

    def _ssl(self) -> ssl.SSLContext | None:
        if self.conn.security_protocol == "PLAINTEXT":
            return None
        if self._ssl_context is None:
            context = ssl.create_default_context(
                cafile=str(self.conn.ca_file) if self.conn.ca_file else None
            )
            context.check_hostname = self.conn.check_hostname
            if self.conn.client_cert_file and self.conn.client_key_file:
                context.load_cert_chain(
                    str(self.conn.client_cert_file),
                    str(self.conn.client_key_file),
                    self.conn.client_key_password.get_secret_value()
                    if self.conn.client_key_password
                    else None,
                )
            self._ssl_context = context
        return self._ssl_context

    def _tokens(self) -> MskIamTokenProvider:
        if self._token_provider is None:
            region = self.conn.region
            if not region:
                raise self._error(
                    ErrorKind.AUTH, "MSK IAM sign-in", "needs a region (aws.region or cluster_arn)"
                )
            session = self._plumbing.aws.session(self.conn.aws)

            async def credentials() -> Any:
                creds = await session.get_credentials()
                return None if creds is None else await creds.get_frozen_credentials()

            self._token_provider = MskIamTokenProvider(credentials, region)
        return self._token_provider

    async def client_options(self) -> dict[str, Any]:
        """Connection keyword arguments for any aiokafka client of this cluster."""
        try:
            ssl_context = self._ssl()
        except (OSError, ssl.SSLError) as exc:
            raise self._error(
                ErrorKind.AUTH, "TLS set-up", f"settings unusable: {type(exc).__name__}: {exc}"
            ) from exc
        options: dict[str, Any] = {
            "bootstrap_servers": await self.bootstrap_servers(),
            "client_id": self.conn.client_id,
            "request_timeout_ms": int(self.conn.request_timeout * 1000),
            "metadata_max_age_ms": int(self.conn.metadata_max_age * 1000),
            "security_protocol": self.conn.security_protocol,
            "ssl_context": ssl_context,
        }
        mechanism = self.conn.sasl_mechanism
        if mechanism == "AWS_MSK_IAM":
            options["sasl_mechanism"] = "OAUTHBEARER"
            options["sasl_oauth_token_provider"] = self._tokens()
        elif mechanism is not None:
            options["sasl_mechanism"] = mechanism
            options["sasl_plain_username"] = self.conn.username
            options["sasl_plain_password"] = (
                self.conn.password.get_secret_value() if self.conn.password else None
            )
        return options

    async def _connection_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's ``create_conn`` (one connection, no client)."""
        options = await self.client_options()
        for key in ("bootstrap_servers", "metadata_max_age_ms"):
            options.pop(key, None)
        return options

    async def _answers(self, server: str, timeout: float) -> bool:
        """Whether ``server`` is alive: it answered, if only to refuse the prober's
        credentials (that says nothing about the broker)."""
        return _alive(await self._ask(server, timeout))

    async def _ask(self, server: str, timeout: float) -> KafkaPlumbingError | None:
        """Connect to ``server`` (host:port) on a connection of its own (no client's lock)
        and ask ApiVersions (authenticating as configured): None if it answered within
        ``timeout``, else what went wrong, classified here once for every caller: ``timeout``
        when it said nothing, ``auth`` when it refused the prober's credentials, ``tls``,
        ``connect`` or ``protocol`` otherwise. The error's detail is the broker's reason
        (``did not answer ApiVersions within 2s``)."""
        host, _, port = server.rpartition(":")
        options = await self._connection_options()
        try:
            async with asyncio.timeout(timeout):
                conn = await create_conn(host.strip("[]"), int(port), **options)
        except TimeoutError:
            return self._error(
                ErrorKind.TIMEOUT,
                "ApiVersions",
                f"did not answer ApiVersions within {seconds_text(timeout)}",
                target=server,
            )
        except (KafkaError, OSError, ValueError) as exc:
            err = kafka_error(
                exc, target=server, operation="ApiVersions", unclassified=ErrorKind.CONNECT
            )
            err.detail = f"cannot be asked: {type(exc).__name__}: {exc}"
            return err
        conn.close()
        return None

    async def _rank_bootstrap(
        self, servers: list[str], timeout: float, what: str, asks: _Asks
    ) -> list[str]:
        """Ask every bootstrap server at once and keep those that answered (all of them if
        none did): aiokafka bootstraps from the servers one by one in random order, waiting a
        whole request timeout on a hung one. A server still silent well after another
        answered becomes a suspect (judged in the background: the caller goes on at once).
        A server that refuses the prober's credentials ends it at once with an ``auth``
        error: a client would be refused as well, and waiting for it could only turn the
        refusal into a timeout. ``asks`` (one per server, started by the caller for the whole
        step) go on after ``timeout``: a start that runs out of time reads their answers."""
        if len(servers) < 2:  # (nothing to rank: a refusal comes from the client's start)
            return servers
        loop = asyncio.get_running_loop()
        started = asks.started
        by_task = {asks.tasks[s]: s for s in servers}
        pending = set(by_task)
        answered: list[str] = []
        until = started + timeout
        while pending:
            wait = until - loop.time()
            if wait <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                problem = task.result()
                if _alive(problem):
                    self.health.answered(by_task[task])
                if problem is not None and problem.kind is ErrorKind.AUTH:
                    raise self._refused(problem, what)
                if problem is None:
                    answered.append(by_task[task])
            if answered and until == started + timeout:
                # Healthy brokers answer within moments of each other.
                elapsed = loop.time() - started
                until = min(until, loop.time() + max(0.2, 2 * elapsed))
        if pending:
            judge = self._judge_silent(
                {t: by_task[t] for t in pending}, bool(answered), started, started + timeout
            )
            self._background(judge)
        return answered or servers

    async def _judge_silent(
        self,
        asks: dict[asyncio.Future[KafkaPlumbingError | None], str],
        others_answered: bool,
        started: float,
        deadline: float,
    ) -> None:
        """Bootstrap servers still asked: one silent long after another answered (a few
        times the time a healthy one takes, at least 2 s) becomes a suspect. (The asks are the
        build's: they end by their own timeout.)"""
        loop = asyncio.get_running_loop()
        limit = min(deadline, loop.time() + 2.0)
        done, pending = await asyncio.wait(asks, timeout=max(0.0, limit - loop.time()))
        for task in done:
            if _alive(task.result()):
                self.health.answered(asks[task])
        if others_answered:
            waited = loop.time() - started
            for task in pending:
                server = asks[task]
                self._suspect(
                    server,
                    self._node_at(server),
                    f"did not answer ApiVersions within {seconds_text(waited)}",
                )

    def _background(self, call: Any) -> None:
        task = asyncio.ensure_future(call)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _node_at(self, address: str) -> int | None:
        return next((b.node_id for b in self.brokers.values() if b.address == address), None)

    async def _start(
        self, client: Any, what: str, timeout: float | None, asks: _Asks | None = None
    ) -> Any:
        """Start ``client`` within ``timeout``; on running out, name the broker(s) it was
        waiting on and close it in the background (closing may wait on them too)."""
        steering = steering_of(client)
        bound = asyncio.timeout(None if timeout is None else timeout * _WAIT_SHARE)
        try:
            async with bound:
                await client.start()
        except BaseException as exc:
            if bound.expired():
                assert timeout is not None
                self._close_later(client)
                waited = timeout * _WAIT_SHARE
                if steering is not None and not steering.nodes():  # still bootstrapping
                    reason = await self._blame_bootstrap(
                        steering.bootstrap, waited, timeout, what, asks
                    )
                else:
                    stuck = steering.stuck() if steering is not None else []
                    reason = await self._blame(stuck, waited, timeout)
                raise self._error(ErrorKind.TIMEOUT, what, reason) from exc
            with contextlib.suppress(Exception):
                await close_quietly(client)
            if isinstance(exc, KafkaError | OSError | TimeoutError):
                cause = await self._bootstrap_failure(timeout) if _is_bootstrap_error(exc) else None
                if cause is not None and cause.kind is ErrorKind.AUTH:
                    raise self._refused(cause, what) from exc
                if cause is not None:  # as the cluster's error, naming the server
                    raise KafkaPlumbingError(
                        cause.kind,
                        target=self.conn.describe(),
                        operation=what,
                        detail=f"{broker_name(self._node_at(cause.target), cause.target)} "
                        f"{cause.detail}",
                        code=cause.code,
                    ) from exc
                raise self._translate(exc, what) from exc
            raise
        return client

    async def _build(self, make: Callable[..., Any], what: str, timeout: float | None) -> Any:
        """Create a client whose bootstrap list puts answering servers first, steered away from
        suspects, and start it, all within ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        options = await self.client_options()
        servers = split_servers(options["bootstrap_servers"])
        step = self.conn.request_timeout if timeout is None else timeout
        # Every server asked directly, once, for the whole step: the ranking reads the first
        # answers, and a start that runs out of time reads the rest (a refusal of the
        # credentials that came late is still a refusal, not a timeout).
        asks = _Asks(loop.time(), {s: asyncio.ensure_future(self._ask(s, step)) for s in servers})
        try:
            ranked = await self._rank_bootstrap(servers, step / 2, what, asks)
            options["bootstrap_servers"] = ",".join(ranked)
            client = make(**options)
            Steering(inner_client(client), self.health, ranked)
            left = None if deadline is None else max(0.0, deadline - loop.time())
            return await self._start(client, what, left, asks)
        finally:
            self._asking.add(asks)
            asks.when_done(self._asking.discard)

    async def _shared(
        self,
        attr: str,
        lock: asyncio.Lock,
        make: Callable[..., Any],
        what: str,
        timeout: float | None,
    ) -> Any:
        """The shared client in ``attr``, built on first use (within ``timeout``, waiting for
        another caller's build included)."""
        client = getattr(self, attr)
        if client is not None:
            return client
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(timeout):
                await lock.acquire()
        except TimeoutError as exc:
            raise self._error(
                ErrorKind.TIMEOUT,
                what,
                f"another start still running after {seconds_text(timeout or 0)}",
            ) from exc
        try:
            client = getattr(self, attr)
            if client is None:
                left = None if timeout is None else max(0.0, timeout - (loop.time() - started))
                client = await self._build(make, what, left)
                setattr(self, attr, client)
            return client
        finally:
            lock.release()

    async def _bootstrap_failure(self, timeout: float | None) -> KafkaPlumbingError | None:
        """Why bootstrapping failed: aiokafka only logs the per-broker cause (a refused
        password, an untrusted certificate) and raises "Unable to bootstrap". The servers are
        asked again, at once and within ``timeout``; a refused password outranks the rest
        (it is the prober's own doing, whatever else went wrong)."""
        servers = split_servers(await self.bootstrap_servers())[:3]
        seconds = self.conn.request_timeout if timeout is None else max(0.1, timeout)
        problems = [
            p
            for p in await asyncio.gather(*(self._ask(s, seconds) for s in servers))
            if p is not None
        ]
        refused = [p for p in problems if p.kind is ErrorKind.AUTH]
        return next(iter(refused or problems), None)

    async def admin(self, timeout: float | None = None) -> AIOKafkaAdminClient:
        client: AIOKafkaAdminClient = await self._shared(
            "_admin", self._lock, AIOKafkaAdminClient, "admin client start", timeout
        )
        return client

    async def producer(self, timeout: float | None = None) -> PartitionWriter:
        """The shared idempotent ``acks=all`` producer."""

        def make(**options: Any) -> AIOKafkaProducer:
            return AIOKafkaProducer(enable_idempotence=True, acks="all", linger_ms=0, **options)

        client: AIOKafkaProducer = await self._shared(
            "_producer", self._producer_lock, make, "producer start (InitProducerId)", timeout
        )
        return PartitionWriter(client)

    async def new_consumer(
        self, timeout: float | None = None, *, max_wait: float = 0.1
    ) -> PartitionReader:
        """A started group-less reader the caller owns (and must ``close()``), e.g. a canary
        reader: it reads the partitions it is told to follow from their end on, waiting at
        most ``max_wait`` seconds for a broker to fill a fetch."""

        def make(**options: Any) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="latest",
                fetch_max_wait_ms=int(max_wait * 1000),
                isolation_level="read_uncommitted",
                **options,
            )

        client: AIOKafkaConsumer = await self._build(make, "consumer start", timeout)
        return PartitionReader(client)

    def _close_later(self, client: Any) -> None:
        self._background(close_quietly(client))

    async def reset_producer(self) -> None:
        """Drop the producer (after a failed send its state is suspect). The old one is
        closed in the background: flushing its pending batches may wait on a hung broker."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self._close_later(producer)

    def _drop_clients(self) -> None:
        """Forget the shared clients now and close them in the background."""
        clients = (self._admin, self._producer)
        self._admin = self._producer = None
        self._bootstrap = None
        for client in clients:
            if client is not None:
                self._close_later(client)

    async def reset(self) -> None:
        """Close every client; the next call rebuilds them (and re-resolves the ARN). What
        the cluster learnt about hung brokers is kept."""
        admin, producer = self._admin, self._producer
        self._admin = self._producer = None
        self._bootstrap = None
        for client in (admin, producer):
            if client is not None:
                await close_quietly(client)

    async def aclose(self) -> None:
        for asks in list(self._asking):
            asks.cancel()
        if self._retest is not None:
            self._retest.cancel()
            await asyncio.gather(self._retest, return_exceptions=True)
        await self.reset()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _translate(self, exc: BaseException, operation: str) -> KafkaPlumbingError:
        """A failure to reach the cluster: whatever is not known to be more specific (a
        timeout, TLS, refused credentials) means the cluster could not be reached."""
        return kafka_error(
            exc,
            target=self.conn.describe(),
            operation=operation,
            timeout=self.conn.request_timeout,
            unclassified=ErrorKind.CONNECT,
        )

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

    # -- hung brokers ---------------------------------------------------------------------------

    def _address(self, node_id: int, steering: Steering | None = None) -> str | None:
        """Where a broker listens: the client's view, else any metadata answer seen (a
        fenced broker drops out of metadata, not out of the reasons)."""
        address = steering.address(node_id) if steering is not None else None
        return address or self._addresses.get(node_id)

    def broker_name(self, node_id: int) -> str:
        """``broker 2 (10.0.0.7:9092)``."""
        return broker_name(node_id, self._address(node_id))

    def suspect(self, node_id: int) -> Suspicion | None:
        """Why this broker is being avoided, if it is (it did not answer recently)."""
        return self.health.suspect(self._address(node_id))

    def _suspect(self, address: str, node_id: int | None, reason: str) -> Suspicion:
        suspicion = self.health.hung(address, node_id, reason)
        if self._retest is None or self._retest.done():
            self._retest = asyncio.ensure_future(self._retest_suspects())
        return suspicion

    async def _retest_suspects(self) -> None:
        """While any broker is suspect, ask it again every few seconds on a connection of its
        own (connect + ApiVersions): one that answers is trusted again at once."""
        while True:
            await asyncio.sleep(RETEST_EVERY)
            suspects = self.health.suspects()
            if not suspects:
                return
            timeout = min(2.0, self.conn.request_timeout)
            results = await asyncio.gather(
                *(self._answers(s.address, timeout) for s in suspects), return_exceptions=True
            )
            for suspicion, result in zip(suspects, results, strict=True):
                if result is True:
                    self.health.answered(suspicion.address)

    async def _answers_of(
        self, servers: Sequence[str], seconds: float, asks: _Asks | None
    ) -> list[KafkaPlumbingError | None]:
        """Each server's answer to being asked directly: the build's own ask where there is
        one (waited for up to ``seconds`` more), else a new ask within ``seconds``."""
        loop = asyncio.get_running_loop()
        tasks = {
            s: (
                asks.tasks[s]
                if asks is not None and s in asks.tasks
                else asyncio.ensure_future(self._ask(s, seconds))
            )
            for s in servers
        }
        if tasks:
            await asyncio.wait(tasks.values(), timeout=seconds)
        answers: list[KafkaPlumbingError | None] = []
        for server, task in tasks.items():
            if task.done() and not task.cancelled():
                answers.append(task.result())
                continue
            since = asks.started if asks is not None and server in asks.tasks else None
            silent = seconds if since is None else loop.time() - since
            answers.append(
                self._error(
                    ErrorKind.TIMEOUT,
                    "ApiVersions",
                    f"did not answer ApiVersions within {seconds_text(silent)}",
                    target=server,
                )
            )
            if since is None:
                task.cancel()
        return answers

    async def _blame_bootstrap(
        self,
        servers: Sequence[str],
        waited: float,
        timeout: float,
        what: str,
        asks: _Asks | None = None,
    ) -> str:
        """Why bootstrapping ran out of time: the servers asked directly (the build's own asks
        when it has them, else now; with what is left of ``timeout``); a silent one is named,
        and a suspect. One that refuses the prober's credentials raises an ``auth`` error
        instead: the time ran out on a refusal."""
        head = f"no Kafka answer within {seconds_text(waited)}"
        answers = await self._answers_of(servers, max(0.0, timeout - waited), asks)
        refused = next((p for p in answers if p is not None and p.kind is ErrorKind.AUTH), None)
        if refused is not None:
            raise self._refused(refused, what)
        silent = []
        for server, problem in zip(servers, answers, strict=True):
            if problem is None:
                self.health.answered(server)
            else:
                silent.append(
                    self._suspect(server, self._node_at(server), problem.detail).describe()
                )
        if silent:
            return f"{head}: " + "; ".join(silent)
        return f"{head} (bootstrapping from {', '.join(servers)})"

    async def _blame(self, stuck: Sequence[int], waited: float, timeout: float) -> str:
        """Why a step ran out of time, naming the brokers it was waiting on. Waiting on a
        broker does not make it the culprit (a leader waits for its followers, a broker for
        the controller): each is asked directly, with what is left of ``timeout``, and only
        one that does not answer that either becomes a suspect."""
        head = f"no Kafka answer within {seconds_text(waited)}"
        if not stuck:
            return head
        checked = await self.ask_brokers(stuck, max(0.0, timeout - waited))
        silent = [s.describe() for s in checked.values() if s is not None]
        if silent:
            return f"{head}: " + "; ".join(silent)
        waiting = ", ".join(self.broker_name(n) for n in stuck)
        if len(checked) < len(stuck):
            return f"{head} (waiting on {waiting})"
        return (
            f"{head} (waiting on {waiting}, which answer{'s' if len(stuck) == 1 else ''} otherwise)"
        )

    async def _bounded(self, call: Any, client: Any, what: str, timeout: float | None) -> Any:
        """Await ``call`` (a request made through ``client``) within ``timeout``; running out
        raises a ``timeout`` :class:`KafkaPlumbingError` naming the broker(s) still owing an
        answer."""
        if timeout is None:
            return await self._guard(call, what)
        bound = asyncio.timeout(timeout * _WAIT_SHARE)
        try:
            async with bound:
                return await self._guard(call, what)
        except TimeoutError as exc:
            if not bound.expired():
                raise
            steering = steering_of(client)
            stuck = steering.stuck() if steering is not None else []
            reason = await self._blame(stuck, timeout * _WAIT_SHARE, timeout)
            raise self._error(ErrorKind.TIMEOUT, what, reason) from exc

    # -- requests -------------------------------------------------------------------------------

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

    async def ask_brokers(
        self, node_ids: Iterable[int], timeout: float
    ) -> dict[int, Suspicion | None]:
        """Ask brokers directly (ApiVersions, each on a connection of its own, all at once):
        one that does not answer within ``timeout`` becomes a suspect, one that answers is
        one no more. Per broker: its suspicion, or None if it answered."""
        targets = [(n, self._address(n)) for n in dict.fromkeys(node_ids)]
        known = [(n, a) for n, a in targets if a is not None]
        answers = await asyncio.gather(*(self._ask(a, timeout) for _, a in known))
        found: dict[int, Suspicion | None] = {}
        for (node_id, address), problem in zip(known, answers, strict=True):
            if _alive(problem):  # (refusing the prober's credentials is an answer too)
                self.health.answered(address)
                found[node_id] = None
            else:
                assert problem is not None
                found[node_id] = self._suspect(address, node_id, problem.detail)
        return found

    async def ask_every_broker(self, timeout: float) -> list[Suspicion]:
        """Ask every broker of the last metadata answer (:meth:`ask_brokers`); the current
        suspects. A hung broker whose partitions still look fine in metadata (nothing was
        written to them since it hung, or it leads them) is found this way, whichever broker
        the other requests of the run happened to ask."""
        await self.ask_brokers(list(self.brokers), timeout)
        return self.health.suspects()

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


def _alive(problem: KafkaPlumbingError | None) -> bool:
    """Whether a broker asked directly answered: it did, or it refused the credentials."""
    return problem is None or problem.kind is ErrorKind.AUTH


def _is_bootstrap_error(exc: BaseException) -> bool:
    return isinstance(exc, KafkaConnectionError) and "bootstrap" in str(exc)


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
