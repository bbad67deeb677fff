"""The engine's own error tree: what plumbing raises and probes catch.

Each plumbing area (AWS, Kafka, HTTP) translates its library's exceptions once, at its
boundary, into a :class:`ProbeError` that says what kind of failure it was, which target and
operation it concerned, and a one-line detail safe to show anywhere (never a secret). Probes
then catch ``ProbeError`` alone and never import a client library's exception types::

    try:
        await s3.put_object(Bucket=bucket, Key=key, Body=body)
    except ProbeError as err:
        findings.add_error(err)

:func:`alivemcp.verdict.status_for` maps an :class:`ErrorKind` to a verdict, and
:func:`describe_failure` to the probe's sentence for it (one table, :data:`FAILURE_SENTENCES`)::

    findings.add_error(err, reason=describe_failure(err.kind, f"stream {name}", action="describe"))
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

__all__ = ["FAILURE_SENTENCES", "OTHER_FAILURE", "ErrorKind", "ProbeError", "describe_failure"]


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


#: How a probe says that an operation failed, by kind: ``{action}`` is the verb phrase
#: ("describe", "put the canary into") and ``{subject}`` what it acts on, named with what it
#: is ("delivery stream events", "canary queue jobs"). AUTH and PERMISSION put the blame on the
#: prober's own identity (by default their verdict is ``unknown``); a kind not listed falls to
#: :data:`OTHER_FAILURE`. ``Findings.add_error`` follows the sentence with ``": <detail>"``.
FAILURE_SENTENCES: Mapping[ErrorKind, str] = {
    ErrorKind.AUTH: "prober's own credentials failed to {action} {subject}",
    ErrorKind.PERMISSION: "prober is not allowed to {action} {subject}",
    ErrorKind.NOT_FOUND: "{subject} not found",
}
#: The sentence for every kind :data:`FAILURE_SENTENCES` does not list.
OTHER_FAILURE = "cannot {action} {subject}"


def describe_failure(
    kind: ErrorKind,
    subject: str,
    *,
    action: str,
    overrides: Mapping[ErrorKind, str] | None = None,
) -> str:
    """The sentence for a failed ``action`` on ``subject`` that went wrong as ``kind``.

    ``overrides`` holds a probe's own templates for the kinds its domain reads differently
    (a 403 through an access point is policy drift, not the prober's permission), with the
    same ``{action}`` and ``{subject}`` fields; the table serves every other kind.
    """
    if overrides and kind in overrides:
        template = overrides[kind]
    else:
        template = FAILURE_SENTENCES.get(kind, OTHER_FAILURE)
    return template.format(action=action, subject=subject)
