"""AWS plumbing: one session per identity, one client per (identity, service, region).

Client creation in botocore reads service models from disk and is slow, so clients are
created once and held for the process lifetime. Probes describe *which* AWS identity they use
with :class:`AwsSettings` and borrow clients with :meth:`AwsClients.client`.

Identity: the default credential chain (environment, IRSA web identity via
``AWS_WEB_IDENTITY_TOKEN_FILE``/``AWS_ROLE_ARN``, instance profile), a named ``profile``, static
keys, and optionally ``role_arn`` assumed on top (with ``external_id``), refreshed before expiry.

Retries: botocore's own are off; the clients handed out retry in
:mod:`alivemcp.plumbing.aws_retries`, where ``max_attempts`` counts every attempt and retries
stop by the caller's deadline (:func:`aws_time_limit`, :func:`aws_deadline`), so a fast error
is reported as itself rather than as a timeout.

Errors: this module is the AWS error boundary. A client's calls (paginator pages and body
reads included) raise :class:`~alivemcp.errors.ProbeError` only, classified by
:func:`aws_error_kind` and naming the API operation, the target (bucket, stream, queue, or
service and region) and the code, message and attempts; a caller writes::

    s3 = await plumbing.aws.client("s3", params.aws)
    try:
        await s3.head_object(Bucket=bucket, Key=key)
    except ProbeError as err:
        findings.add_error(err)   # err.kind, err.target, err.operation, err.detail
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.credentials import (
    AioAssumeRoleCredentialFetcher,
    AioDeferredRefreshableCredentials,
)
from aiobotocore.session import AioSession
from aiohttp import ClientConnectorDNSError
from aiohttp.abc import AbstractResolver, ResolveResult
from botocore.exceptions import (
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    CredentialRetrievalError,
    EndpointConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    SSLError,
    ValidationError,
)
from botocore.parsers import ResponseParserError
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.aws_retries import (
    AWS_ERRORS,
    THROTTLING_CODES,
    RetryingClient,
    attempts_of,
    aws_deadline,
    aws_time_limit,
)

__all__ = [
    "AwsClient",
    "AwsClients",
    "AwsSettings",
    "aws_check_deadline",
    "aws_deadline",
    "aws_error_kind",
    "aws_error_summary",
    "aws_probe_error",
    "aws_settings_field",
    "aws_target",
    "aws_time_limit",
    "within_aws_check_deadline",
]

#: Most attempts one call may make (the first included).
MAX_ATTEMPTS_LIMIT = 10


class AwsSettings(BaseModel):
    """Which AWS identity, region and endpoint a probe talks to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str | None = Field(None, description="Region; default from the environment.")
    profile: str | None = Field(None, description="Named profile from the shared config.")
    access_key_id: SecretStr | None = Field(None, description="Static key (prefer roles).")
    secret_access_key: SecretStr | None = Field(None, description="Secret of access_key_id.")
    session_token: SecretStr | None = Field(None, description="Session token for static keys.")
    role_arn: str | None = Field(None, description="Role to assume on top of the base identity.")
    external_id: SecretStr | None = Field(None, description="ExternalId for role_arn.")
    role_session_name: str = Field("alivemcp", description="Session name for role_arn.")
    endpoint_url: str | None = Field(
        None, description="Endpoint override for every service (local stacks, VPC endpoints)."
    )
    endpoint_urls: dict[str, str] = Field(
        default_factory=dict, description="Per-service endpoint overrides, e.g. {s3: ...}."
    )
    resolve_all_to: str | None = Field(
        None,
        description="Resolve every host name to this address (local stacks: access-point and "
        "Object Lambda host names are <name>-<account>.<endpoint host>).",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=MAX_ATTEMPTS_LIMIT,
        description="Attempts per call in all, the first included (1: never retry). Only "
        "5xx, throttling and connection failures are retried, with jittered backoff (longer "
        "after throttling) that stops by the probe's time limit; when time runs out after an "
        "error, that error is reported, not a timeout.",
    )
    connect_timeout: float = Field(
        5.0, gt=0, description="Seconds to connect, per attempt (a probe's limit can cut it)."
    )
    read_timeout: float = Field(
        10.0,
        gt=0,
        description="Seconds to wait for a response, per attempt (a probe's limit can cut it).",
    )
    max_pool_connections: int = Field(50, ge=1, description="Connections per client.")

    def describe_identity(self) -> str:
        """Which identity these settings act as, for a reason (never a secret)."""
        if self.role_arn:
            return f"role {self.role_arn}"
        if self.profile:
            return f"profile {self.profile}"
        if self.access_key_id is not None:
            return "the configured static-key identity"
        return "the prober's default identity"

    def identity_key(self) -> tuple[Any, ...]:
        return (
            self.profile,
            _secret(self.access_key_id),
            _secret(self.secret_access_key),
            _secret(self.session_token),
            self.role_arn,
            _secret(self.external_id),
            self.role_session_name,
        )


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


