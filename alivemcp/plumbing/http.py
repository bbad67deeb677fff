"""HTTP plumbing: the engine's one place for HTTP clients, size caps and timeouts.

Two kinds of user:

* The MCP hot path (tens of thousands of endpoints): :meth:`HttpClients.probe_session` gives
  a :class:`ProbeSession`, one aiohttp session with its OWN connector per probe run. Its
  requests share one keep-alive connection (initialize, initialized, tools/list and DELETE
  ride the same socket) and it is closed when the run ends. Measured against a shared
  connector, this costs a little CPU on loopback but is what a fleet of distinct hosts gets
  anyway (no connection survives a 60 s interval), and it lets every run report its own
  DNS, connect and TLS times and see the server's certificate. TLS contexts (expensive to
  build) and the DNS resolver are shared.
* Everything else (alerting webhooks, OAuth token endpoints): :attr:`HttpClients.httpx`, one
  shared ``httpx.AsyncClient``.

Nothing a server sends can stall or blow memory: :func:`read_capped` and
:meth:`ProbeSession.stream` cut bodies at a byte cap, and each request runs under a deadline
(``asyncio.timeout``) covering connect, headers and body.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import aiohappyeyeballs
import aiohttp
from aiohttp.abc import AbstractResolver

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "USER_AGENT",
    "BodyTooLarge",
    "ConnectionTimings",
    "HttpClients",
    "ProbeSession",
    "read_capped",
]

USER_AGENT = "alivemcp/0.1"
#: Default cap on one response body (a large tools/list is ~1 MB).
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


class BodyTooLarge(Exception):
    """A response body passed the configured byte cap."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"response body larger than {limit} bytes")
        self.limit = limit


class ConnectionTimings:
    """What opening one probe's connection took (seconds) and the peer certificate's expiry."""

    __slots__ = ("cert_not_after", "connect_seconds", "dns_seconds", "tls_seconds")

    def __init__(self) -> None:
        self.dns_seconds: float | None = None
        self.connect_seconds: float | None = None
        self.tls_seconds: float | None = None
        #: Unix time the server certificate expires (verified TLS only).
        self.cert_not_after: float | None = None


class _TimedConnector(aiohttp.TCPConnector):
    """A connector that records DNS, TCP connect and TLS handshake times separately.

    aiohttp times the whole connection at once; the TLS share matters to an on-call engineer
    (a slow handshake is a different fault from a slow network), so the socket connect and the
    TLS-wrapping ``create_connection`` are timed on their own. The first connection of the
    session is the one measured (later ones only appear when a server closes keep-alive).
    """

    def __init__(self, timings: ConnectionTimings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timings = timings

    async def _resolve_host(self, host: str, port: int, traces: Any = None) -> Any:
        started = time.perf_counter()
        result = await super()._resolve_host(host, port, traces)
        if self.timings.dns_seconds is None:
            self.timings.dns_seconds = time.perf_counter() - started
        return result

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[Any],
        req: aiohttp.ClientRequest,
        timeout: aiohttp.ClientTimeout,
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, Any]:
        # Mirrors aiohttp's own implementation, with a clock between the two steps.
        timings = self.timings
        try:
            started = time.perf_counter()
            sock = await aiohappyeyeballs.start_connection(
                addr_infos=addr_infos,
                local_addr_infos=self._local_addr_infos,
                happy_eyeballs_delay=self._happy_eyeballs_delay,
                interleave=self._interleave,
                loop=self._loop,
            )
            connected = time.perf_counter()
            use_tls = bool(kwargs.get("ssl"))
            if use_tls and self._ssl_shutdown_timeout and sys.version_info >= (3, 11):
                kwargs["ssl_shutdown_timeout"] = self._ssl_shutdown_timeout
            transport, proto = await self._loop.create_connection(*args, **kwargs, sock=sock)
        except aiohttp.client_exceptions.cert_errors as exc:
            raise aiohttp.ClientConnectorCertificateError(req.connection_key, exc) from exc
        except aiohttp.client_exceptions.ssl_errors as exc:
            raise aiohttp.ClientConnectorSSLError(req.connection_key, exc) from exc
        except OSError as exc:
            if exc.errno is None and isinstance(exc, asyncio.TimeoutError):
                raise
            raise client_error(req.connection_key, exc) from exc
        if timings.connect_seconds is None:
            timings.connect_seconds = connected - started
            if use_tls:
                timings.tls_seconds = time.perf_counter() - connected
                peercert = transport.get_extra_info("peercert")
                if peercert and "notAfter" in peercert:
                    timings.cert_not_after = float(ssl.cert_time_to_seconds(peercert["notAfter"]))
        return transport, proto


