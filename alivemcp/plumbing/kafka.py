"""Kafka plumbing: one set of long-lived clients per cluster, shared by every Kafka probe.

Probes embed :class:`KafkaConnection` as their ``cluster:`` param and borrow a
:class:`KafkaCluster` from ``context.plumbing.kafka.cluster(conn)``. A cluster's clients (an
admin client, a group-less consumer for offsets and an idempotent ``acks=all`` producer) are
created on first use; when the connection breaks they are closed and rebuilt on the next call
rather than leaked.

Metadata requests never auto-create topics: Kafka's default ``auto.create.topics.enable=true``
would otherwise turn "does this topic exist?" (or a probe still watching a deleted topic)
into "create it".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aiokafka.client
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    for_code,
)
from aiokafka.protocol.admin import DescribeConfigsRequest, ListGroupsRequest
from aiokafka.protocol.metadata import MetadataRequest
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from alivemcp.plumbing.aws import AwsSettings, aws_error_summary

if TYPE_CHECKING:
    from alivemcp.plumbing import Plumbing

__all__ = [
    "BrokerInfo",
    "ClusterMetadata",
    "KafkaAuthFailed",
    "KafkaClients",
    "KafkaCluster",
    "KafkaConnection",
    "KafkaPlumbingError",
    "KafkaUnreachable",
    "MskIamTokenProvider",
    "PartitionState",
    "TopicState",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM"]


class _MetadataRequestNoAutoCreate(MetadataRequest):
    """A metadata request that never asks the broker to create the topics it names."""

    def __init__(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        super().__init__(topics, allow_auto_topic_creation=False)


# aiokafka's producer and consumer refresh metadata for every topic they touched, with
# auto-creation allowed (the protocol default). The prober must never create topics as a side
# effect of looking at them, so the clients this process builds use the non-creating request.
aiokafka.client.MetadataRequest = _MetadataRequestNoAutoCreate  # type: ignore[misc]


class KafkaPlumbingError(Exception):
    """The prober could not talk to the cluster; ``str()`` is safe to show (no secrets)."""


class KafkaUnreachable(KafkaPlumbingError):
    """No broker answered (bootstrap failed, every broker timed out, DNS, TLS handshake)."""


class KafkaAuthFailed(KafkaPlumbingError):
    """The prober's own credentials were refused, or it could not produce them (IAM)."""


# --------------------------------------------------------------------------------------------
# Connection settings


