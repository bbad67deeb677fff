"""Opening a probe session's connections: lookup, the private-address rule, proxy, TLS.

:class:`ConnectionOpener` is the part of :class:`~alivemcp.plumbing.http.ProbeSession` that
opens a new connection to a target, all by the request's deadline: the lookup
(:mod:`._http_dns`, with its own shorter deadline), the private-address rule on the resolved
addresses (:func:`public_only`, :mod:`._http_private`), the TCP connect (:mod:`._http_connect`)
directly or to a proxy with a CONNECT tunnel for https (:mod:`._http_proxy`), then TLS with the
target, offering a kept session to resume (:mod:`._http_tls`). The first connection of a
session records its :class:`ConnectionTimings`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Sequence

from alivemcp.plumbing._http_connect import connect, connect_transport, numeric
from alivemcp.plumbing._http_connection import Connection
from alivemcp.plumbing._http_dns import Address, Resolver, with_port
from alivemcp.plumbing._http_errors import (
    ConnectError,
    ConnectionClosed,
    DnsError,
    PrivateAddressRefused,
    ProxyError,
    RequestTimeout,
    TlsError,
)
from alivemcp.plumbing._http_private import non_public_reason, private_address_message
from alivemcp.plumbing._http_proxy import Proxy, open_tunnel
from alivemcp.plumbing._http_target import Target, authority
from alivemcp.plumbing._http_tls import OFFERED_SESSION, TlsSessions

__all__ = [
    "ConnectionOpener",
    "ConnectionTimings",
    "default_resolver",
    "public_only",
]


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


class ConnectionOpener:
    """The base of :class:`~alivemcp.plumbing.http.ProbeSession`: how it opens a connection.

    The attributes below are the session's: its ``__init__`` sets them (once per probe run,
    without a chain of ``__init__`` calls). Methods of a base class cost a session's requests
    nothing more than its own.
    """

    __slots__ = ("_all", "_allow_private", "_loop", "_resolver", "_ssl", "_tls_sessions", "timings")

    timings: ConnectionTimings
    #: False: connect only to public addresses (see :mod:`._http_private`).
    _allow_private: bool
    _ssl: ssl.SSLContext
    #: Sessions of ``_ssl`` to resume (None: every handshake is a full one).
    _tls_sessions: TlsSessions | None
    _resolver: Resolver
    _loop: asyncio.AbstractEventLoop
    #: Every connection opened, to close when the session ends.
    _all: list[Connection]

    async def _connect(self, target: Target, proxy: Proxy | None, deadline: float) -> Connection:
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
        token = OFFERED_SESSION.set(offered[0] if offered is not None else None)
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
            OFFERED_SESSION.reset(token)
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

    async def _check_through_proxy(self, target: Target, deadline: float) -> None:
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
        self, proxy: Proxy, addresses: list[Address], target: Target
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
                await open_tunnel(sock, proxy, authority(target))
            except BaseException:
                sock.close()
                raise
        return sock

    async def _handshake(self, sock: socket.socket, target: Target) -> Connection:
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
        self, transport: asyncio.Transport, conn: Connection, target: Target
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

    def _new_connection(self) -> Connection:
        return Connection(self._loop)


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


_DEFAULT_RESOLVER: Resolver | None = None


def default_resolver() -> Resolver:
    """The resolver of sessions built without one (HttpClients passes its own)."""
    global _DEFAULT_RESOLVER
    if _DEFAULT_RESOLVER is None:
        _DEFAULT_RESOLVER = Resolver()
    return _DEFAULT_RESOLVER


def _tls_failure(exc: ssl.SSLError | ConnectionError, target: Target) -> TlsError:
    """The one wording of a failed TLS handshake, however the connection was made."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(
            f"TLS certificate of {target.host_header} rejected: {exc.verify_message or exc.reason}",
            certificate=True,
        )
    return TlsError(f"TLS handshake with {target.host_header} failed: {exc}")
