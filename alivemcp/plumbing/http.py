"""HTTP plumbing: the engine's one place for HTTP clients, size caps and timeouts.

Two kinds of user:

* The MCP hot path (tens of thousands of endpoints): :meth:`HttpClients.probe_session` gives a
  :class:`ProbeSession`, a lean HTTP/1.1 client for ONE probe run. Its requests share one
  keep-alive connection (initialize, initialized, tools/list and DELETE ride the same socket;
  a second one opens only when a stream is held open, as in legacy SSE) and everything is
  closed when the run ends, as it must be for a fleet of distinct hosts probed every minute.
  It records DNS, TCP connect and TLS handshake times separately and the server certificate's
  expiry.
* One-off requests whose whole answer is small (an OAuth token endpoint, a health URL):
  :meth:`HttpClients.fetch`, the same client for one request, body read whole under a cap.
* The alerting receivers: :attr:`HttpClients.httpx`, one shared ``httpx.AsyncClient`` (the
  engine's own deliveries; probes never use it).

Failures are :class:`~alivemcp.errors.ProbeError` subclasses (:mod:`._http_errors`): each
class carries its :class:`~alivemcp.errors.ErrorKind` (``dns``, ``connect``, ``tls``,
``timeout``, ``protocol``...) and, once it leaves the request, its ``target`` (``host:port``).
This module is the one place that turns socket, TLS and parsing failures into them.

Why not aiohttp on the hot path: measured on the 2-core benchmark machine
(``benchmarks/mcp_probe.py``), aiohttp spends most of a probe's CPU building request and
response objects (URL objects, multidicts, tracing hooks, writers, per-session set-up) for
what are four tiny JSON exchanges; a session per probe costs ~0.7-0.8 ms of CPU before any MCP
logic, about what blackbox_exporter spends on its single POST. This client writes each request
with one ``transport.write`` of pre-joined bytes and parses only what MCP needs (status line,
headers, Content-Length or chunked bodies, read-until-close), on asyncio's (or uvloop's)
transports.

Nothing a server sends can stall or blow memory: header blocks are capped at
:data:`MAX_HEAD_BYTES`, bodies at the session's ``max_body_bytes`` (checked against chunk sizes
and Content-Length before reading), reading pauses the socket when a buffer grows, and every
request has a deadline covering connect, TLS, headers and the whole body: each wait for bytes
arms a timer at that deadline (a plain loop timer, far cheaper than an ``asyncio.timeout``
context per request) and raises :class:`RequestTimeout` when it passes. Readers yield to the
event loop every :data:`_YIELD_AFTER` bytes they consume from an already-filled buffer, so a
server flooding a stream cannot hold the loop (and every other check) while it is parsed.

Getting to the server:

* DNS (:mod:`._http_dns`): IP literals and ``localhost`` names never touch a resolver; other
  names are looked up in the client's own bounded threads (not the event loop's resolver, whose
  small shared pool one hung DNS server can fill), concurrent lookups of one name share one
  in-flight lookup, answers are cached a few seconds, and each wait has its own deadline inside
  the request's: a hung lookup is a :class:`DnsError` ("timed out") for its target only.
* Connect (:mod:`._http_connect`): non-blocking ``connect()`` calls to the resolved addresses
  (no second lookup, unlike ``loop.sock_connect`` on uvloop), Happy Eyeballs style (RFC 8305):
  address families interleaved, the next attempt started after 250 ms while the previous is
  still pending, the first connection up wins, the others are closed; all within the deadline.
* Proxies (:mod:`._http_proxy`): ``proxy=None`` follows ``HTTP_PROXY``/``HTTPS_PROXY``/
  ``ALL_PROXY``/``NO_PROXY`` as httpx and curl do, ``"direct"`` never uses one, an
  ``http://[user:password@]host:port`` URL is that proxy. Plain-http targets are requested in
  absolute form through it; https targets through a CONNECT tunnel, then TLS with the origin
  (SNI and certificate checks are the origin's). With a proxy, :class:`ConnectionTimings`
  DNS and connect times are those of the proxy (connect includes the CONNECT exchange); TLS is
  the origin's handshake. A refused CONNECT is a :class:`ProxyError` quoting the proxy's answer.
* Private addresses (:mod:`._http_private`): a session made with
  ``allow_private_addresses=False`` (a target from a public list) connects only to public
  addresses. The rule is applied to the resolved addresses just before the connect, so a name
  that resolves inward (DNS rebinding), an IP literal and every redirect followed in the
  session are held to it alike; a refusal is a :class:`PrivateAddressRefused` and nothing is
  sent. Through a proxy the target's name is looked up here too and refused when any of its
  addresses is not public (the proxy's own lookup is its business).
* TLS: contexts are shared per (verify, CA file, client certificate, key) and rebuilt when one
  of those files changes; a client certificate (mTLS) is offered when the server asks. Files
  that cannot be loaded raise :class:`ClientConfigError` (the prober's problem, not the
  target's). Host header and SNI use the host's IDNA (A-label) form.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import socket
import ssl
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from alivemcp.plumbing._http_connect import connect, connect_transport, numeric
from alivemcp.plumbing._http_dns import (
    Address,
    Resolver,
    idna_host,
    static_addresses,
    with_port,
)
from alivemcp.plumbing._http_errors import (
    BodyTooLarge,
    ClientConfigError,
    ConnectError,
    ConnectionClosed,
    DnsError,
    HttpError,
    InvalidRequest,
    PrivateAddressRefused,
    ProtocolError,
    ProxyError,
    RequestTimeout,
    TlsError,
)
from alivemcp.plumbing._http_private import non_public_reason, private_address_message
from alivemcp.plumbing._http_proxy import Proxy, ProxySettings, open_tunnel

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_FETCH_BODY_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "USER_AGENT",
    "BodyTooLarge",
    "ClientConfigError",
    "ConnectError",
    "ConnectionClosed",
    "ConnectionTimings",
    "DnsError",
    "Fetched",
    "Headers",
    "HttpClients",
    "HttpError",
    "HttpResponse",
    "InvalidRequest",
    "PrivateAddressRefused",
    "ProbeSession",
    "ProtocolError",
    "ProxyError",
    "RequestTimeout",
    "Resolver",
    "TlsError",
    "TlsSessions",
    "idna_host",
    "non_public_reason",
    "public_only",
    "read_capped",
]

USER_AGENT = "alivemcp/0.1"
#: Default cap on one response body (a large tools/list is ~1 MB).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Default cap on a body read by :meth:`HttpClients.fetch` (token endpoints, health URLs).
DEFAULT_FETCH_BODY_BYTES = 1024 * 1024
#: Cap on a response's status line plus headers.
MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE = 4096
#: Parsed URLs kept across probe runs (one per configured endpoint, plus legacy message URLs).
_MAX_CACHED_TARGETS = 100_000
#: Stop reading from the socket while this much is buffered and unconsumed.
_PAUSE_ABOVE = 1024 * 1024
#: How early a deadline timer may fire (loop clocks round timers to their resolution).
_TIMER_SLACK = 0.002
#: Body pieces are at most this big, and a reader that consumed this much from the buffer
#: without waiting for the socket yields to the loop before the next piece.
_YIELD_AFTER = 16 * 1024


def _on_deadline(conn: _Connection) -> None:
    """The connection's deadline timer fired: time out the waiting reader, unless the deadline
    moved later meanwhile (then the timer is armed again for it)."""
    conn._timer = None
    waiter = conn._waiter
    if waiter is None or waiter.done():
        return  # nobody is waiting: the next wait arms the timer again
    if conn._loop.time() >= conn.deadline - _TIMER_SLACK:
        waiter.set_exception(RequestTimeout())
    else:
        conn._arm()


#: How long TLS sessions of one server are resumed after a full handshake verified its
#: certificate chain; then the next connection makes a full handshake (and verifies) again.
TLS_RESUME_SECONDS = 300.0
_MAX_TLS_SESSIONS = 100_000
#: The session the connection being opened in this task may resume (see _ResumingSSLObject).
_OFFERED_SESSION: contextvars.ContextVar[ssl.SSLSession | None] = contextvars.ContextVar(
    "alivemcp_offered_tls_session", default=None
)


class _ResumingSSLObject(ssl.SSLObject):
    """An SSLObject that offers the session the opening task put in :data:`_OFFERED_SESSION`.

    asyncio and uvloop build a connection's SSLObject with ``context.wrap_bio()`` and no
    ``session`` argument; this class (the context's ``sslobject_class``) supplies it. The
    loops make the SSLObject in a callback scheduled by the opening task, which carries that
    task's context variables, so only that connection sees the offer.
    """

    @classmethod
    def _create(
        cls,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | None = None,
        session: ssl.SSLSession | None = None,
        context: ssl.SSLContext | None = None,
    ) -> ssl.SSLObject:
        if session is None and not server_side:
            session = _OFFERED_SESSION.get()
        return super()._create(  # type: ignore[misc,no-any-return]
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
            context=context,
        )


class TlsSessions:
    """Resumable TLS sessions of one TLS context, per server (host and port).

    A session is offered again only to the host and port it was made with, through the context
    it was made by (a session never crosses CA or client-certificate settings), and only for
    :data:`TLS_RESUME_SECONDS` after the full handshake that verified the server's certificate
    chain: a server whose certificate changed is verified within that time. Resuming saves the
    certificate parsing, checks and signatures of a full handshake; the key exchange stays
    fresh. The session kept is the one of the last full handshake (servers accept a ticket
    more than once; one that does not gets a full handshake, whose session is kept then).
    """

    __slots__ = ("_entries", "max_age")

    def __init__(self, max_age: float = TLS_RESUME_SECONDS) -> None:
        self.max_age = max_age
        #: (host, port) -> (session, monotonic time of the full handshake it descends from).
        self._entries: dict[tuple[str, int], tuple[ssl.SSLSession, float]] = {}

    def offer(self, host: str, port: int) -> tuple[ssl.SSLSession, float] | None:
        """The session to offer this server, with when it was verified; None: none, or too
        old (then forgotten)."""
        entry = self._entries.get((host, port))
        if entry is not None and time.monotonic() - entry[1] >= self.max_age:
            del self._entries[(host, port)]
            return None
        return entry

    def keep(self, host: str, port: int, session: ssl.SSLSession, verified_at: float) -> None:
        if len(self._entries) >= _MAX_TLS_SESSIONS:
            self._entries.clear()  # a crude bound; refilled by the next handshakes
        self._entries[(host, port)] = (session, verified_at)

    def forget(self, host: str, port: int) -> None:
        self._entries.pop((host, port), None)

    def __len__(self) -> int:
        return len(self._entries)


class ConnectionTimings:
    """What opening one probe's first connection took (seconds), and the certificate expiry.

    Through a proxy, ``dns_seconds`` and ``connect_seconds`` are those of the proxy (connect
    includes the CONNECT exchange for https targets); ``tls_seconds`` is the handshake with the
    target through the tunnel. ``dns_seconds`` stays None when no lookup was needed (an IP
    literal or localhost).
    """

    __slots__ = ("cert_not_after", "connect_seconds", "dns_seconds", "tls_resumed", "tls_seconds")

    def __init__(self) -> None:
        self.dns_seconds: float | None = None
        self.connect_seconds: float | None = None
        self.tls_seconds: float | None = None
        #: True when the TLS handshake resumed an earlier session (no certificate checks).
        self.tls_resumed: bool | None = None
        #: Unix time the server certificate expires (verified TLS only).
        self.cert_not_after: float | None = None


@dataclass(frozen=True, slots=True)
class Fetched:
    """A whole answer from :meth:`HttpClients.fetch`."""

    status: int
    headers: Headers
    body: bytes
    #: From the start of the request to the last byte of the body (connection included).
    seconds: float
    timings: ConnectionTimings


class Headers(dict[str, str]):
    """Response headers, keyed by lower-case name; lookups ignore case."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


#: dict.get without the case folding of Headers.get (keys are stored lower-case).
_dict_get = dict.get


class _Connection(asyncio.Protocol):
    """One socket with a receive buffer the response reader consumes.

    Waits for bytes are bounded by :attr:`deadline` through ONE loop timer per connection,
    armed at the first wait and left alone while later requests push the deadline further
    out (it re-arms itself when it fires early): a timer per wait cost a timer handle, a
    libuv timer and its close for every network read.
    """

    __slots__ = (
        "_loop",
        "_timer",
        "_timer_at",
        "_waiter",
        "buffer",
        "deadline",
        "eof",
        "error",
        "key",
        "paused",
        "tls_sessions",
        "transport",
        "unyielded",
        "verified_at",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.key: tuple[bool, str, int] = (False, "", 0)
        #: Loop time by which the current request must be complete.
        self.deadline = 0.0
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self.eof = False
        self.error: BaseException | None = None
        self.paused = False
        #: Bytes handed out since the reader last waited for the socket (see _YIELD_AFTER).
        self.unyielded = 0
        #: TLS: where this connection's session is kept for resumption, and when the full
        #: handshake it descends from verified the server.
        self.tls_sessions: TlsSessions | None = None
        self.verified_at = 0.0

    # -- protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _PAUSE_ABOVE and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        self._disarm()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self) -> None:
        self._timer_at = self.deadline
        self._timer = self._loop.call_at(self.deadline, _on_deadline, self)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- reading
    async def _more(self) -> bool:
        """Wait for more bytes; False at end of stream."""
        if self.eof:
            if self.error is not None:
                self._raise_tls_error()
            return False
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        if self._timer is None:
            self._arm()
        elif self._timer_at > self.deadline:  # the deadline moved closer: re-arm for it
            self._timer.cancel()
            self._arm()
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        self.unyielded = 0
        return True

    def _raise_tls_error(self) -> None:
        """A TLS alert ended the connection (e.g. TLS 1.3 servers reject a missing client
        certificate after the handshake): a TLS failure, not a plain close."""
        error = self.error
        if isinstance(error, ssl.SSLError) and not isinstance(
            error, ssl.SSLEOFError | ssl.SSLZeroReturnError
        ):
            _, host, port = self.key
            # "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required
            # (_ssl.c:2580)" -> "tlsv13 alert certificate required"
            text = str(error.strerror or error).rpartition("] ")[2].partition(" (_ssl.c")[0]
            raise TlsError(f"TLS error from {host}:{port}: {text or error.reason}")

    async def read_some(self, most: int) -> bytes:
        """Up to ``most`` buffered bytes; b"" at end of stream."""
        while not self.buffer:
            if not await self._more():
                return b""
        if len(self.buffer) <= most:
            out = bytes(self.buffer)
            self.buffer.clear()
        else:
            out = bytes(self.buffer[:most])
            del self.buffer[:most]
        self.unyielded += len(out)
        return out

    async def read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not await self._more():
                raise ConnectionClosed("connection closed mid-response")
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def close(self) -> None:
        if self.transport is not None:
            if self.tls_sessions is not None:
                self._keep_session(self.tls_sessions)
            self.transport.close()
        self.eof = True
        self._disarm()

    def _keep_session(self, sessions: TlsSessions) -> None:
        """Keep the TLS session (with the ticket TLS 1.3 servers send after the handshake)
        for the next connection to this server."""
        self.tls_sessions = None
        assert self.transport is not None
        sslobj = self.transport.get_extra_info("ssl_object")
        session = sslobj.session if sslobj is not None else None
        _, host, port = self.key
        if session is not None and (session.has_ticket or session.id):
            sessions.keep(host, port, session, self.verified_at)


class HttpResponse:
    """A response whose body is read on demand (see :meth:`chunks`, :func:`read_capped`)."""

    __slots__ = (
        "_conn",
        "_crlf",
        "_done",
        "_keep_alive",
        "_mode",
        "_remaining",
        "_total",
        "_trailer",
        "content_length",
        "content_type",
        "headers",
        "limit",
        "status",
    )

    def __init__(
        self,
        conn: _Connection,
        status: int,
        headers: Headers,
        keep_alive: bool,
        has_body: bool,
        limit: int,
    ) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        self.limit = limit
        ctype = _dict_get(headers, "content-type")
        self.content_type = ctype.partition(";")[0].strip().lower() if ctype else ""
        self.content_length: int | None = None
        self._keep_alive = keep_alive
        self._done = False
        #: Chunked framing: the current chunk's data is read, its CRLF is not yet.
        self._crlf = False
        #: Chunked framing: the last chunk was read, trailer lines follow.
        self._trailer = False
        self._total = 0
        if not has_body:
            self._mode, self._remaining = "none", 0
            self._done = True
        elif "chunked" in (_dict_get(headers, "transfer-encoding") or "").lower():
            self._mode, self._remaining = "chunked", 0
        elif (length := _dict_get(headers, "content-length")) is not None:
            try:
                self.content_length = int(length)
            except ValueError:
                raise ProtocolError(f"Content-Length {length[:40]!r} is not a number") from None
            if self.content_length < 0:
                raise ProtocolError("negative Content-Length")
            self._mode, self._remaining = "length", self.content_length
            self._done = self.content_length == 0
        else:
            self._mode, self._remaining = "close", 0
            self._keep_alive = False

    @property
    def deadline(self) -> float:
        return self._conn.deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        """Move the deadline for reading the rest of the body (e.g. a long-lived stream)."""
        self._conn.deadline = value

    @property
    def reusable(self) -> bool:
        """True when the body was read to its end and the connection may carry another."""
        return self._done and self._keep_alive and not self._conn.eof

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body piece by piece (see :meth:`next_piece`)."""
        while data := await self.next_piece():
            yield data

    async def next_piece(self) -> bytes:
        """The next piece of the body (at most :data:`_YIELD_AFTER` bytes), ``b""`` at its
        end; raises :class:`BodyTooLarge` past the cap. When the pieces come from an
        already-filled buffer it yields to the event loop now and then, so that a fast stream
        is never parsed in one long stretch while other checks wait.

        A coroutine rather than an async generator: the event loop tracks every async
        generator in a weak set, which costs more than reading a small body."""
        conn = self._conn
        if conn.unyielded >= _YIELD_AFTER:
            await _pause(conn)
        if self._done:
            return b""
        mode = self._mode
        if mode == "chunked":
            while True:
                data = self._dechunk()
                if data or self._done:
                    return data
                if not await conn._more():
                    raise ConnectionClosed("connection closed mid-response")
        if mode == "length":
            if self._remaining > self.limit:
                raise BodyTooLarge(self.limit)
            data = await conn.read_some(min(self._remaining, _YIELD_AFTER))
            if not data:
                raise ConnectionClosed("connection closed mid-response")
            self._remaining -= len(data)
            self._done = not self._remaining
            return data
        # until the server closes
        data = await conn.read_some(_YIELD_AFTER)
        if not data:
            self._done = True
            return data
        self._total += len(data)
        if self._total > self.limit:
            raise BodyTooLarge(self.limit)
        return data

    def _dechunk(self) -> bytes:
        """Decode the chunked framing already buffered: the data of every complete chunk (and
        of the current chunk so far), at most :data:`_YIELD_AFTER` bytes, without waiting.
        ``b""`` with the body not done means more bytes are needed from the socket."""
        conn = self._conn
        buffer = conn.buffer
        end = len(buffer)
        if not end:
            return b""
        pos = 0
        got = 0
        pieces: list[bytearray] = []
        if not (self._remaining or self._crlf or self._trailer):
            # The common case: whole chunks in the buffer ("1a\r\n<data>\r\n"), and the
            # last one without trailers; anything else goes on in the loop below.
            limit = self.limit
            while (match := _CHUNK_SIZE.match(buffer, pos)) is not None:
                size = int(match[1], 16)
                start = match.end()
                stop = start + size
                if stop + 2 > end or got + size > _YIELD_AFTER:
                    break
                if buffer[stop : stop + 2] != b"\r\n":
                    if size:
                        raise ProtocolError("chunk not followed by CRLF")
                    break  # the last chunk, with trailers
                pos = stop + 2
                if not size:
                    self._done = True
                    break
                self._total += size
                if self._total > limit:
                    raise BodyTooLarge(limit)
                pieces.append(buffer[start:stop])
                got += size
        while got < _YIELD_AFTER and not self._done:
            if self._remaining:  # inside a chunk's data
                take = min(self._remaining, end - pos, _YIELD_AFTER - got)
                if take <= 0:
                    break
                pieces.append(buffer[pos : pos + take])
                pos += take
                got += take
                self._remaining -= take
                if self._remaining:
                    break
                self._crlf = True
            if self._crlf:
                if end - pos < 2:
                    break
                if buffer[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                pos += 2
                self._crlf = False
            limit = MAX_HEAD_BYTES if self._trailer else _MAX_CHUNK_LINE
            what = "trailer" if self._trailer else "chunk size line"
            eol = buffer.find(b"\r\n", pos)
            if eol < 0 or eol - pos > limit:
                if end - pos > limit:
                    raise ProtocolError(f"{what} longer than {limit} bytes")
                break
            line = bytes(buffer[pos:eol])
            pos = eol + 2
            if self._trailer:
                if not line:
                    self._done = True
                    break
                continue
            try:
                size = int(line.partition(b";")[0].strip(), 16)
            except ValueError:
                raise ProtocolError("bad chunk size line") from None
            if size < 0:
                raise ProtocolError("bad chunk size line")
            if size == 0:
                self._trailer = True
                continue
            self._total += size
            if self._total > self.limit:
                raise BodyTooLarge(self.limit)
            self._remaining = size
        if pos:
            del buffer[:pos]
            conn.unyielded += pos
        return b"".join(pieces)


async def _pause(conn: _Connection) -> None:
    """Let the event loop run other tasks (and timers) before the reader goes on."""
    conn.unyielded = 0
    await asyncio.sleep(0)


async def read_capped(response: HttpResponse, limit: int | None = None) -> bytes:
    """Read a whole body, refusing more than ``limit`` bytes (default: the session's cap)."""
    if limit is not None and limit < response.limit:
        response.limit = limit
    if response._done:
        return b""
    if response._mode == "length" and response._remaining <= response.limit:
        # The common case (a JSON body with Content-Length): one read, no generator.
        data = await response._conn.read_exactly(response._remaining)
        response._remaining = 0
        response._done = True
        return data
    pieces = []
    while data := await response.next_piece():
        pieces.append(data)
    return b"".join(pieces)


class _Target:
    """A parsed request URL (cached across sessions: a probe hits the same URL several times
    per run, and again every run)."""

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

    def __init__(self, url: str) -> None:
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
            f" {self.path} HTTP/1.1\r\nHost: {self.host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
        )
        self.key = (self.https, self.host, self.port)
        static = static_addresses(self.host)
        #: Where to connect when no lookup is needed (IP literal, localhost), else None.
        self.addresses: list[Address] | None = (
            None if static is None else with_port(static, self.port)
        )


def _check_header(name: str, value: str) -> None:
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
        raise InvalidRequest(f"header {name[:40]!r} contains a line break or colon")


def _unencodable(headers: Mapping[str, str] | None) -> InvalidRequest:
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


class _RequestContext:
    __slots__ = ("_args", "_response", "_session")

    def __init__(
        self,
        session: ProbeSession,
        args: tuple[str, str, Mapping[str, str] | None, bytes | None, float],
    ) -> None:
        self._session = session
        self._args = args
        self._response: HttpResponse | None = None

    async def __aenter__(self) -> HttpResponse:
        try:
            self._response = await self._session._send(*self._args)
        except HttpError as exc:
            self._blame(exc)
            raise
        return self._response

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        response = self._response
        if response is not None:
            self._session._release(response, ok=exc is None)
        if isinstance(exc, HttpError):
            self._blame(exc)

    def _blame(self, exc: HttpError) -> None:
        """Name the request's target (``host:port``, never the path or credentials) on an
        error raised while serving it, unless an inner request already did."""
        if exc.target:
            return
        target = self._session._targets.get(self._args[1])
        if target is not None:
            exc.target = _authority(target)


class ProbeSession:
    """One probe run's HTTP client: fresh connections, kept alive for the run, then closed."""

    __slots__ = (
        "_all",
        "_allow_private",
        "_idle",
        "_loop",
        "_proxies",
        "_resolver",
        "_ssl",
        "_targets",
        "_tls_sessions",
        "max_body_bytes",
        "timings",
    )

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_body_bytes: int,
        targets: dict[str, _Target] | None = None,
        resolver: Resolver | None = None,
        proxies: ProxySettings | None = None,
        tls_sessions: TlsSessions | None = None,
        allow_private_addresses: bool = True,
    ) -> None:
        self.timings = ConnectionTimings()
        #: False: connect only to public addresses (see :mod:`._http_private`).
        self._allow_private = allow_private_addresses
        self.max_body_bytes = max_body_bytes
        self._ssl = ssl_context
        #: Sessions of ``ssl_context`` to resume (None: every handshake is a full one).
        self._tls_sessions = tls_sessions
        self._idle: dict[tuple[bool, str, int], list[_Connection]] = {}
        self._all: list[_Connection] = []
        self._targets = {} if targets is None else targets
        self._resolver = resolver if resolver is not None else _default_resolver()
        self._proxies = proxies
        self._loop = asyncio.get_running_loop()

    def request(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> _RequestContext:
        """``async with session.request(...) as response``: the body is read by the caller
        within the same ``timeout`` (seconds, from now); leaving the block early (or on an
        error) closes the connection instead of reusing it.
        """
        return _RequestContext(self, (method, url, headers, body, self._loop.time() + timeout))

    def stream(self, response: HttpResponse) -> AsyncGenerator[bytes, None]:
        """The body chunk by chunk (see :meth:`HttpResponse.chunks`)."""
        return response.chunks()

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= _MAX_CACHED_TARGETS:
                self._targets.clear()  # a crude bound; refilled by the next probes
            target = self._targets[url] = _Target(url)
        return target

    async def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        body: bytes | None,
        deadline: float,
    ) -> HttpResponse:
        target = self._target(url)
        proxy = None
        if self._proxies is not None:
            proxy = self._proxies.route(target.https, target.host, target.port)
        if proxy is None or target.https:
            text = method + target.request_tail
        else:  # plain http through a proxy: absolute form, credentials for the proxy
            text = (
                f"{method} {target.absolute} HTTP/1.1\r\nHost: {target.host_header}\r\n"
                f"User-Agent: {USER_AGENT}\r\n"
            )
            if proxy.authorization:
                text += f"Proxy-Authorization: {proxy.authorization}\r\n"
        if headers:
            block = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
            # One scan for the whole block instead of four per header: exactly one line break
            # per header and no colon in a name (else find the culprit for the message).
            count = len(headers)
            if (
                ":" in "".join(headers)
                or block.count("\n") != count
                or (block.count("\r") != count)
            ):
                for name, value in headers.items():
                    _check_header(name, value)
            text += block
        if body is not None or method in ("POST", "PUT"):
            text += f"Content-Length: {len(body) if body else 0}\r\n\r\n"
        else:
            text += "\r\n"
        try:
            payload = text.encode("latin-1")
        except UnicodeEncodeError:
            raise _unencodable(headers) from None
        if body:
            payload += body
        idle = self._idle.get(target.key)
        while idle:
            conn = idle.pop()
            if conn.eof:
                continue
            conn.deadline = deadline
            try:
                return await self._exchange(conn, method, payload)
            except ConnectionClosed:
                # A kept-alive connection the server closed meanwhile: retry once, fresh.
                conn.close()
                break
        conn = await self._connect(target, proxy, deadline)
        conn.deadline = deadline
        return await self._exchange(conn, method, payload)

    async def _exchange(self, conn: _Connection, method: str, payload: bytes) -> HttpResponse:
        assert conn.transport is not None
        conn.transport.write(payload)
        buffer = conn.buffer
        start = 0
        while True:
            # The head, up to its blank line (every request's first wait).
            index = buffer.find(b"\r\n\r\n", start)
            if index < 0 or index > MAX_HEAD_BYTES:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes")
                start = max(0, len(buffer) - 3)
                if not await conn._more():
                    raise ConnectionClosed(
                        "connection closed mid-response"
                        if buffer
                        else "server closed the connection before responding"
                    )
                continue
            head = bytes(buffer[:index])
            del buffer[: index + 4]
            start = 0
            status, headers, keep_alive = _parse_head(head)
            if status >= 200 or status == 101:
                break  # 1xx interim responses are skipped
        has_body = method != "HEAD" and status not in (204, 304)
        return HttpResponse(conn, status, headers, keep_alive, has_body, self.max_body_bytes)

    def _release(self, response: HttpResponse, *, ok: bool) -> None:
        conn = response._conn
        if ok and response.reusable and not conn.buffer:
            self._idle.setdefault(conn.key, []).append(conn)
        else:
            conn.close()

    async def _connect(self, target: _Target, proxy: Proxy | None, deadline: float) -> _Connection:
        """A new connection to the target (through ``proxy`` when given), by ``deadline``.

        The lookup keeps its own (shorter) deadline and reports a :class:`DnsError`;
        connect and TLS past the request's deadline are a :class:`RequestTimeout`.
        """
        timings = self.timings
        first = timings.connect_seconds is None
        started = time.perf_counter()
        hop = target if proxy is None else proxy
        addresses = hop.addresses
        if addresses is None:
            found = await self._resolver.resolve(
                hop.host, deadline, what="" if proxy is None else "proxy "
            )
            addresses = with_port(found, hop.port)
            if first:
                timings.dns_seconds = time.perf_counter() - started
        if not self._allow_private:
            if proxy is None:
                addresses = public_only(addresses, target.host)
            else:
                await self._check_through_proxy(target, deadline)
        resolved = time.perf_counter()
        offered = None
        if target.https and self._tls_sessions is not None:
            offered = self._tls_sessions.offer(target.host, target.port)
        token = _OFFERED_SESSION.set(offered[0] if offered is not None else None)
        try:
            async with asyncio.timeout_at(deadline):
                if proxy is None and len(addresses) == 1 and numeric(addresses[0]):
                    transport, conn = await connect_transport(
                        self._loop, addresses[0], target.host_header, self._new_connection
                    )
                    connected = time.perf_counter()
                    if target.https:
                        await self._start_tls(transport, conn, target)
                    conn.key = target.key
                else:
                    if proxy is None:
                        sock = await connect(addresses, target.host_header)
                    else:
                        sock = await self._through(proxy, addresses, target)
                    connected = time.perf_counter()
                    conn = await self._handshake(sock, target)
        except TimeoutError:
            raise RequestTimeout() from None
        except TlsError:
            if offered is not None:  # never offer that session again
                self._tls_sessions.forget(target.host, target.port)  # type: ignore[union-attr]
            raise
        finally:
            _OFFERED_SESSION.reset(token)
        self._all.append(conn)
        resumed = False
        if target.https and self._tls_sessions is not None:
            assert conn.transport is not None
            sslobj = conn.transport.get_extra_info("ssl_object")
            resumed = offered is not None and sslobj is not None and sslobj.session_reused
            if not resumed:
                # A full handshake verified the server: keep its session when the connection
                # closes. A resumed one leaves the kept session as it is: reading a session
                # out of a connection costs CPython a copy that parses the server's
                # certificate again (a quarter of a full handshake).
                conn.verified_at = time.monotonic()
                conn.tls_sessions = self._tls_sessions
        if first:
            timings.connect_seconds = connected - resolved
            if target.https:
                timings.tls_resumed = resumed
                timings.tls_seconds = time.perf_counter() - connected
                assert conn.transport is not None
                peercert = conn.transport.get_extra_info("peercert")
                if peercert and "notAfter" in peercert:
                    timings.cert_not_after = float(ssl.cert_time_to_seconds(peercert["notAfter"]))
        return conn

    async def _check_through_proxy(self, target: _Target, deadline: float) -> None:
        """Refuse a target reached through a proxy when any address of its host is not public
        (the proxy connects by name, so whichever it picks must be public). A name that does
        not resolve here is left to the proxy: behind an egress proxy only it may know it."""
        addresses: Sequence[Address] | None = target.addresses
        if addresses is None:
            try:
                addresses = await self._resolver.resolve(target.host, deadline)
            except DnsError:
                return
        for _, sockaddr in addresses:
            reason = non_public_reason(sockaddr[0])
            if reason is not None:
                raise _refusal(target.host, sockaddr[0], reason)

    async def _through(
        self, proxy: Proxy, addresses: list[Address], target: _Target
    ) -> socket.socket:
        """A socket to the proxy; for an https target, tunnelled to it with CONNECT."""
        try:
            sock = await connect(addresses, f"proxy {proxy.label}")
        except ProxyError:
            raise
        except ConnectError as exc:
            raise ProxyError(str(exc)) from None
        if target.https:
            try:
                await open_tunnel(sock, proxy, _authority(target))
            except BaseException:
                sock.close()
                raise
        return sock

    async def _handshake(self, sock: socket.socket, target: _Target) -> _Connection:
        """The connection's transport (TLS with the target for https)."""
        try:
            _, conn = await self._loop.create_connection(
                self._new_connection,
                sock=sock,
                ssl=self._ssl if target.https else None,
                server_hostname=target.host if target.https else None,
            )
        except (ssl.SSLError, ConnectionError) as exc:
            sock.close()
            raise _tls_failure(exc, target) from None
        except BaseException:
            sock.close()
            raise
        conn.key = target.key
        return conn

    async def _start_tls(
        self, transport: asyncio.Transport, conn: _Connection, target: _Target
    ) -> None:
        """TLS with the target over a connected TCP transport (closed when it fails)."""
        try:
            tls = await self._loop.start_tls(
                transport, conn, self._ssl, server_hostname=target.host
            )
        except (ssl.SSLError, ConnectionError) as exc:
            transport.close()
            raise _tls_failure(exc, target) from None
        except BaseException:
            transport.close()
            raise
        if tls is None:  # pragma: no cover - only when the loop is closing
            transport.close()
            raise ConnectionClosed("the connection closed during the TLS handshake")
        conn.transport = tls

    def _new_connection(self) -> _Connection:
        return _Connection(self._loop)

    async def aclose(self) -> None:
        for conn in self._all:
            conn.close()
        self._all.clear()
        self._idle.clear()


def public_only(addresses: Sequence[Address], host: str) -> list[Address]:
    """The public ones among ``addresses`` (to connect to only those); raises
    :class:`PrivateAddressRefused` naming ``host``, the first address and its range when none
    is public."""
    public = [a for a in addresses if non_public_reason(a[1][0]) is None]
    if public or not addresses:
        return public
    address = str(addresses[0][1][0])
    raise _refusal(host, address, non_public_reason(address) or "not public")


def _refusal(host: str, address: str, reason: str) -> PrivateAddressRefused:
    return PrivateAddressRefused(
        private_address_message(host, address, reason), address=address, reason=reason
    )


def _authority(target: _Target) -> str:
    """``host:port`` for CONNECT (always with the port, brackets around IPv6)."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{host}:{target.port}"


#: A chunk size line as servers write it (hex digits, maybe extensions); others are parsed
#: the slow way.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:;[^\r\n]*)?\r\n")
#: One header line (after the status line): name up to the first colon, the rest its value.
_HEADER_LINE = re.compile(r"\r\n([^:\r\n]*):([^\r\n]*)(?=\r\n|\Z)")


def _parse_head(head: bytes) -> tuple[int, Headers, bool]:
    text = head.decode("latin-1")
    status_line, _, _ = text.partition("\r\n")
    version, _, tail = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ProtocolError(f"not an HTTP/1.x response: {status_line[:60]!r}")
    code = tail[:3]
    if len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"bad status line: {status_line[:60]!r}")
    # The common case in C: every line "name: value", no name twice.
    pairs = _HEADER_LINE.findall(text)
    fields = {name.lower(): value.strip() for name, value in pairs}
    if len(pairs) != text.count("\r\n") or len(fields) != len(pairs):
        fields = _parse_fields(text.split("\r\n")[1:])
    connection = fields.get("connection")
    if version == "HTTP/1.1":
        keep_alive = connection is None or "close" not in connection.lower()
    else:
        keep_alive = connection is not None and "keep-alive" in connection.lower()
    return int(code), Headers(fields), keep_alive


def _parse_fields(lines: list[str]) -> dict[str, str]:
    """Header lines one by one: a line without a colon is an error, a repeated name is
    joined with a comma (as HTTP allows)."""
    fields: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line: {line[:60]!r}")
        key = name.lower()
        if key in fields:
            fields[key] = f"{fields[key]}, {value.strip()}"
        else:
            fields[key] = value.strip()
    return fields


_DEFAULT_RESOLVER: Resolver | None = None


def _default_resolver() -> Resolver:
    """The resolver of sessions built without one (HttpClients passes its own)."""
    global _DEFAULT_RESOLVER
    if _DEFAULT_RESOLVER is None:
        _DEFAULT_RESOLVER = Resolver()
    return _DEFAULT_RESOLVER


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's password.
    return b""


class _TlsFiles:
    """A cached TLS context, its resumable sessions, and the modification times of the files
    it was built from."""

    __slots__ = ("context", "paths", "sessions", "stamp")

    def __init__(
        self, context: ssl.SSLContext, paths: tuple[str, ...], resume_seconds: float
    ) -> None:
        self.context = context
        self.sessions = TlsSessions(resume_seconds)
        self.paths = paths
        self.stamp = _stamp(paths)

    def current(self) -> bool:
        """False when one of the files changed since the context was built."""
        return not self.paths or _stamp(self.paths) == self.stamp


def _stamp(paths: tuple[str, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(os.stat(path).st_mtime_ns for path in paths)
    except OSError:
        return None


def _load_context(
    verify: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ClientConfigError(f"cannot load CA file {ca_file}: {_reason(exc)}") from None
    # Offers a kept session to the server it came from (see TlsSessions).
    context.sslobject_class = _ResumingSSLObject
    if not verify:
        # Still TLS; the certificate is simply not checked.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if key_file and not cert_file:
        raise ClientConfigError("a client key file needs a client certificate file")
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file, password=_no_password)
        except (OSError, ssl.SSLError) as exc:
            key = f" with key {key_file}" if key_file else ""
            raise ClientConfigError(
                f"cannot load client certificate {cert_file}{key}: "
                f"{_reason(exc, key_file or cert_file)}"
            ) from None
    return context


def _reason(exc: OSError, key_file: str | None = None) -> str:
    if not isinstance(exc, ssl.SSLError):
        return exc.strerror or str(exc)
    if exc.reason == "KEY_VALUES_MISMATCH":
        return "the key does not belong to the certificate"
    if key_file and exc.reason in ("PEM_LIB", None) and _encrypted(key_file):
        return "the key is encrypted (password-protected keys are not supported)"
    return str(exc.reason or exc)


def _encrypted(key_file: str) -> bool:
    try:
        with open(key_file, "rb") as key:
            return b"ENCRYPTED" in key.read(64 * 1024)
    except OSError:
        return False


class HttpClients:
    """The daemon's HTTP clients. Created on first use by :class:`~alivemcp.plumbing.Plumbing`.

    ``environ`` (default ``os.environ``, read once here) gives the proxy variables;
    ``resolver`` the name resolution shared by every probe session; ``tls_resume_seconds``
    how long after a full TLS handshake a server's session is resumed (see
    :class:`TlsSessions`; 0: never).
    """

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        environ: Mapping[str, str] | None = None,
        tls_resume_seconds: float = TLS_RESUME_SECONDS,
    ) -> None:
        self._tls_resume_seconds = tls_resume_seconds
        self._ssl_contexts: dict[tuple[bool, str | None, str | None, str | None], _TlsFiles] = {}
        self._targets: dict[str, _Target] = {}
        self._httpx: httpx.AsyncClient | None = None
        self.resolver = resolver if resolver is not None else Resolver()
        self._env_proxies = ProxySettings.from_environ(os.environ if environ is None else environ)
        self._proxies: dict[str, ProxySettings] = {}

    def ssl_context(
        self,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> ssl.SSLContext:
        """A shared TLS context (building one loads the CA bundle: milliseconds of CPU).

        With files, it is rebuilt when one of them changes (a rotated client certificate).
        Raises :class:`ClientConfigError` when a file cannot be loaded.
        """
        return self._tls_files(verify, ca_file, cert_file, key_file).context

    def _tls_files(
        self, verify: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
    ) -> _TlsFiles:
        key = (verify, ca_file, cert_file, key_file)
        cached = self._ssl_contexts.get(key)
        if cached is not None and cached.current():
            return cached
        paths = tuple(path for path in (ca_file, cert_file, key_file) if path)
        context = _load_context(verify, ca_file, cert_file, key_file)
        cached = self._ssl_contexts[key] = _TlsFiles(context, paths, self._tls_resume_seconds)
        return cached

    def proxy_settings(self, proxy: str | None) -> ProxySettings | None:
        """``None``: the environment's proxies; ``"direct"``: none; else that proxy's URL.
        Raises :class:`ClientConfigError` for a URL that is not ``http://host[:port]``."""
        if proxy is None:
            return self._env_proxies
        if proxy == "direct":
            return None
        settings = self._proxies.get(proxy)
        if settings is None:
            settings = self._proxies[proxy] = ProxySettings.single(proxy)
        return settings

    def probe_session(
        self,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        proxy: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        allow_private_addresses: bool = True,
    ) -> ProbeSession:
        """A :class:`ProbeSession` for one probe run.

        ``cert_file``/``key_file`` are a client certificate for servers that ask for one
        (mTLS); ``proxy`` is ``None`` (the environment's HTTP_PROXY/HTTPS_PROXY/ALL_PROXY/
        NO_PROXY), ``"direct"`` or ``http://[user:password@]host:port``. Raises
        :class:`ClientConfigError` when these settings are unusable.
        ``allow_private_addresses=False`` (a target from a public list): every connection of
        the session goes to public addresses only, checked on the resolved address at connect
        time; anything else raises :class:`PrivateAddressRefused` before a byte is sent.
        """
        tls = self._tls_files(verify, ca_file, cert_file, key_file)
        return ProbeSession(
            ssl_context=tls.context,
            max_body_bytes=max_body_bytes,
            targets=self._targets,
            resolver=self.resolver,
            proxies=self.proxy_settings(proxy),
            tls_sessions=tls.sessions if verify and self._tls_resume_seconds > 0 else None,
            allow_private_addresses=allow_private_addresses,
        )

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        max_body_bytes: int = DEFAULT_FETCH_BODY_BYTES,
        verify: bool = True,
        ca_file: str | None = None,
        proxy: str | None = None,
        allow_private_addresses: bool = True,
    ) -> Fetched:
        """One request on a connection of its own, its body read whole, the connection closed.

        For small, infrequent exchanges (an OAuth token endpoint, a health URL): the answer is
        returned whatever its status (the caller judges it); a failure below HTTP raises an
        :class:`HttpError` (a :class:`~alivemcp.errors.ProbeError` carrying its kind), a body
        over ``max_body_bytes`` a :class:`BodyTooLarge`. ``timeout`` (seconds) covers the
        lookup, connect, TLS and the whole body; no redirect is followed.
        ``allow_private_addresses``: as for :meth:`probe_session`.
        """
        session = self.probe_session(
            verify=verify,
            ca_file=ca_file,
            proxy=proxy,
            max_body_bytes=max_body_bytes,
            allow_private_addresses=allow_private_addresses,
        )
        started = time.perf_counter()
        try:
            async with session.request(
                method, url, timeout=timeout, headers=headers, body=body
            ) as response:
                data = await read_capped(response)
            return Fetched(
                response.status,
                response.headers,
                data,
                time.perf_counter() - started,
                session.timings,
            )
        finally:
            await session.aclose()

    async def address_problem(self, url: str, *, timeout: float) -> PrivateAddressRefused | None:
        """What a session with ``allow_private_addresses=False`` would refuse about ``url``'s
        host as it resolves now (no connection is made), or None: every address is public, or
        nothing can be told yet (not an http(s) URL, a lookup that fails: the run will say).
        For a list of targets, to leave out those aimed inward before they are ever run."""
        try:
            target = _Target(url)
        except InvalidRequest:
            return None
        addresses: Sequence[Address] | None = target.addresses
        if addresses is None:
            deadline = asyncio.get_running_loop().time() + timeout
            try:
                addresses = await self.resolver.resolve(target.host, deadline)
            except DnsError:
                return None
        try:
            public_only(addresses, target.host)
        except PrivateAddressRefused as exc:
            return exc
        return None

    @property
    def httpx(self) -> httpx.AsyncClient:
        """One shared httpx client for the alerting receivers (low volume, the engine's own).

        Callers pass their own per-request ``timeout=``; the client default is 10 s.
        """
        if self._httpx is None:
            import httpx

            self._httpx = httpx.AsyncClient(
                timeout=10.0,
                headers={"User-Agent": USER_AGENT},
                follow_redirects=False,
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
        return self._httpx

    async def aclose(self) -> None:
        if self._httpx is not None:
            await self._httpx.aclose()
            self._httpx = None
        self._ssl_contexts.clear()
        self.resolver.clear()


def _tls_failure(exc: ssl.SSLError | ConnectionError, target: _Target) -> TlsError:
    """The one wording of a failed TLS handshake, however the connection was made."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(
            f"TLS certificate of {target.host_header} rejected: {exc.verify_message or exc.reason}",
            certificate=True,
        )
    return TlsError(f"TLS handshake with {target.host_header} failed: {exc}")
