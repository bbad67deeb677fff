"""The engine's own error tree: what plumbing raises and probes catch.

Each plumbing area (AWS, Kafka, HTTP) translates its library's exceptions once, at its
boundary, into a :class:`ProbeError` that says what kind of failure it was, which target and
operation it concerned, and a one-line detail safe to show anywhere (never a secret). Probes
then catch ``ProbeError`` alone and never import a client library's exception types::

    try:
        await s3.put_object(Bucket=bucket, Key=key, Body=body)
    except ProbeError as err:
        findings.add_error(err)

:func:`alivemcp.verdict.status_for` maps an :class:`ErrorKind` to a verdict.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorKind", "ProbeError"]


class ErrorKind(StrEnum):
    """What went wrong, in words that decide whom to blame (see ``verdict.status_for``)."""

    CONNECT = "connect"  # TCP refused/reset/unreachable
    DNS = "dns"  # the name does not resolve
    TLS = "tls"  # handshake or certificate
    TIMEOUT = "timeout"  # the target did not answer in time
    AUTH = "auth"  # the prober's own credentials are missing, invalid or expired
    PERMISSION = "permission"  # the prober's identity is not allowed (403/AccessDenied)
    NOT_FOUND = "not_found"  # the target resource does not exist
    THROTTLED = "throttled"  # rate limited (after the plumbing's own retries)
    UNAVAILABLE = "unavailable"  # the service answered 5xx or said it is unavailable
    PROTOCOL = "protocol"  # the target answered garbage or violated the protocol
    REJECTED = "rejected"  # the service refused the request as invalid (any other 4xx)
    OTHER = "other"  # none of the above: the prober cannot tell


class ProbeError(Exception):
    """One failed operation on one target, already classified.

    ``target`` names the thing (a bucket, a stream, a broker, a URL without credentials),
    ``operation`` what was being done (``PutObject``, ``fetch offsets``), ``detail`` the
    service's own words (code, message, attempts), ``code`` the service's error code when it
    gave one. None of them may carry a secret: plumbing builds them from error codes and
    messages, never from requests.
    """

    def __init__(
        self,
        kind: ErrorKind,
        *,
        target: str,
        operation: str,
        detail: str,
        code: str | None = None,
    ) -> None:
        super().__init__(kind, target, operation, detail, code)
        self.kind = kind
        self.target = target
        self.operation = operation
        self.detail = detail
        self.code = code

    def __str__(self) -> str:
        return f"{self.operation} on {self.target}: {self.detail}"

    def __repr__(self) -> str:
        return (
            f"ProbeError({self.kind.value}, target={self.target!r}, "
            f"operation={self.operation!r}, code={self.code!r})"
        )