class ProbeSession:
    """One probe run's HTTP client: a fresh connection, kept alive for the run, then closed."""

    __slots__ = ("_session", "max_body_bytes", "timings")

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | bool,
        resolver: AbstractResolver,
        max_body_bytes: int,
    ) -> None:
        self.timings = ConnectionTimings()
        self.max_body_bytes = max_body_bytes
        connector = _TimedConnector(
            self.timings,
            ssl=ssl_context,
            resolver=resolver,
            limit=0,
            enable_cleanup_closed=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=_NO_TIMEOUT,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT},
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
        )

    @asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send a request and yield the response with its body unread.

        The caller reads it with :func:`read_capped` or :meth:`stream` under its own deadline;
        no compression is negotiated, so byte caps apply to what crosses the wire.
        """
        async with self._session.request(
            method, url, headers=headers, data=body, allow_redirects=False
        ) as response:
            yield response

    async def stream(self, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The body chunk by chunk, raising :class:`BodyTooLarge` past the cap."""
        total = 0
        limit = self.max_body_bytes
        while True:
            chunk = await response.content.readany()
            if not chunk:
                return
            total += len(chunk)
            if total > limit:
                raise BodyTooLarge(limit)
            yield chunk

    async def aclose(self) -> None:
        await self._session.close()


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """Read a whole body, refusing more than ``limit`` bytes (declared or actual)."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    content = response.content
    if declared is not None:
        data = await content.read(declared) if declared else b""
        # read(n) may return less on a short body; finish the rest (bounded by the cap).
        if len(data) == declared or content.at_eof():
            return data
        parts = [data]
        total = len(data)
    else:
        parts, total = [], 0
    while True:
        chunk = await content.readany()
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(limit)
        parts.append(chunk)


class HttpClients:
    """The daemon's HTTP clients. Created on first use by :class:`~alivemcp.plumbing.Plumbing`."""

    def __init__(self) -> None:
        self._ssl_contexts: dict[tuple[bool, str | None], ssl.SSLContext | bool] = {}
        self._resolver: AbstractResolver | None = None
        self._httpx: httpx.AsyncClient | None = None

    def ssl_context(
        self, *, verify: bool = True, ca_file: str | None = None
    ) -> ssl.SSLContext | bool:
        """A shared TLS context (building one loads the CA bundle: milliseconds of CPU)."""
        key = (verify, ca_file)
        context = self._ssl_contexts.get(key)
        if context is None:
            # Unverified (False) still speaks TLS; the certificate is simply not checked.
            context = ssl.create_default_context(cafile=ca_file) if verify else False
            self._ssl_contexts[key] = context
        return context

    def probe_session(
        self,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> ProbeSession:
        if self._resolver is None:
            self._resolver = aiohttp.ThreadedResolver()
        return ProbeSession(
            ssl_context=self.ssl_context(verify=verify, ca_file=ca_file),
            resolver=self._resolver,
            max_body_bytes=max_body_bytes,
        )

    @property
    def httpx(self) -> httpx.AsyncClient:
        """One shared httpx client for low-volume users (alerting, OAuth token endpoints).

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
        if self._resolver is not None:
            await self._resolver.close()
            self._resolver = None
        self._ssl_contexts.clear()
