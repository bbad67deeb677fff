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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aiokafka.client
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.client import AIOKafkaClient, ConnectionGroup
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
    "BrokerHealth",
    "BrokerInfo",
    "ClusterMetadata",
    "KafkaAuthFailed",
    "KafkaBrokerTimeout",
    "KafkaClients",
    "KafkaCluster",
    "KafkaConnection",
    "KafkaPlumbingError",
    "KafkaUnreachable",
    "MskIamTokenProvider",
    "PartitionState",
    "RunBudget",
    "Suspicion",
    "TopicState",
    "broker_name",
    "close_quietly",
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
# Time budgets and hung brokers


class RunBudget:
    """The time one probe run may spend on Kafka, handed out step by step.

    A broker that accepts connections but answers nothing costs every request that reaches it
    a whole request timeout. A probe makes one budget from its check's timeout
    (:meth:`for_check`) and gives each step (bootstrap, metadata, a produce, a fetch...) a slice
    of what is left, so a hung broker costs one step its slice and the run still ends with a
    verdict of its own, naming what hung, before the engine's timeout cancels it.
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.seconds = max(0.0, seconds)
        self._ends_at = clock() + self.seconds

    @classmethod
    def for_check(cls, timeout: float, *, share: float = 0.85, margin: float = 0.5) -> RunBudget:
        """Finish by ``share`` of the check's timeout and at least ``margin`` seconds before it:
        the rest is for building the verdict and for slow event loops."""
        return cls(max(0.0, min(timeout * share, timeout - margin)))

    def remaining(self) -> float:
        return max(0.0, self._ends_at - self._clock())

    def step(self, at_most: float | None = None, *, share: float = 1.0, keep: float = 0.0) -> float:
        """Seconds for the next step: ``share`` of what is left once ``keep`` seconds are set
        aside for the steps after it (if that leaves nothing, ``share`` of what is left), and
        never more than ``at_most``."""
        left = self.remaining()
        seconds = (left - keep if left > keep else left) * share
        return min(seconds, at_most) if at_most is not None else seconds


class KafkaBrokerTimeout(KafkaUnreachable):
    """A step did not finish in its time; ``str()`` names the broker(s) that did not answer."""


@dataclass(slots=True)
class Suspicion:
    """A broker that did not answer within its attempt, and what it did not answer."""

    address: str
    node_id: int | None
    reason: str  # e.g. "did not answer Metadata within 2s"
    since: float
    until: float

    @property
    def name(self) -> str:
        return broker_name(self.node_id, self.address)

    def describe(self) -> str:
        return f"{self.name} {self.reason}"


def broker_name(node_id: int | None, address: str | None) -> str:
    """How reasons name a broker: ``broker 2 (10.0.0.7:9092)``."""
    if node_id is None:
        return f"bootstrap server {address}"
    return f"broker {node_id} ({address})" if address else f"broker {node_id}"


class BrokerHealth:
    """Brokers that recently did not answer within their attempt ("suspects"), by address.

    A suspect is asked last, or not at all while another broker can answer, until it answers
    a re-test or ``hold`` seconds pass: one hung broker then costs one attempt, not one per
    request. (Kept by :class:`KafkaCluster` across client rebuilds.)
    """

    def __init__(self, hold: float = 45.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold = hold
        self._clock = clock
        self._suspects: dict[str, Suspicion] = {}

    def hung(self, address: str, node_id: int | None, reason: str) -> Suspicion:
        """Record that ``address`` did not answer; a broker already suspect keeps its first
        reason (what it stopped answering) and is held longer."""
        now = self._clock()
        known = self.suspect(address)
        if known is not None:
            known.until = now + self.hold
            if node_id is not None:
                known.node_id = node_id
            return known
        suspicion = Suspicion(address, node_id, reason, now, now + self.hold)
        self._suspects[address] = suspicion
        return suspicion

    def answered(self, address: str) -> None:
        self._suspects.pop(address, None)

    def suspect(self, address: str | None) -> Suspicion | None:
        if address is None:
            return None
        suspicion = self._suspects.get(address)
        if suspicion is not None and self._clock() >= suspicion.until:
            del self._suspects[address]
            return None
        return suspicion

    def suspects(self) -> list[Suspicion]:
        """Current suspects, longest-suspected first."""
        for address in list(self._suspects):
            self.suspect(address)
        return sorted(self._suspects.values(), key=lambda s: s.since)


class _Steering:
    """Makes one aiokafka client avoid suspect brokers.

    aiokafka asks a random broker for cluster-wide requests (InitProducerId, FindCoordinator,
    metadata refreshes) and opens every connection under one client-wide lock, so a broker
    that accepts TCP but never answers stalls requests to healthy brokers as well, for a whole
    request timeout. Steered, the client picks healthy brokers first and neither connects to
    nor reuses a connection to a suspect while another broker is healthy.
    """

    def __init__(
        self, client: AIOKafkaClient, health: BrokerHealth, bootstrap: Sequence[str] = ()
    ) -> None:
        self.client = client
        self.health = health
        #: The servers this client bootstraps from.
        self.bootstrap = list(bootstrap)
        #: Brokers this client is opening a connection to right now (with a count of callers).
        self.connecting: Counter[Any] = Counter()
        self._get_conn = client._get_conn
        client._get_conn = self.get_conn  # type: ignore[method-assign]
        client.get_random_node = self.get_random_node  # type: ignore[method-assign]
        client._alivemcp_steering = self  # type: ignore[attr-defined]

    def address(self, node_id: Any) -> str | None:
        broker = self.client.cluster.broker_metadata(node_id) if isinstance(node_id, int) else None
        return f"{broker.host}:{broker.port}" if broker is not None else None

    def name(self, node_id: int) -> str:
        return broker_name(node_id, self.address(node_id))

    def suspect(self, node_id: Any) -> Suspicion | None:
        return self.health.suspect(self.address(node_id))

    def nodes(self) -> list[int]:
        return [b.nodeId for b in self.client.cluster.brokers() if isinstance(b.nodeId, int)]

    def order(self, nodes: Iterable[int]) -> list[int]:
        """Healthy brokers first, in random order; suspects last, longest-suspected last."""
        healthy: list[tuple[float, int]] = []
        suspect: list[tuple[float, int]] = []
        for node_id in nodes:
            found = self.suspect(node_id)
            (suspect if found else healthy).append((-(found.since if found else 0.0), node_id))
        random.shuffle(healthy)
        return [n for _, n in healthy] + [n for _, n in sorted(suspect)]

    def skipped(self, node_id: Any) -> Suspicion | None:
        """The suspicion that keeps this broker out of use now (None when it may be used: not
        suspect, or no other broker is healthy)."""
        found = self.suspect(node_id)
        if found is None:
            return None
        others = (n for n in self.nodes() if n != node_id)
        return found if any(self.suspect(n) is None for n in others) else None

    async def get_conn(
        self, node_id: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
        no_hint: bool = False,
    ) -> Any:
        if self.skipped(node_id) is not None:
            return None  # the caller sees "node not ready" at once, not a hung request
        self.connecting[node_id] += 1
        try:
            return await self._get_conn(node_id, group=group, no_hint=no_hint)
        finally:
            self.connecting[node_id] -= 1
            if self.connecting[node_id] <= 0:
                del self.connecting[node_id]

    def get_random_node(self) -> int | None:
        ordered = self.order(self.nodes())
        return ordered[0] if ordered else None

    def stuck(self) -> list[int]:
        """Brokers this client is waiting on right now: a connection being opened, or a
        request sent and not answered. (Meaningful for clients without long polls: the admin
        client, the producer and the offsets consumer.)"""
        nodes = {n for n in self.connecting if isinstance(n, int)}
        for (node_id, _group), conn in list(self.client._conns.items()):
            if isinstance(node_id, int) and getattr(conn, "_requests", None):
                nodes.add(node_id)
        return sorted(nodes)


def _steering(client: Any) -> _Steering | None:
    """The steering of a client built by :class:`KafkaCluster` (admin, producer, consumer)."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None) or client
    steering = getattr(inner, "_alivemcp_steering", None)
    return steering if isinstance(steering, _Steering) else None


