"""One connection of the probe client: a socket with a receive buffer and one deadline.

:class:`Connection` is the asyncio protocol the response reader (:mod:`._http_response`)
consumes bytes from. Its waits for bytes are bounded by the request's deadline through one
plain loop timer per connection (far cheaper than an ``asyncio.timeout`` context per request),
which raises :class:`~._http_errors.RequestTimeout` in the waiting reader when it passes.
Reading pauses the socket while a large buffer is unconsumed, and a reader that consumed
:data:`YIELD_AFTER` bytes without waiting for the socket yields to the loop (:func:`pause`).
On close, a TLS connection keeps its session for the next connection to the same server
(:class:`~._http_tls.TlsSessions`).
"""

from __future__ import annotations

import asyncio
import ssl

from alivemcp.plumbing._http_errors import ConnectionClosed, RequestTimeout, TlsError
from alivemcp.plumbing._http_tls import TlsSessions

__all__ = ["YIELD_AFTER", "Connection", "pause"]

#: Stop reading from the socket while this much is buffered and unconsumed.
_PAUSE_ABOVE = 1024 * 1024
#: How early a deadline timer may fire (loop clocks round timers to their resolution).
_TIMER_SLACK = 0.002
#: Body pieces are at most this big, and a reader that consumed this much from the buffer
#: without waiting for the socket yields to the loop before the next piece.
YIELD_AFTER = 16 * 1024


def _on_deadline(conn: Connection) -> None:
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


class Connection(asyncio.Protocol):
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
        #: Bytes handed out since the reader last waited for the socket (see YIELD_AFTER).
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
    async def more(self) -> bool:
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
            if not await self.more():
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
            if not await self.more():
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


async def pause(conn: Connection) -> None:
    """Let the event loop run other tasks (and timers) before the reader goes on."""
    conn.unyielded = 0
    await asyncio.sleep(0)
