"""Reaching one Kafka cluster: its settings as aiokafka options, and asking a server directly.

:class:`ClusterAccess` is the first layer of :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`:
the bootstrap servers (given, or resolved from an MSK cluster ARN), TLS, SASL and MSK IAM
tokens turned into the keyword arguments of any aiokafka client of the cluster, and
:meth:`ClusterAccess._ask`: one server asked on a connection of its own (connect,
authenticate, ApiVersions), its answer classified once for every caller. :class:`Asks` are one
client build's asks of all its bootstrap servers, started together.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.aws import aws_error_summary
from alivemcp.plumbing.kafka_brokers import broker_name, seconds_text
from alivemcp.plumbing.kafka_errors import KafkaPlumbingError, kafka_error
from alivemcp.plumbing.kafka_iam import MskIamTokenProvider
from alivemcp.plumbing.kafka_metadata import BrokerInfo
from alivemcp.plumbing.kafka_settings import KafkaConnection

if TYPE_CHECKING:
    from alivemcp.plumbing.aws import AwsClients

__all__ = ["Asks", "AwsSource", "ClusterAccess", "alive"]


class AwsSource(Protocol):
    """Where the Kafka clients get AWS clients (MSK ARNs, IAM tokens): the plumbing itself,
    named by what is used of it, so this module needs nothing above it."""

    @property
    def aws(self) -> AwsClients: ...


class Asks:
    """One client build's direct asks of its bootstrap servers (connect, authenticate,
    ApiVersions), started together for the whole step and read by whoever needs them: the
    ranking, then a start that ran out of time. They end by their own timeout."""

    def __init__(
        self, started: float, tasks: Mapping[str, asyncio.Future[KafkaPlumbingError | None]]
    ) -> None:
        self.started = started
        self.tasks = dict(tasks)

    def when_done(self, callback: Callable[[Asks], None]) -> None:
        """Call ``callback(self)`` once every ask has ended (their results, errors included,
        are taken then: none is left unread)."""
        ended = asyncio.gather(*self.tasks.values(), return_exceptions=True)
        ended.add_done_callback(lambda _: callback(self))

    def cancel(self) -> None:
        for task in self.tasks.values():
            task.cancel()


def alive(problem: KafkaPlumbingError | None) -> bool:
    """Whether a broker asked directly answered: it did, or it refused the credentials."""
    return problem is None or problem.kind is ErrorKind.AUTH


class ClusterAccess:
    """How to reach one cluster and ask one of its servers directly (the first layer of
    :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`)."""

    def __init__(self, conn: KafkaConnection, plumbing: AwsSource) -> None:
        self.conn = conn
        self._plumbing = plumbing
        self._bootstrap: str | None = None
        self._token_provider: MskIamTokenProvider | None = None
        self._ssl_context: ssl.SSLContext | None = None
        #: Background work: clients closing, bootstrap servers still being judged.
        self._closing: set[asyncio.Future[None]] = set()
        #: Brokers of the last metadata answer, to name brokers by id and address.
        self.brokers: dict[int, BrokerInfo] = {}

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
        return alive(await self._ask(server, timeout))

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

    def _background(self, call: Any) -> None:
        task = asyncio.ensure_future(call)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _node_at(self, address: str) -> int | None:
        return next((b.node_id for b in self.brokers.values() if b.address == address), None)

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