def _inner_client(client: Any) -> AIOKafkaClient:
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    assert isinstance(inner, AIOKafkaClient)
    return inner


def _seconds(value: float) -> str:
    return f"{round(value, 1):g}s"


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


class KafkaCluster:
    """Long-lived clients for one cluster, and the small async helpers the probes need.

    Every helper takes an optional ``timeout``: the seconds its step may take (from the
    probe's :class:`RunBudget`). A step that runs out names the broker(s) it was waiting on
    (:class:`KafkaBrokerTimeout`), and those brokers become suspects (:class:`BrokerHealth`),
    avoided by every client of the cluster until they answer a background re-test.
    """

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
        #: Background work: clients closing, bootstrap servers still being judged.
        self._closing: set[asyncio.Future[None]] = set()
        self.health = BrokerHealth()
        #: Brokers of the last metadata answer, to name brokers by id and address.
        self.brokers: dict[int, BrokerInfo] = {}
        self._addresses: dict[int, str] = {}
        self._retest: asyncio.Task[None] | None = None

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

    async def _connection_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's ``create_conn`` (one connection, no client)."""
        options = await self.client_options()
        for key in ("bootstrap_servers", "metadata_max_age_ms"):
            options.pop(key, None)
        return options

    async def _answers(self, server: str, timeout: float) -> bool:
        return await self._ask(server, timeout) is None

    async def _ask(self, server: str, timeout: float) -> str | None:
        """Connect to ``server`` (host:port) on a connection of its own (no client's lock)
        and ask ApiVersions (authenticating as configured): None if it answered within
        ``timeout``, else what went wrong."""
        host, _, port = server.rpartition(":")
        try:
            options = await self._connection_options()
            async with asyncio.timeout(timeout):
                conn = await create_conn(host.strip("[]"), int(port), **options)
        except TimeoutError:
            return f"did not answer ApiVersions within {_seconds(timeout)}"
        except (KafkaError, OSError, ValueError) as exc:
            return f"cannot be asked: {type(exc).__name__}: {exc}"
        conn.close()
        return None

    async def _rank_bootstrap(self, servers: list[str], timeout: float) -> list[str]:
        """Ask every bootstrap server at once and keep those that answered (all of them if
        none did): aiokafka bootstraps from the servers one by one in random order, waiting a
        whole request timeout on a hung one. A server still silent well after another
        answered becomes a suspect (judged in the background: the caller goes on at once)."""
        if len(servers) < 2:
            return servers
        loop = asyncio.get_running_loop()
        started = loop.time()
        asks = {asyncio.ensure_future(self._answers(s, timeout)): s for s in servers}
        pending = set(asks)
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
                if task.result():
                    answered.append(asks[task])
                    self.health.answered(asks[task])
            if answered and until == started + timeout:
                # Healthy brokers answer within moments of each other.
                elapsed = loop.time() - started
                until = min(until, loop.time() + max(0.2, 2 * elapsed))
        if pending:
            judge = self._judge_silent(
                {t: asks[t] for t in pending}, bool(answered), started, started + timeout
            )
            self._background(judge)
        return answered or servers

    async def _judge_silent(
        self, asks: dict[asyncio.Future[bool], str], others_answered: bool, started: float,
        deadline: float,
    ) -> None:
        """Bootstrap servers still asked: one silent long after another answered (a few
        times the time a healthy one takes, at least 2 s) becomes a suspect."""
        loop = asyncio.get_running_loop()
        limit = min(deadline, loop.time() + 2.0)
        try:
            done, pending = await asyncio.wait(asks, timeout=max(0.0, limit - loop.time()))
            for task in done:
                if task.result():
                    self.health.answered(asks[task])
            if others_answered:
                waited = loop.time() - started
                for task in pending:
                    server = asks[task]
                    self._suspect(
                        server, self._node_at(server),
                        f"did not answer ApiVersions within {_seconds(waited)}",
                    )
        finally:
            for task in asks:
                task.cancel()
            await asyncio.gather(*asks, return_exceptions=True)

    def _background(self, call: Any) -> None:
        task = asyncio.ensure_future(call)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _node_at(self, address: str) -> int | None:
        return next((b.node_id for b in self.brokers.values() if b.address == address), None)

    async def _start(self, client: Any, what: str, timeout: float | None) -> Any:
        """Start ``client`` within ``timeout``; on running out, name the broker(s) it was
        waiting on and close it in the background (closing may wait on them too)."""
        steering = _steering(client)
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
                    reason = await self._blame_bootstrap(steering.bootstrap, what, waited, timeout)
                else:
                    stuck = steering.stuck() if steering is not None else []
                    reason = await self._blame(stuck, what, waited, timeout)
                raise KafkaBrokerTimeout(reason) from exc
            with contextlib.suppress(Exception):
                await _close(client)
            if isinstance(exc, KafkaError | OSError | TimeoutError):
                cause = await self._bootstrap_failure() if _is_bootstrap_error(exc) else None
                raise self._translate(cause or exc) from exc
            raise
        return client

    async def _build(self, make: Callable[..., Any], what: str, timeout: float | None) -> Any:
        """Create a client whose bootstrap list puts answering servers first, steered away from
        suspects, and start it, all within ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        options = await self.client_options()
        servers = _split_servers(options["bootstrap_servers"])
        rank_for = self.conn.request_timeout if timeout is None else timeout / 2
        ranked = await self._rank_bootstrap(servers, rank_for)
        options["bootstrap_servers"] = ",".join(ranked)
        client = make(**options)
        _Steering(_inner_client(client), self.health, ranked)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        return await self._start(client, what, left)

    async def _shared(
        self, attr: str, lock: asyncio.Lock, make: Callable[..., Any], what: str,
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
            raise KafkaBrokerTimeout(
                f"{self.conn.describe()}: {what}: another start still running after "
                f"{_seconds(timeout or 0)}"
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

    async def _bootstrap_failure(self) -> BaseException | None:
        """Why bootstrapping failed: aiokafka only logs the per-broker cause (a refused
        password, an untrusted certificate) and raises "Unable to bootstrap"."""
        options = await self._connection_options()
        servers = _split_servers(await self.bootstrap_servers())
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

    async def admin(self, timeout: float | None = None) -> AIOKafkaAdminClient:
        client: AIOKafkaAdminClient = await self._shared(
            "_admin", self._lock, AIOKafkaAdminClient, "admin client start", timeout
        )
        return client

    async def offsets_consumer(self, timeout: float | None = None) -> AIOKafkaConsumer:
        """The shared group-less consumer: end/beginning offsets and offsets-for-times only
        (never subscribe or assign it: that would start fetching for everyone)."""

        def make(**options: Any) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **options)

        client: AIOKafkaConsumer = await self._shared(
            "_consumer", self._lock, make, "offsets consumer start", timeout
        )
        return client

    async def producer(self, timeout: float | None = None) -> AIOKafkaProducer:
        """The shared idempotent ``acks=all`` producer."""

        def make(**options: Any) -> AIOKafkaProducer:
            return AIOKafkaProducer(enable_idempotence=True, acks="all", linger_ms=0, **options)

        client: AIOKafkaProducer = await self._shared(
            "_producer", self._producer_lock, make, "producer start (InitProducerId)", timeout
        )
        return client

    async def new_consumer(self, timeout: float | None = None, **kwargs: Any) -> AIOKafkaConsumer:
        """A started consumer the caller owns (and must ``stop()``), e.g. a canary reader."""

        def make(**options: Any) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(**{**options, **kwargs})

        client: AIOKafkaConsumer = await self._build(make, "consumer start", timeout)
        return client

    def _close_later(self, client: Any) -> None:
        self._background(_close(client))

    async def reset_producer(self) -> None:
        """Drop the producer (after a failed send its state is suspect). The old one is
        closed in the background: flushing its pending batches may wait on a hung broker."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self._close_later(producer)

    def _drop_clients(self) -> None:
        """Forget the shared clients now and close them in the background."""
        clients = (self._admin, self._consumer, self._producer)
        self._admin = self._consumer = self._producer = None
        self._bootstrap = None
        for client in clients:
            if client is not None:
                self._close_later(client)

    async def reset(self) -> None:
        """Close every client; the next call rebuilds them (and re-resolves the ARN). What
        the cluster learnt about hung brokers is kept."""
        admin, consumer, producer = self._admin, self._consumer, self._producer
        self._admin = self._consumer = self._producer = None
        self._bootstrap = None
        for client in (admin, consumer, producer):
            if client is not None:
                await _close(client)

    async def aclose(self) -> None:
        if self._retest is not None:
            self._retest.cancel()
            await asyncio.gather(self._retest, return_exceptions=True)
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

    # -- hung brokers ---------------------------------------------------------------------------

    def _address(self, node_id: int, steering: _Steering | None = None) -> str | None:
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

    async def _blame_bootstrap(
        self, servers: Sequence[str], what: str, waited: float, timeout: float
    ) -> str:
        """Why bootstrapping ran out of time: the servers asked directly (with what is left of
        ``timeout``); a silent one is named, and a suspect."""
        head = f"{self.conn.describe()}: {what}: no Kafka answer within {_seconds(waited)}"
        answers = await asyncio.gather(
            *(self._ask(s, max(0.0, timeout - waited)) for s in servers)
        )
        silent = []
        for server, problem in zip(servers, answers, strict=True):
            if problem is None:
                self.health.answered(server)
            else:
                silent.append(self._suspect(server, self._node_at(server), problem).describe())
        if silent:
            return f"{head}: " + "; ".join(silent)
        return f"{head} (bootstrapping from {', '.join(servers)})"

    async def _blame(
        self, stuck: Sequence[int], what: str, waited: float, timeout: float
    ) -> str:
        """Why a step ran out of time, naming the brokers it was waiting on. Waiting on a
        broker does not make it the culprit (a leader waits for its followers, a broker for
        the controller): each is asked directly, with what is left of ``timeout``, and only
        one that does not answer that either becomes a suspect."""
        head = f"{self.conn.describe()}: {what}: no Kafka answer within {_seconds(waited)}"
        if not stuck:
            return head
        checked = await self.ask_brokers(stuck, max(0.0, timeout - waited))
        silent = [s.describe() for s in checked.values() if s is not None]
        if silent:
            return f"{head}: " + "; ".join(silent)
        waiting = ", ".join(self.broker_name(n) for n in stuck)
        if len(checked) < len(stuck):
            return f"{head} (waiting on {waiting})"
        return f"{head} (waiting on {waiting}, which answer{'s' if len(stuck) == 1 else ''} " \
            "otherwise)"

    async def _bounded(self, call: Any, client: Any, what: str, timeout: float | None) -> Any:
        """Await ``call`` (a request made through ``client``) within ``timeout``; running out
        raises :class:`KafkaBrokerTimeout` naming the broker(s) still owing an answer."""
        if timeout is None:
            return await self._guard(call)
        bound = asyncio.timeout(timeout * _WAIT_SHARE)
        try:
            async with bound:
                return await self._guard(call)
        except TimeoutError as exc:
            if not bound.expired():
                raise
            steering = _steering(client)
            stuck = steering.stuck() if steering is not None else []
            reason = await self._blame(stuck, what, timeout * _WAIT_SHARE, timeout)
            raise KafkaBrokerTimeout(reason) from exc

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
        steering = _steering(admin)
        assert steering is not None
        nodes = steering.order(steering.nodes())[:3]
        if not nodes:
            raise KafkaUnreachable(f"{self.conn.describe()}: no broker known to ask {what}")
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
                reason = f"did not answer {what} within {_seconds(attempt)}"
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
                failures.append(f"no answer within {_seconds(step)}")
            # No broker answered: rebuild the clients on the next call (closing them may wait
            # on the hung brokers, so it happens in the background).
            self._drop_clients()
            raise KafkaBrokerTimeout(
                f"{self.conn.describe()}: no Kafka answer to {what} within {_seconds(step)}: "
                + "; ".join(failures)
            )
        raise last

    async def send_to(
        self, node_id: int, request: Any, what: str, timeout: float | None = None,
        *, group: ConnectionGroup = ConnectionGroup.DEFAULT,
    ) -> Any:
        """Send ``request`` to one broker (a coordinator, a partition leader) within
        ``timeout``. A suspect broker is not asked while another is healthy; one that does
        not answer becomes a suspect. Both raise :class:`KafkaBrokerTimeout` naming it."""
        admin = await self.admin(timeout=timeout)
        steering = _steering(admin)
        assert steering is not None
        skipped = steering.skipped(node_id)
        if skipped is not None:
            raise KafkaBrokerTimeout(f"{skipped.describe()} (not asked {what})")
        seconds = self.conn.request_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(seconds):
                response = await admin._client.send(node_id, request, group=group)
        except (TimeoutError, RequestTimedOutError) as exc:
            address = self._address(node_id, steering)
            reason = f"did not answer {what} within {_seconds(seconds)}"
            if address is None:
                raise KafkaBrokerTimeout(f"broker {node_id} {reason}") from exc
            raise KafkaBrokerTimeout(self._suspect(address, node_id, reason).describe()) from exc
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
            if problem is None:
                self.health.answered(address)
                found[node_id] = None
            else:
                found[node_id] = self._suspect(address, node_id, problem)
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
            raise KafkaUnreachable(f"{self.conn.describe()}: no broker known")
        return int(node)

    async def metadata(
        self, topics: Sequence[str] | None = None, timeout: float | None = None
    ) -> ClusterMetadata:
        """Brokers, controller and topic/partition states (all topics when ``topics`` is
        None). Never creates a topic; a missing one comes back with error code 3."""
        request = _MetadataRequestNoAutoCreate(list(topics) if topics is not None else None)
        response = await self._guard(self._send_any(request, "Metadata", timeout))
        snapshot = _parse_metadata(response)
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
            self._send_any(DescribeConfigsRequest(resources, False), "DescribeConfigs", timeout)
        )
        out: dict[str, dict[str, str]] = {}
        for resource in response.resources:
            error_code, _message, _rtype, name, entries = resource[:5]
            if error_code:
                continue
            out[name] = {entry[0]: entry[1] for entry in entries if entry[1] is not None}
        return out

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        consumer = await self.offsets_consumer(timeout)
        return await self._bounded(
            consumer.end_offsets(list(partitions)), consumer, "ListOffsets", timeout
        )

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        consumer = await self.offsets_consumer(timeout)
        return await self._bounded(
            consumer.beginning_offsets(list(partitions)), consumer, "ListOffsets", timeout
        )

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, Any]:
        consumer = await self.offsets_consumer(timeout)
        return await self._bounded(
            consumer.offsets_for_times(dict(timestamps)), consumer, "ListOffsets", timeout
        )

    async def committed_offsets(
        self, group: str, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """A group's committed offsets (partitions without a commit are absent)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        admin = await self.admin(timeout)
        for attempt in range(4):
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                raw = await self._bounded(
                    admin.list_consumer_group_offsets(group), admin, "OffsetFetch", left
                )
                break
            except KafkaError as exc:
                # The coordinator is being elected or __consumer_offsets is still loading.
                if not exc.retriable or attempt == 3:
                    raise
                await asyncio.sleep(0.25 * (attempt + 1))
        return {tp: meta.offset for tp, meta in raw.items() if meta.offset >= 0}

    async def list_groups(self, timeout: float | None = None) -> list[str]:
        """Every consumer group on every live broker. A broker that does not answer makes
        the list incomplete: that raises :class:`KafkaBrokerTimeout` naming it."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        snapshot = await self.metadata([], timeout=None if timeout is None else timeout / 2)
        groups: set[str] = set()
        silent: list[str] = []

        async def one(node_id: int) -> None:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                response = await self.send_to(node_id, ListGroupsRequest(), "ListGroups", left)
            except KafkaBrokerTimeout as exc:
                silent.append(str(exc))
                return
            if response.error_code:
                raise for_code(response.error_code)("listing consumer groups failed")
            groups.update(group[0] for group in response.groups)

        await self._guard(asyncio.gather(*(one(n) for n in snapshot.brokers)))
        if silent:
            raise KafkaBrokerTimeout(
                f"{self.conn.describe()}: cannot list every consumer group: " + "; ".join(silent)
            )
        return sorted(groups)

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
        """Create a topic; False if it already existed. Raises the broker's error otherwise
        (``create_topics`` reports errors in the response instead of raising)."""
        admin = await self.admin(timeout)
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
        response = await self._bounded(admin.create_topics([topic]), admin, "CreateTopics", timeout)
        for result in response.topic_errors:
            error_code, message = result[1], result[2] if len(result) > 2 else ""
            if error_code == TopicAlreadyExistsError.errno:
                return False
            if error_code:
                raise for_code(error_code)(f"creating topic {name}: {message}")
        return True

    async def add_partitions(
        self, name: str, total: int, assignments: Sequence[Sequence[int]],
        timeout: float | None = None,
    ) -> None:
        """Grow a topic to ``total`` partitions placed on ``assignments`` (one replica list
        per new partition, preferred leader first)."""
        admin = await self.admin(timeout)
        request = {name: NewPartitions(total, [list(a) for a in assignments])}
        response = await self._bounded(
            admin.create_partitions(request), admin, "CreatePartitions", timeout
        )
        _raise_topic_errors(response, f"adding partitions to {name}")

    async def refresh_leaders(
        self, client: Any, topic: str, leaders: Mapping[int, int], timeout: float
    ) -> None:
        """Bring ``client``'s view of ``topic``'s leaders up to date when it differs from
        ``leaders`` (fresh metadata): a client still sending to a fenced, hung leader would
        otherwise wait for its next periodic refresh."""
        inner = _inner_client(client)
        seen = {
            p: inner.cluster.leader_for_partition(TopicPartition(topic, p)) for p in leaders
        }
        if all(seen[p] == leader for p, leader in leaders.items()):
            return
        with contextlib.suppress(TimeoutError, KafkaError):
            async with asyncio.timeout(timeout):
                if topic in inner._topics:
                    await inner.force_metadata_update()
                else:
                    await inner.add_topic(topic)  # a client's first look: the same refresh


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


async def close_quietly(client: Any, timeout: float = 10.0) -> None:
    """Stop an aiokafka client within ``timeout``, whatever it raises.

    aiokafka's consumer can raise a CancelledError of its own while stopping (a fetch task
    cancelled during its back-off after a failed fetch, frequent while a broker is avoided):
    that one is swallowed; a cancellation of the caller itself is not.
    """
    closer = getattr(client, "stop", None) or client.close
    task = asyncio.current_task()
    try:
        async with asyncio.timeout(timeout):
            await closer()
    except asyncio.CancelledError:
        if task is None or task.cancelling():
            raise
    except Exception:  # closing is best effort: the client is discarded anyway
        pass


_close = close_quietly


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
