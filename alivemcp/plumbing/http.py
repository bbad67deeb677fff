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

Probe requests send the client's ``User-Agent`` (from :class:`~alivemcp.plumbing.Plumbing`;
it names the replica's location), written once into each cached request head (a Target), so
it costs a request nothing; Targets are cached per client, so two locations never mix them.

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
event loop every :data:`~._http_connection.YIELD_AFTER` bytes they consume from an
already-filled buffer, so a server flooding a stream cannot hold the loop (and every other
check) while it is parsed.

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
* TLS (:mod:`._http_tls`): contexts are shared per (verify, CA file, client certificate, key)
  and rebuilt when one of those files changes; a client certificate (mTLS) is offered when the
  server asks. Files that cannot be loaded raise :class:`ClientConfigError` (the prober's
  problem, not the target's). Host header and SNI use the host's IDNA (A-label) form.

The parts live in private modules beside this one, and their public names are re-exported
here: request targets (``_http_target``), a connection and its deadline timer
(``_http_connection``), reading responses (``_http_response``), opening a session's
connections (``_http_open``, the base of :class:`ProbeSession`), TLS (``_http_tls``), DNS,
connect, proxies, the private-address rule and the failures (``_http_dns``, ``_http_connect``,
``_http_proxy``, ``_http_private``, ``_http_errors``). This module holds the sessions and the
clients: :class:`ProbeSession` (requests on kept-alive connections) and :class:`HttpClients`.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from alivemcp.plumbing._http_agent import checked_user_agent
from alivemcp.plumbing._http_connection import Connection
from alivemcp.plumbing._http_dns import Address, Resolver, idna_host
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
from alivemcp.plumbing._http_open import (
    ConnectionOpener,
    ConnectionTimings,
    default_resolver,
    public_only,
)
from alivemcp.plumbing._http_private import non_public_reason
from alivemcp.plumbing._http_proxy import ProxySettings
from alivemcp.plumbing._http_response import (
    MAX_HEAD_BYTES,
    Headers,
    HttpResponse,
    parse_head,
    read_capped,
)
from alivemcp.plumbing._http_target import (
    MAX_CACHED_TARGETS,
    USER_AGENT,
    Target,
    authority,
    check_header,
    check_http_url,
    host_problem,
    unencodable,
)
from alivemcp.plumbing._http_tls import TLS_RESUME_SECONDS, TlsFiles, TlsSessions, load_context

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
    "check_http_url",
    "host_problem",
    "idna_host",
    "non_public_reason",
    "public_only",
    "read_capped",
]

#: Default cap on one response body (a large tools/list is ~1 MB).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Default cap on a body read by :meth:`HttpClients.fetch` (token endpoints, health URLs).
DEFAULT_FETCH_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Fetched:
    """A whole answer from :meth:`HttpClients.fetch`."""

    status: int
    headers: Headers
    body: bytes
    #: From the start of the request to the last byte of the body (connection included).
    seconds: float
    timings: ConnectionTimings


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
            exc.target = authority(target)


class ProbeSession(ConnectionOpener):
    """One probe run's HTTP client: fresh connections, kept alive for the run, then closed.

    Requests and their responses are here; opening a new connection is
    :class:`~._http_open.ConnectionOpener`'s (the base, whose attributes this ``__init__``
    sets too).
    """

    __slots__ = ("_idle", "_proxies", "_targets", "_user_agent", "max_body_bytes")

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_body_bytes: int,
        targets: dict[str, Target] | None = None,
        resolver: Resolver | None = None,
        proxies: ProxySettings | None = None,
        tls_sessions: TlsSessions | None = None,
        allow_private_addresses: bool = True,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.timings = ConnectionTimings()
        #: False: connect only to public addresses (see :mod:`._http_private`).
        self._allow_private = allow_private_addresses
        self.max_body_bytes = max_body_bytes
        self._ssl = ssl_context
        #: Sessions of ``ssl_context`` to resume (None: every handshake is a full one).
        self._tls_sessions = tls_sessions
        self._idle: dict[tuple[bool, str, int], list[Connection]] = {}
        self._all = []
        #: ``targets``, if given, is a cache of Targets built for this same ``user_agent``
        #: (the owning :class:`HttpClients`'s): their request heads carry it.
        self._targets = {} if targets is None else targets
        self._user_agent = user_agent
        self._resolver = resolver if resolver is not None else default_resolver()
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

    def _target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= MAX_CACHED_TARGETS:
                self._targets.clear()  # a crude bound; refilled by the next probes
            target = self._targets[url] = Target(url, self._user_agent)
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
                f"User-Agent: {self._user_agent}\r\n"
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
                    check_header(name, value)
            text += block
        if body is not None or method in ("POST", "PUT"):
            text += f"Content-Length: {len(body) if body else 0}\r\n\r\n"
        else:
            text += "\r\n"
        try:
            payload = text.encode("latin-1")
        except UnicodeEncodeError:
            raise unencodable(headers) from None
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

    async def _exchange(self, conn: Connection, method: str, payload: bytes) -> HttpResponse:
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
                if not await conn.more():
                    raise ConnectionClosed(
                        "connection closed mid-response"
                        if buffer
                        else "server closed the connection before responding"
                    )
                continue
            head = bytes(buffer[:index])
            del buffer[: index + 4]
            start = 0
            status, headers, keep_alive = parse_head(head)
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

    async def aclose(self) -> None:
        for conn in self._all:
            conn.close()
        self._all.clear()
        self._idle.clear()


class HttpClients:
    """The daemon's HTTP clients. Created on first use by :class:`~alivemcp.plumbing.Plumbing`.

    ``environ`` (default ``os.environ``, read once here) gives the proxy variables;
    ``resolver`` the name resolution shared by every probe session; ``tls_resume_seconds``
    how long after a full TLS handshake a server's session is resumed (see
    :class:`TlsSessions`; 0: never); ``user_agent`` what every probe request sends (default
    ``alivemcp/<version>``; ValueError unless it is printable ASCII).
    """

    def __init__(
        self,
        *,
        resolver: Resolver | None = None,
        environ: Mapping[str, str] | None = None,
        tls_resume_seconds: float = TLS_RESUME_SECONDS,
        user_agent: str | None = None,
    ) -> None:
        self.user_agent = USER_AGENT if user_agent is None else checked_user_agent(user_agent)
        self._tls_resume_seconds = tls_resume_seconds
        self._ssl_contexts: dict[tuple[bool, str | None, str | None, str | None], TlsFiles] = {}
        #: Targets of this client only: their request heads carry its User-Agent.
        self._targets: dict[str, Target] = {}
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
    ) -> TlsFiles:
        key = (verify, ca_file, cert_file, key_file)
        cached = self._ssl_contexts.get(key)
        if cached is not None and cached.current():
            return cached
        paths = tuple(path for path in (ca_file, cert_file, key_file) if path)
        context = load_context(verify, ca_file, cert_file, key_file)
        cached = self._ssl_contexts[key] = TlsFiles(context, paths, self._tls_resume_seconds)
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
            user_agent=self.user_agent,
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
            target = Target(url)
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
        """One shared httpx client for the alerting receivers (low volume, the engine's own,
        so its User-Agent is the plain ``alivemcp/<version>`` whatever the location).

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