class _FixedResolver(AbstractResolver):
    """Resolves every name to one address (local stacks only)."""

    def __init__(self, address: str) -> None:
        self._address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {
                "hostname": host,
                "host": self._address,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


class AwsClients:
    """Sessions and clients shared by every AWS probe in the process."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[Any, ...], AioSession] = {}
        self._clients: dict[tuple[Any, ...], Any] = {}
        self._locks: dict[tuple[Any, ...], asyncio.Lock] = {}
        self._stack = contextlib.AsyncExitStack()

    def session(self, settings: AwsSettings) -> AioSession:
        key = settings.identity_key()
        session = self._sessions.get(key)
        if session is None:
            session = AioSession(profile=settings.profile)
            if settings.access_key_id is not None and settings.secret_access_key is not None:
                session.set_credentials(
                    settings.access_key_id.get_secret_value(),
                    settings.secret_access_key.get_secret_value(),
                    _secret(settings.session_token),
                )
            if settings.role_arn:
                # The assumed role needs its own session: if it replaced the base session's
                # credentials, the STS call would wait on the very refresh it is serving.
                base = session
                session = AioSession(profile=settings.profile)
                session._credentials = _assumed_role_credentials(base, settings)
            self._sessions[key] = session
        return session

    async def client(
        self, service: str, settings: AwsSettings, region: str | None = None
    ) -> AwsClient:
        """The shared client for ``service`` in ``region`` (default: the settings' region).
        Its calls raise ``ProbeError``; so does this when the client cannot be made (a
        profile that does not exist)."""
        region = region or settings.region
        endpoint = settings.endpoint_urls.get(service, settings.endpoint_url)
        key = (
            settings.identity_key(),
            service,
            region,
            endpoint,
            settings.resolve_all_to,
            settings.max_attempts,
            settings.connect_timeout,
            settings.read_timeout,
            settings.max_pool_connections,
        )
        client: AwsClient | None = self._clients.get(key)
        if client is not None:
            return client
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            client = self._clients.get(key)
            if client is None:
                try:
                    client = await self._create(service, settings, region, endpoint)
                except AWS_ERRORS as exc:
                    raise aws_probe_error(
                        exc,
                        operation=f"create {service} client",
                        target=aws_target(service, region, {}),
                    ) from exc
                self._clients[key] = client
        return client

    async def _create(
        self, service: str, settings: AwsSettings, region: str | None, endpoint: str | None
    ) -> AwsClient:
        connector_args: dict[str, Any] = {}
        if settings.resolve_all_to:
            connector_args["resolver"] = _FixedResolver(settings.resolve_all_to)
        # botocore retries off: its loop cannot see a caller's deadline (RetryingClient can).
        # Standard mode, not adaptive: a client-side rate limiter would add unseen waits to
        # the latencies the probes measure.
        config = AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            max_pool_connections=settings.max_pool_connections,
            connector_args=connector_args or None,
            s3={"addressing_style": "path"} if endpoint and service == "s3" else None,
        )
        creator = self.session(settings).create_client(
            service, region_name=region, endpoint_url=endpoint, config=config
        )
        client = await self._stack.enter_async_context(creator)
        return AwsClient(client, settings.max_attempts, service, region)

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._clients.clear()
        self._sessions.clear()


def _assumed_role_credentials(
    base: AioSession, settings: AwsSettings
) -> AioDeferredRefreshableCredentials:
    extra: dict[str, Any] = {"RoleSessionName": settings.role_session_name}
    if settings.external_id is not None:
        extra["ExternalId"] = settings.external_id.get_secret_value()

    def client_creator(service: str, **kwargs: Any) -> Any:
        endpoint = settings.endpoint_urls.get(service, settings.endpoint_url)
        return base.create_client(
            service, region_name=settings.region, endpoint_url=endpoint, **kwargs
        )

    async def source_credentials() -> Any:
        return await base.get_credentials()

    class _Source:
        async def get_frozen_credentials(self) -> Any:
            creds = await source_credentials()
            if creds is None:
                raise NoCredentialsError()
            return await creds.get_frozen_credentials()

    fetcher = AioAssumeRoleCredentialFetcher(
        client_creator=client_creator,
        source_credentials=_Source(),
        role_arn=settings.role_arn,
        extra_args=extra,
    )
    return AioDeferredRefreshableCredentials(
        method="assume-role", refresh_using=fetcher.fetch_credentials
    )


# --- the error boundary ----------------------------------------------------------------------
#
# botocore's exceptions are translated here, once, into ProbeError; nothing outside plumbing
# sees them. The code sets below decide the kind; the retry logic shares the throttling set.

_CREDENTIAL_CODES = frozenset(
    {
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidToken",
        "AuthFailure",
    }
)
_PERMISSION_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "403", "Forbidden", "UnauthorizedOperation"}
)
_NOT_FOUND_CODES = frozenset(
    {
        "404",
        "NoSuchKey",
        "NoSuchBucket",
        "NotFound",
        "ResourceNotFoundException",
        # SQS says a queue is gone with a 400 and one of these.
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "NonExistentQueue",
    }
)
_CREDENTIAL_ERRORS = (
    NoCredentialsError,
    PartialCredentialsError,
    NoRegionError,
    ProfileNotFound,
    CredentialRetrievalError,
)


def aws_error_kind(exc: BaseException) -> ErrorKind:
    """What kind of failure a botocore exception is (a ``ProbeError`` keeps its own kind).

    The prober's own credentials (missing, invalid, expired) are ``AUTH``; a 403 is
    ``PERMISSION``; 404s and "no such" codes ``NOT_FOUND``; throttling ``THROTTLED``; 5xx
    ``UNAVAILABLE``; any other answer ``REJECTED``. Without an answer: a refused or dropped
    connection is ``CONNECT`` (``DNS`` when the name did not resolve), a per-attempt timeout
    ``TIMEOUT``, a failed handshake ``TLS``, an unparsable answer ``PROTOCOL``.
    """
    if isinstance(exc, ProbeError):
        return exc.kind
    if isinstance(exc, _CREDENTIAL_ERRORS):
        return ErrorKind.AUTH
    if isinstance(exc, ClientError):
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _CREDENTIAL_CODES:
            return ErrorKind.AUTH
        if code in _PERMISSION_CODES or status == 403:
            return ErrorKind.PERMISSION
        if code in _NOT_FOUND_CODES or status == 404:
            return ErrorKind.NOT_FOUND
        if code in THROTTLING_CODES or status == 429:
            return ErrorKind.THROTTLED
        if isinstance(status, int) and status >= 500:
            return ErrorKind.UNAVAILABLE
        return ErrorKind.REJECTED
    if isinstance(exc, SSLError):
        return ErrorKind.TLS
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return ErrorKind.TIMEOUT
    if isinstance(exc, EndpointConnectionError) and isinstance(
        exc.kwargs.get("error"), ClientConnectorDNSError
    ):
        return ErrorKind.DNS
    if isinstance(exc, ConnectionError | HTTPClientError):
        return ErrorKind.CONNECT
    if isinstance(exc, ResponseParserError | IncompleteReadError):
        return ErrorKind.PROTOCOL
    if isinstance(exc, ParamValidationError | ValidationError):
        return ErrorKind.REJECTED  # the request as configured cannot be sent
    return ErrorKind.OTHER


def aws_error_summary(exc: BaseException) -> str:
    """One line naming the operation, error code and message, never the request's
    credentials, and the attempts made when the call was retried (e.g. "(3 attempts in
    1.2s)")."""
    if isinstance(exc, ProbeError):
        return f"{exc.operation}: {exc.detail}"
    if isinstance(exc, ClientError):
        return f"{exc.operation_name}: {_detail(exc)}"
    return _detail(exc)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _detail(exc: BaseException) -> str:
    """The error's code and message (and attempts): what ``ProbeError.detail`` holds."""
    if isinstance(exc, ClientError):
        err: Mapping[str, Any] = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.get("Code") or status
        line = f"{code} {err.get('Message') or ''}".strip()
        if status is not None and str(status) != str(code):
            line += f" (HTTP {status})"
    else:
        line = f"{type(exc).__name__}: {exc}"
    attempts = attempts_of(exc)
    return f"{line} ({attempts.describe()})" if attempts is not None else line


def aws_probe_error(exc: BaseException, *, operation: str, target: str) -> ProbeError:
    """The ``ProbeError`` for a botocore exception raised by ``operation`` on ``target``."""
    code = (_code(exc) or None) if isinstance(exc, ClientError) else None
    return ProbeError(
        aws_error_kind(exc), target=target, operation=operation, detail=_detail(exc), code=code
    )


def aws_target(service: str, region: str | None, params: Mapping[str, Any]) -> str:
    """What a call is about, from its parameters: ``s3://bucket/key``, ``delivery stream
    NAME``, ``queue NAME``...; else the service and region."""
    bucket = params.get("Bucket")
    if isinstance(bucket, str):
        key = params.get("Key") or params.get("Prefix")
        if bucket.startswith("arn:"):  # access points: the ARN stands for the bucket
            return f"{bucket} key {key}" if key else bucket
        return f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    for param, noun in _NAMED_TARGETS:
        value = params.get(param)
        if isinstance(value, str) and value:
            if param == "QueueUrl":
                value = value.rstrip("/").rsplit("/", 1)[-1]
            return f"{noun} {value}"
    return f"{service} in {region}" if region else service


_NAMED_TARGETS = (
    ("DeliveryStreamName", "delivery stream"),
    ("StreamName", "stream"),
    ("StreamARN", "stream"),
    ("QueueUrl", "queue"),
    ("ClusterArn", "cluster"),
    ("TopicArn", "topic"),
    ("FunctionName", "function"),
    ("ApplicationName", "application"),
)


class AwsClient(RetryingClient):
    """A shared AWS service client: the aiobotocore client's methods (snake_case names, the
    same parameters and responses), retried, and raising only
    :class:`~alivemcp.errors.ProbeError`, whose ``operation`` is the API name
    (``PutObject``), ``target`` what :func:`aws_target` names, and ``detail`` the code,
    message and attempts. A response's streaming ``Body`` raises ``ProbeError`` too.
    ``aws_time_limit`` still raises ``TimeoutError`` when nothing at all came back in time."""

    def __init__(self, client: Any, max_attempts: int, service: str, region: str | None) -> None:
        super().__init__(client, max_attempts)
        self.service = service
        self.region = region

    def _final_error(
        self, operation: str, params: Mapping[str, Any], exc: BaseException
    ) -> BaseException:
        return aws_probe_error(
            exc, operation=operation, target=aws_target(self.service, self.region, params)
        )

    def _response(self, operation: str, params: Mapping[str, Any], response: Any) -> Any:
        if isinstance(response, dict) and hasattr(response.get("Body"), "read"):
            target = aws_target(self.service, self.region, params)
            response["Body"] = _Body(response["Body"], operation, target)
        return response


class _Body:
    """A response body whose reads raise ``ProbeError`` (a connection dropped mid-body)."""

    def __init__(self, body: Any, operation: str, target: str) -> None:
        self._body = body
        self._operation = operation
        self._target = target

    async def read(self, amt: int | None = None) -> bytes:
        try:
            return bytes(await self._body.read(amt))
        except (*AWS_ERRORS, aiohttp.ClientError) as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> ProbeError:
        if isinstance(exc, aiohttp.ClientError):  # below botocore: the connection broke
            return ProbeError(
                ErrorKind.CONNECT,
                target=self._target,
                operation=self._operation,
                detail=f"reading the body: {type(exc).__name__}: {exc}",
            )
        return aws_probe_error(exc, operation=self._operation, target=self._target)

    def close(self) -> None:
        self._body.close()

    async def __aenter__(self) -> _Body:
        await self._body.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._body.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._body, name)


def aws_settings_field(
    description: str = "AWS identity, region and endpoint (see AwsSettings).",
) -> Any:
    """The ``aws:`` params field every AWS probe declares: ``aws: AwsSettings =
    aws_settings_field()``."""
    return Field(default_factory=AwsSettings, description=description)


def aws_check_deadline(timeout: float) -> contextlib.AbstractContextManager[None]:
    """The soft deadline for a whole probe run under a check ``timeout``: a little earlier
    than the engine's own cut, so a retried error is reported as itself rather than as the
    check's timeout."""
    return aws_deadline(max(0.0, timeout - min(1.0, 0.1 * timeout)))


class _Timed(Protocol):
    @property
    def timeout(self) -> float: ...


class _InCheck(Protocol):
    @property
    def context(self) -> _Timed: ...


_CheckT = TypeVar("_CheckT", bound=_InCheck)
_ResultT = TypeVar("_ResultT")


def within_aws_check_deadline(
    run: Callable[[_CheckT], Awaitable[_ResultT]],
) -> Callable[[_CheckT], Coroutine[Any, Any, _ResultT]]:
    """Decorates a probe's ``probe()``: the whole run is under :func:`aws_check_deadline` of
    the check's timeout (``self.context.timeout``)."""

    @functools.wraps(run)
    async def probe(self: _CheckT) -> _ResultT:
        with aws_check_deadline(self.context.timeout):
            return await run(self)

    return probe