class KafkaConnection(BaseModel):
    """How to reach one Kafka/MSK cluster: the ``cluster:`` block of every Kafka probe."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str | None = Field(
        None, description="Comma-separated host:port list. Either this or cluster_arn."
    )
    cluster_arn: str | None = Field(
        None,
        description="MSK cluster ARN, resolved with kafka:GetBootstrapBrokers to the broker "
        "string matching the security settings.",
    )
    public_access: bool = Field(
        False, description="With cluster_arn: use MSK's public (internet) broker strings."
    )
    aws: AwsSettings = Field(
        default_factory=AwsSettings,
        description="AWS identity for cluster_arn resolution and MSK IAM authentication.",
    )
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL or SASL_SSL."
    )
    sasl_mechanism: SaslMechanism | None = Field(
        None,
        description="With SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM (OAUTHBEARER "
        "with MSK IAM tokens signed by the aws identity).",
    )
    username: str | None = Field(None, description="SCRAM user name.")
    password: SecretStr | None = Field(None, description="SCRAM password.")
    ca_file: Path | None = Field(
        None, description="PEM CA bundle to verify brokers (default: system trust store)."
    )
    client_cert_file: Path | None = Field(None, description="PEM client certificate (mTLS).")
    client_key_file: Path | None = Field(None, description="PEM client private key (mTLS).")
    client_key_password: SecretStr | None = Field(
        None, description="Password of an encrypted client key."
    )
    check_hostname: bool = Field(True, description="Verify broker host names against certs.")
    client_id: str = Field("alivemcp", description="Client id shown in broker logs and quotas.")
    request_timeout: float = Field(
        10.0, gt=0, le=300, description="Seconds one Kafka request may take before it fails."
    )
    metadata_max_age: float = Field(
        60.0, gt=0, description="Seconds between background metadata refreshes."
    )

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        if (self.bootstrap_servers is None) == (self.cluster_arn is None):
            raise ValueError("set exactly one of bootstrap_servers or cluster_arn")
        if self.bootstrap_servers is not None:
            servers = _split_servers(self.bootstrap_servers)
            if not servers:
                raise ValueError("bootstrap_servers is empty")
            bad = [server for server in servers if not _valid_server(server)]
            if bad:
                raise ValueError(f"bootstrap_servers entries must be host:port, not {bad}")
        if self.cluster_arn is not None and not _MSK_ARN.match(self.cluster_arn):
            raise ValueError("cluster_arn is not an MSK cluster ARN (arn:aws:kafka:...)")
        if self.security_protocol == "SASL_SSL" and self.sasl_mechanism is None:
            raise ValueError("security_protocol SASL_SSL needs sasl_mechanism")
        if self.sasl_mechanism is not None and self.security_protocol != "SASL_SSL":
            raise ValueError("sasl_mechanism needs security_protocol SASL_SSL")
        if self.sasl_mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") and (
            not self.username or self.password is None
        ):
            raise ValueError(f"{self.sasl_mechanism} needs username and password")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        return self

    def identity_key(self) -> tuple[Any, ...]:
        """Everything that makes two connections different, secrets included (never shown)."""
        return (
            self.bootstrap_servers,
            self.cluster_arn,
            self.public_access,
            self.aws.identity_key(),
            self.aws.region,
            self.aws.endpoint_url,
            tuple(sorted(self.aws.endpoint_urls.items())),
            self.security_protocol,
            self.sasl_mechanism,
            self.username,
            self.password.get_secret_value() if self.password else None,
            str(self.ca_file),
            str(self.client_cert_file),
            str(self.client_key_file),
            self.client_key_password.get_secret_value() if self.client_key_password else None,
            self.check_hostname,
            self.client_id,
            self.request_timeout,
            self.metadata_max_age,
        )

    def describe(self) -> str:
        """A short, secret-free name for reasons: the ARN or the first bootstrap server."""
        if self.cluster_arn:
            return self.cluster_arn
        servers = _split_servers(self.bootstrap_servers or "")
        return servers[0] + (f" (+{len(servers) - 1})" if len(servers) > 1 else "")

    @property
    def region(self) -> str | None:
        if self.cluster_arn:
            return self.cluster_arn.split(":")[3] or self.aws.region
        return self.aws.region

    def broker_string_field(self) -> str:
        """Which GetBootstrapBrokers field carries the brokers for this auth mode."""
        public = "Public" if self.public_access else ""
        if self.security_protocol == "PLAINTEXT":
            if self.public_access:
                raise ValueError("MSK public access has no plaintext brokers")
            return "BootstrapBrokerString"
        if self.security_protocol == "SSL":
            return f"BootstrapBrokerString{public}Tls"
        if self.sasl_mechanism == "AWS_MSK_IAM":
            return f"BootstrapBrokerString{public}SaslIam"
        return f"BootstrapBrokerString{public}SaslScram"


_MSK_ARN = re.compile(r"^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:(serverless-)?cluster/\S+$")


_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _valid_server(server: str) -> bool:
    match = _HOST_PORT.match(server)
    return match is not None and 0 < int(match.group(2)) < 65536


def _split_servers(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# --------------------------------------------------------------------------------------------
# MSK IAM tokens


class MskIamTokenProvider(AbstractTokenProvider):
    """OAUTHBEARER tokens for MSK IAM, signed with the AWS identity of the ``aws:`` block.

    Credentials come from the shared AWS plumbing (so profiles, static keys, IRSA and assumed
    roles all work); the token itself is signed in an executor because the signer is
    synchronous. Tokens last 15 minutes and are replaced ``refresh_margin`` seconds early.
    """

    def __init__(
        self,
        credentials: Callable[[], Any],
        region: str,
        *,
        refresh_margin: float = 180.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self._region = region
        self._refresh_margin = refresh_margin
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        #: How many tokens were signed (refreshes are observable in tests and logs).
        self.generated = 0

    @property
    def expires_at(self) -> float:
        return self._expires_at

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._expires_at - self._refresh_margin:
            return self._token
        async with self._lock:
            if self._token is not None and self._clock() < self._expires_at - self._refresh_margin:
                return self._token
            try:
                frozen = await self._credentials()
            except Exception as exc:
                raise KafkaAuthFailed(
                    f"MSK IAM: no AWS credentials: {aws_error_summary(exc)}"
                ) from exc
            if frozen is None or not frozen.access_key or not frozen.secret_key:
                raise KafkaAuthFailed("MSK IAM: no AWS credentials found")
            loop = asyncio.get_running_loop()
            token, expiry_ms = await loop.run_in_executor(
                None, _sign_msk_token, self._region, frozen
            )
            self._token = token
            self._expires_at = expiry_ms / 1000.0
            self.generated += 1
            return token


def _sign_msk_token(region: str, frozen: Any) -> tuple[str, int]:
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    from botocore.credentials import CredentialProvider, Credentials

    class _Fixed(CredentialProvider):  # the signer only accepts a CredentialProvider
        METHOD = "alivemcp"

        def load(self) -> Credentials:
            return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
        region, _Fixed()
    )
    return str(token), int(expiry_ms)


# --------------------------------------------------------------------------------------------
# Snapshots the probes read


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: int

    @property
    def offline(self) -> bool:
        """No leader: nothing can be read or written."""
        return self.leader < 0

    @property
    def missing_from_isr(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.isr)


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    error_code: int
    internal: bool
    partitions: tuple[PartitionState, ...]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: Mapping[int, BrokerInfo]
    controller_id: int
    topics: Mapping[str, TopicState]


# --------------------------------------------------------------------------------------------
# Clients


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    TimeoutError,
    OSError,
)


class KafkaCluster:
    """Long-lived clients for one cluster, and the small async helpers the probes need."""

    def __init__(self, conn: KafkaConnection, plumbing: Plumbing) -> None:
        self.conn = conn
        self._plumbing = plumbing
        self._lock = asyncio.Lock()
        self._producer_lock = asyncio.Lock()
        self._bootstrap: str | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._token_provider: MskIamTokenProvider | None = None
        self._ssl_context: ssl.SSLContext | None = None
        self._closing: set[asyncio.Task[None]] = set()

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
        field = self.conn.broker_string_field()
        client = await self._plumbing.aws.client("kafka", self.conn.aws, self.conn.region)
        try:
            response = await client.get_bootstrap_brokers(ClusterArn=self.conn.cluster_arn)
        except Exception as exc:
            raise KafkaUnreachable(
                f"cannot resolve {self.conn.cluster_arn}: {aws_error_summary(exc)}"
            ) from exc
        brokers = response.get(field)
        if not brokers:
            offered = sorted(k for k, v in response.items() if k.startswith("Bootstrap") and v)
            raise KafkaUnreachable(
                f"{self.conn.cluster_arn} has no {field} for {self.conn.security_protocol}"
                f"/{self.conn.sasl_mechanism or '-'}; it offers {offered or 'none'}"
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
                raise KafkaAuthFailed("MSK IAM needs a region (aws.region or cluster_arn)")
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
            raise KafkaAuthFailed(f"TLS settings unusable: {type(exc).__name__}: {exc}") from exc
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

    async def _start(self, client: Any) -> Any:
        try:
            await client.start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await _close(client)
            if isinstance(exc, KafkaError | OSError | TimeoutError):
                cause = await self._bootstrap_failure() if _is_bootstrap_error(exc) else None
                raise self._translate(cause or exc) from exc
            raise
        return client

    async def _bootstrap_failure(self) -> BaseException | None:
        """Why bootstrapping failed: aiokafka only logs the per-broker cause (a refused
        password, an untrusted certificate) and raises "Unable to bootstrap"."""
        options = await self.client_options()
        servers = _split_servers(options.pop("bootstrap_servers"))
        for key in ("metadata_max_age_ms",):
            options.pop(key, None)
        found: BaseException | None = None
        for server in servers[:3]:
            host, _, port = server.rpartition(":")
            try:
                async with asyncio.timeout(self.conn.request_timeout):
                    conn = await create_conn(host.strip("[]"), int(port), **options)
            except (KafkaError, OSError, TimeoutError, ValueError) as exc:
                found = found or exc
                continue
            conn.close()
        return found

    async def admin(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            async with self._lock:
                if self._admin is None:
                    options = await self.client_options()
                    self._admin = await self._start(AIOKafkaAdminClient(**options))
        return self._admin

    async def offsets_consumer(self) -> AIOKafkaConsumer:
        """The shared group-less consumer: end/beginning offsets and offsets-for-times only
        (never subscribe or assign it: that would start fetching for everyone)."""
        if self._consumer is None:
            async with self._lock:
                if self._consumer is None:
                    options = await self.client_options()
                    self._consumer = await self._start(
                        AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **options)
                    )
        return self._consumer

    async def producer(self) -> AIOKafkaProducer:
        """The shared idempotent ``acks=all`` producer."""
        if self._producer is None:
            async with self._producer_lock:
                if self._producer is None:
                    options = await self.client_options()
                    self._producer = await self._start(
                        AIOKafkaProducer(
                            enable_idempotence=True, acks="all", linger_ms=0, **options
                        )
                    )
        return self._producer

    async def new_consumer(self, **kwargs: Any) -> AIOKafkaConsumer:
        """A started consumer the caller owns (and must ``stop()``), e.g. a canary reader."""
        options = await self.client_options()
        options.update(kwargs)
        return await self._start(AIOKafkaConsumer(**options))

    async def reset_producer(self) -> None:
        """Drop the producer (after a failed send its state is suspect). The old one is
        closed in the background: flushing its pending batches may wait on a hung broker."""
        producer, self._producer = self._producer, None
        if producer is not None:
            task = asyncio.create_task(_close(producer))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def reset(self) -> None:
        """Close every client; the next call rebuilds them (and re-resolves the ARN)."""
        admin, consumer, producer = self._admin, self._consumer, self._producer
        self._admin = self._consumer = self._producer = None
        self._bootstrap = None
        for client in (admin, consumer, producer):
            if client is not None:
                await _close(client)

    async def aclose(self) -> None:
        await self.reset()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _translate(self, exc: BaseException) -> KafkaPlumbingError:
        if isinstance(exc, KafkaPlumbingError):
            return exc
        name = type(exc).__name__
        text = f"{name}: {exc}"
        if isinstance(exc, TimeoutError) or not str(exc):
            text = f"{name}: no Kafka answer within {self.conn.request_timeout:g}s"
        if isinstance(exc, ssl.SSLError):
            return KafkaUnreachable(f"{self.conn.describe()}: TLS: {exc}")
        if "Authentication" in name or "Sasl" in name or "authenticat" in str(exc).lower():
            return KafkaAuthFailed(f"{self.conn.describe()}: {text}")
        return KafkaUnreachable(f"{self.conn.describe()}: {text}")

    async def _guard(self, call: Any) -> Any:
        """Await ``call``; on a connection-level failure rebuild the clients and raise a
        :class:`KafkaPlumbingError` that says what happened."""
        try:
            return await call
        except KafkaPlumbingError:
            raise
        except _CONNECTION_ERRORS as exc:
            await self.reset()
            raise self._translate(exc) from exc

    # -- requests -------------------------------------------------------------------------------

    async def _send_any(self, request: Any, attempt_timeout: float | None = None) -> Any:
        """Send to a broker, trying others if one does not answer (a hung broker must not
        make a cluster-wide question time out)."""
        admin = await self.admin()
        client = admin._client
        nodes = [b.nodeId for b in client.cluster.brokers()]
        random.shuffle(nodes)
        attempt_timeout = attempt_timeout or max(1.0, self.conn.request_timeout / 2)
        last: BaseException | None = None
        for node_id in nodes[:3] or [None]:
            target = node_id if node_id is not None else client.get_random_node()
            try:
                async with asyncio.timeout(attempt_timeout):
                    return await client.send(target, request)
            except (*_CONNECTION_ERRORS, KafkaError) as exc:
                last = exc
        assert last is not None
        raise last

    async def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """Brokers, controller and topic/partition states (all topics when ``topics`` is
        None). Never creates a topic; a missing one comes back with error code 3."""
        request = _MetadataRequestNoAutoCreate(list(topics) if topics is not None else None)
        response = await self._guard(self._send_any(request))
        snapshot = _parse_metadata(response)
        if all(t.error_code == 0 for t in snapshot.topics.values()):
            # Keep the admin's view of live brokers current: a fenced broker drops out of it.
            # (aiokafka logs an error for every missing topic in an update, hence the filter.)
            admin = await self.admin()
            admin._client.cluster.update_metadata(response)
        return snapshot

    async def topic_configs(
        self, topics: Iterable[str], keys: Sequence[str] = ("min.insync.replicas",)
    ) -> dict[str, dict[str, str]]:
        """Effective topic configs (``keys`` only), by topic; topics that failed are absent."""
        names = list(topics)
        if not names:
            return {}
        resources = [(2, name, list(keys)) for name in names]
        response = await self._guard(self._send_any(DescribeConfigsRequest(resources, False)))
        out: dict[str, dict[str, str]] = {}
        for resource in response.resources:
            error_code, _message, _rtype, name, entries = resource[:5]
            if error_code:
                continue
            out[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
        return out

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        consumer = await self.offsets_consumer()
        return await self._guard(consumer.end_offsets(list(partitions)))

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        consumer = await self.offsets_consumer()
        return await self._guard(consumer.beginning_offsets(list(partitions)))

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Any]:
        consumer = await self.offsets_consumer()
        return await self._guard(consumer.offsets_for_times(dict(timestamps)))

    async def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """A group's committed offsets (partitions without a commit are absent)."""
        admin = await self.admin()
        for attempt in range(4):
            try:
                raw = await self._guard(admin.list_consumer_group_offsets(group))
                break
            except KafkaError as exc:
                # The coordinator is being elected or __consumer_offsets is still loading.
                if not exc.retriable or attempt == 3:
                    raise
                await asyncio.sleep(0.25 * (attempt + 1))
        return {tp: meta.offset for tp, meta in raw.items() if meta.offset >= 0}

    async def list_groups(self) -> list[str]:
        """Every consumer group on every live broker."""
        snapshot = await self.metadata([])
        admin = await self.admin()
        groups: set[str] = set()

        async def one(node_id: int) -> None:
            response = await admin._client.send(node_id, ListGroupsRequest())
            if response.error_code:
                raise for_code(response.error_code)("listing consumer groups failed")
            groups.update(group[0] for group in response.groups)

        await self._guard(asyncio.gather(*(one(n) for n in snapshot.brokers)))
        return sorted(groups)

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> bool:
        """Create a topic; False if it already existed. Raises the broker's error otherwise
        (``create_topics`` reports errors in the response instead of raising)."""
        admin = await self.admin()
        if assignments:
            topic = NewTopic(
                name, -1, -1,
                replica_assignments={p: list(r) for p, r in assignments.items()},
                topic_configs=dict(configs or {}),
            )
        else:
            topic = NewTopic(
                name, partitions, replication_factor, topic_configs=dict(configs or {})
            )
        response = await self._guard(admin.create_topics([topic]))
        for result in response.topic_errors:
            error_code, message = result[1], result[2] if len(result) > 2 else ""
            if error_code == TopicAlreadyExistsError.errno:
                return False
            if error_code:
                raise for_code(error_code)(f"creating topic {name}: {message}")
        return True

    async def add_partitions(
        self, name: str, total: int, assignments: Sequence[Sequence[int]]
    ) -> None:
        """Grow a topic to ``total`` partitions placed on ``assignments`` (one replica list
        per new partition, preferred leader first)."""
        admin = await self.admin()
        request = {name: NewPartitions(total, [list(a) for a in assignments])}
        response = await self._guard(admin.create_partitions(request))
        _raise_topic_errors(response, f"adding partitions to {name}")


