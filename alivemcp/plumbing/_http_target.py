"""Request targets: a URL parsed once into what a request needs, and header checks.

A :class:`Target` holds the host's IDNA (A-label) form (Host header, SNI, DNS and proxy
decisions), the port, the path with a non-ASCII path or query percent-encoded, the request
line's tail written ahead, and where to connect when no lookup is needed (IP literal,
localhost). Sessions cache them across runs: a probe hits the same URL several times per run,
and again every run.

The request line's tail includes the ``User-Agent`` line, so a request pays nothing to name
the prober; a Target is therefore built for one User-Agent, and its cache belongs to one
client (:class:`~alivemcp.plumbing.http.HttpClients`, which has one User-Agent): two clients
of different locations in one process never share Targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from alivemcp.plumbing._http_agent import user_agent
from alivemcp.plumbing._http_dns import Address, idna_host, static_addresses, with_port
from alivemcp.plumbing._http_errors import InvalidRequest

__all__ = [
    "MAX_CACHED_TARGETS",
    "USER_AGENT",
    "Target",
    "authority",
    "check_header",
    "check_http_url",
    "host_problem",
    "unencodable",
]

#: The default ``User-Agent`` (no location): ``alivemcp/<version>``.
USER_AGENT = user_agent()
#: Parsed URLs kept across probe runs (one per configured endpoint, plus legacy message URLs).
MAX_CACHED_TARGETS = 100_000


class Target:
    """A parsed request URL (cached across sessions: a probe hits the same URL several times
    per run, and again every run), for requests sending ``user_agent`` (checked by the
    caller: it is written as it is)."""

    __slots__ = (
        "absolute",
        "addresses",
        "host",
        "host_header",
        "https",
        "key",
        "path",
        "port",
        "request_tail",
    )

    def __init__(self, url: str, user_agent: str = USER_AGENT) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequest(f"not an http(s) URL: {url[:200]}")
        self.https = parts.scheme == "https"
        try:
            #: The ASCII (IDNA A-label) form: Host header, SNI, DNS and proxy decisions.
            self.host = idna_host(parts.hostname)
        except ValueError as exc:
            raise InvalidRequest(
                f"host {parts.hostname[:100]!r} cannot be IDNA-encoded: {exc}"
            ) from None
        try:
            port = parts.port
        except ValueError:
            raise InvalidRequest(f"bad port in {url[:200]}") from None
        self.port = port or (443 if self.https else 80)
        path, query = parts.path or "/", parts.query
        if not path.isascii():
            path = quote(path, safe="/%:@!$&'()*+,;=")
        if not query.isascii():
            query = quote(query, safe="/%:@!$&'()*+,;=?")
        self.path = path + (f"?{query}" if query else "")
        default = (443 if self.https else 80) == self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default else f"{host}:{self.port}"
        #: The request target in absolute form, for plain http through a proxy.
        self.absolute = f"http://{self.host_header}{self.path}"
        #: A direct request's head after its method, up to the caller's headers.
        self.request_tail = (
            f" {self.path} HTTP/1.1\r\nHost: {self.host_header}\r\nUser-Agent: {user_agent}\r\n"
        )
        self.key = (self.https, self.host, self.port)
        static = static_addresses(self.host)
        #: Where to connect when no lookup is needed (IP literal, localhost), else None.
        self.addresses: list[Address] | None = (
            None if static is None else with_port(static, self.port)
        )


def check_header(name: str, value: str) -> None:
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
        raise InvalidRequest(f"header {name[:40]!r} contains a line break or colon")


def unencodable(headers: Mapping[str, str] | None) -> InvalidRequest:
    """Name the header that is not latin-1 (never its value: it may be a secret)."""
    for name, value in (headers or {}).items():
        try:
            f"{name}: {value}".encode("latin-1")
        except UnicodeEncodeError:
            return InvalidRequest(
                f"header {name[:40]!r} has characters that HTTP/1.1 headers "
                "cannot carry (not latin-1)"
            )
    return InvalidRequest("the request line has characters that HTTP/1.1 cannot carry")


def authority(target: Target) -> str:
    """``host:port`` for CONNECT (always with the port, brackets around IPv6)."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{host}:{target.port}"


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be put on the wire (None: it can). A name that is not ASCII must
    have an IDNA (punycode) form, as DNS and the Host header need one."""
    try:
        idna_host(host)
    except (ValueError, UnicodeError):
        return f"host {host[:100]!r} has no IDNA (punycode) form"
    return None


def check_http_url(value: str) -> str:
    """``value`` if this client can request it: an http:// or https:// URL with a host it can
    put on the wire, a valid port, and no spaces or control characters; else ValueError
    saying which (config validators use it, so the message is the field's error)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from None
    problem = host_problem(parts.hostname)
    if problem is not None:
        raise ValueError(problem)
    if any(c in value for c in " \t\r\n\x00"):
        raise ValueError("must not contain spaces or control characters")
    return value
