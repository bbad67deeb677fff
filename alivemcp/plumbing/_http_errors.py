"""The HTTP plumbing's failures (re-exported by :mod:`alivemcp.plumbing.http`).

Every class is a :class:`~alivemcp.errors.ProbeError` whose ``kind`` is fixed by the class, so
a probe may catch ``ProbeError`` (and hand it to ``Findings.add_error``) or a class of its own
interest (``RequestTimeout``, ``ClientConfigError``) without knowing any client library.

Every class but :class:`ClientConfigError` and :class:`InvalidRequest` blames the target or
the network path to it. :class:`ClientConfigError` is the prober's own problem (a client
certificate that cannot be loaded, a malformed proxy URL) and is raised before anything is
sent. :class:`InvalidRequest` is a URL or header that cannot be written: whose fault that is
depends on where the URL came from (the prober's config, or a server's redirect), so its kind
is ``other`` and a probe that knows better says so.

The message is one sentence that already names the host or proxy concerned (``cannot connect
to host:443: ...``), so ``str()`` is the message alone rather than ``ProbeError``'s
"<operation> on <target>: <detail>". ``target`` is filled (``host[:port]``) once the error
leaves the request that raised it.
"""

from __future__ import annotations

from typing import ClassVar

from alivemcp.errors import ErrorKind, ProbeError

__all__ = [
    "BodyTooLarge",
    "ClientConfigError",
    "ConnectError",
    "ConnectionClosed",
    "DnsError",
    "HttpError",
    "InvalidRequest",
    "PrivateAddressRefused",
    "ProtocolError",
    "ProxyError",
    "RequestTimeout",
    "TlsError",
]


class HttpError(ProbeError):
    """Base of every failure of a request below the application layer."""

    #: The error kind every instance of the class carries.
    KIND: ClassVar[ErrorKind] = ErrorKind.OTHER

    def __init__(self, message: str, *, target: str = "") -> None:
        super().__init__(self.KIND, target=target, operation="HTTP request", detail=message)

    def __str__(self) -> str:
        return self.detail


class DnsError(HttpError):
    """The host name did not resolve (or its lookup passed its deadline)."""

    KIND = ErrorKind.DNS


class ConnectError(HttpError):
    """The TCP connection could not be established."""

    KIND = ErrorKind.CONNECT


class ProxyError(ConnectError):
    """The proxy could not be reached, or refused to open a tunnel to the target."""


class TlsError(HttpError):
    """The TLS handshake failed; ``certificate`` is True when verification rejected it."""

    KIND = ErrorKind.TLS

    def __init__(self, message: str, *, certificate: bool = False) -> None:
        super().__init__(message)
        self.certificate = certificate


class ConnectionClosed(HttpError):
    """The server closed the connection before the response was complete."""

    KIND = ErrorKind.CONNECT


class ProtocolError(HttpError):
    """The server's bytes are not valid HTTP/1.x."""

    KIND = ErrorKind.PROTOCOL


class InvalidRequest(ProtocolError):
    """The request cannot be written as given (a host that cannot be IDNA-encoded, a header
    value outside latin-1, a URL that is not http(s)); raised before any byte is sent."""

    KIND = ErrorKind.OTHER


class RequestTimeout(HttpError):
    """The request's deadline passed (connect, headers or body)."""

    KIND = ErrorKind.TIMEOUT

    def __init__(self) -> None:
        super().__init__("no complete response before the deadline")


class BodyTooLarge(HttpError):
    """A response body passed the configured byte cap."""

    KIND = ErrorKind.PROTOCOL

    def __init__(self, limit: int) -> None:
        super().__init__(f"response body larger than {limit} bytes")
        self.limit = limit


class ClientConfigError(HttpError):
    """The client's own settings are unusable (a CA, certificate or key file that cannot be
    loaded, a proxy URL that is not ``http://host:port``): the prober cannot decide."""


class PrivateAddressRefused(ClientConfigError):
    """A connection the prober's own rule forbids: the target's host is, or resolves to, an
    address that is not public (loopback, link-local, private...) and the session was made
    with ``allow_private_addresses=False``. Raised before a single byte reaches that address.

    A :class:`ClientConfigError` (kind ``other``, so the verdict is ``unknown``): it is the
    prober's policy that stopped the run, not the target that failed, and code that already
    sets the prober's own problems apart (``except ClientConfigError``) does so for this too.
    """

    def __init__(self, message: str, *, address: str, reason: str) -> None:
        super().__init__(message)
        #: The address refused, and the range it is in ("loopback", "link-local"...).
        self.address = address
        self.reason = reason