def _raise_topic_errors(response: Any, what: str) -> None:
    for result in response.topic_errors:
        error_code, message = result[1], result[2] if len(result) > 2 else ""
        if error_code:
            raise for_code(error_code)(f"{what}: {message}")


def _is_bootstrap_error(exc: BaseException) -> bool:
    return isinstance(exc, KafkaConnectionError) and "bootstrap" in str(exc)


def _parse_metadata(response: Any) -> ClusterMetadata:
    obj = response.to_object()
    brokers = {
        int(b["node_id"]): BrokerInfo(int(b["node_id"]), str(b["host"]), int(b["port"]))
        for b in obj.get("brokers", [])
    }
    topics: dict[str, TopicState] = {}
    for t in obj.get("topics", []):
        name = str(t["topic"])
        parts = tuple(
            PartitionState(
                topic=name,
                partition=int(p["partition"]),
                leader=int(p["leader"]),
                replicas=tuple(int(r) for r in p["replicas"]),
                isr=tuple(int(r) for r in p["isr"]),
                offline_replicas=tuple(int(r) for r in p.get("offline_replicas", ())),
                error_code=int(p["error_code"]),
            )
            for p in sorted(t.get("partitions", []), key=lambda p: int(p["partition"]))
        )
        topics[name] = TopicState(
            name=name,
            error_code=int(t["error_code"]),
            internal=bool(t.get("is_internal", False)),
            partitions=parts,
        )
    return ClusterMetadata(
        brokers=brokers, controller_id=int(obj.get("controller_id", -1)), topics=topics
    )


async def _close(client: Any) -> None:
    closer = getattr(client, "stop", None) or client.close
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await closer()


class KafkaClients:
    """Every cluster's clients in this process, keyed by connection settings."""

    def __init__(self, plumbing: Plumbing) -> None:
        self._plumbing = plumbing
        self._clusters: dict[tuple[Any, ...], KafkaCluster] = {}

    def cluster(self, conn: KafkaConnection) -> KafkaCluster:
        key = conn.identity_key()
        cluster = self._clusters.get(key)
        if cluster is None:
            cluster = self._clusters[key] = KafkaCluster(conn, self._plumbing)
        return cluster

    async def aclose(self) -> None:
        clusters = list(self._clusters.values())
        self._clusters.clear()
        for cluster in clusters:
            await cluster.aclose()
