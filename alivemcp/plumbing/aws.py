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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Mapping
from typing import Any, Literal

from aiobotocore.config import AioConfig
from aiobotocore.credentials import (
    AioAssumeRoleCredentialFetcher,
    AioDeferredRefreshableCredentials,
)
from aiobotocore.session import AioSession
from aiohttp.abc import AbstractResolver, ResolveResult
from botocore.exceptions import (
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from alivemcp.plumbing.aws_retries import (
    RetryingClient,
    attempts_of,
    aws_deadline,
    aws_time_limit,
)

__all__ = [
    "AwsClients",
    "AwsErrorKind",
    "AwsSettings",
    "aws_check_deadline",
    "aws_deadline",
    "aws_error_kind",
    "aws_error_summary",
    "aws_time_limit",
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

    async def client(self, service: str, settings: AwsSettings, region: str | None = None) -> Any:
        """The shared client for ``service`` in ``region`` (default: the settings' region)."""
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
        client = self._clients.get(key)
        if client is not None:
            return client
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            client = self._clients.get(key)
            if client is None:
                client = await self._create(service, settings, region, endpoint)
                self._clients[key] = client
        return client

    async def _create(
        self, service: str, settings: AwsSettings, region: str | None, endpoint: str | None
    ) -> Any:
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
        return RetryingClient(client, settings.max_attempts)

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


AwsErrorKind = Literal[
    "credentials", "permission", "not_found", "throttled", "server", "client", "other"
]

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
    {"404", "NoSuchKey", "NoSuchBucket", "NotFound", "ResourceNotFoundException"}
)
_THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "SlowDown",
        "TooManyRequestsException",
        "RequestLimitExceeded",
    }
)


def aws_error_kind(exc: BaseException) -> AwsErrorKind:
    """Classify an AWS exception so probes can tell "my own credentials are broken"
    (``unknown``) from "the target refused me" and "the target is down"."""
    if isinstance(
        exc, NoCredentialsError | PartialCredentialsError | NoRegionError | ProfileNotFound
    ):
        return "credentials"
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _CREDENTIAL_CODES:
            return "credentials"
        if code in _PERMISSION_CODES or status == 403:
            return "permission"
        if code in _NOT_FOUND_CODES or status == 404:
            return "not_found"
        if code in _THROTTLE_CODES or status == 429:
            return "throttled"
        if isinstance(status, int) and status >= 500:
            return "server"
        return "client"
    return "other"


def aws_error_summary(exc: BaseException) -> str:
    """One line naming the error code and message, never the request's credentials, and
    the attempts made when the call was retried (e.g. "(3 attempts in 1.2s)")."""
    if isinstance(exc, ClientError):
        err: Mapping[str, Any] = exc.response.get("Error", {})
        code = err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = err.get("Message") or ""
        op = exc.operation_name
        line = f"{op}: {code} {message}".strip()
    else:
        line = f"{type(exc).__name__}: {exc}"
    attempts = attempts_of(exc)
    return f"{line} ({attempts.describe()})" if attempts is not None else line


def aws_check_deadline(timeout: float) -> contextlib.AbstractContextManager[None]:
    """The soft deadline for a whole probe run under a check ``timeout``: a little earlier
    than the engine's own cut, so a retried error is reported as itself rather than as the
    check's timeout."""
    return aws_deadline(max(0.0, timeout - min(1.0, 0.1 * timeout)))
