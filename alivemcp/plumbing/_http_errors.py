"""The probe HTTP client's failures (re-exported by :mod:`alivemcp.plumbing.http`).

Every class but :class:`ClientConfigError` blames the target or the network path to it;
:class:`ClientConfigError` is the prober's own problem (a client certificate that cannot be
loaded, a malformed proxy URL) and is raised before anything is sent.
"""

from __future__ import annotations


class HttpError(Exception):
    """Base of every failure of a request below the application layer."""


class DnsError(HttpError):
    """The host name did not resolve (or its lookup passed its deadline)."""


class ConnectError(HttpError):
    """The TCP connection could not be established."""


class ProxyError(ConnectError):
    """The proxy could not be reached, or refused to open a tunnel to the target."""


class TlsError(HttpError):
    """The TLS handshake failed; ``certificate`` is True when verification rejected it."""

    def __init__(self, message: str, *, certificate: bool = False) -> None:
        super().__init__(message)
        self.certificate = certificate


class ConnectionClosed(HttpError):
    """The server closed the connection before the response was complete."""


class ProtocolError(HttpError):
    """The server's bytes are not valid HTTP/1.x."""


class InvalidRequest(ProtocolError):
    """The request cannot be written as given (a host that cannot be IDNA-encoded, a header
    value outside latin-1, a URL that is not http(s)); raised before any byte is sent."""


class RequestTimeout(HttpError):
    """The request's deadline passed (connect, headers or body)."""

    def __init__(self) -> None:
        super().__init__("no complete response before the deadline")


class BodyTooLarge(HttpError):
    """A response body passed the configured byte cap."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"response body larger than {limit} bytes")
        self.limit = limit


class ClientConfigError(HttpError):
    """The client's own settings are unusable (a CA, certificate or key file that cannot be
    loaded, a proxy URL that is not ``http://host:port``): the prober cannot decide."""
