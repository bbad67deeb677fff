"""TCP connects to already-resolved addresses, Happy Eyeballs style (RFC 8305).

Why not ``loop.sock_connect``: uvloop's calls ``getaddrinfo`` again, even for an IP literal,
and that lookup queues in libuv's small thread pool behind any hung lookup. Here a connect is
a non-blocking ``connect()`` to a numeric sockaddr plus a writability callback: no resolver,
on asyncio's loop and uvloop alike.

With several addresses, attempts start one after the other, interleaving address families
(v6, v4, v6, ... in the resolver's order of preference); the next attempt starts as soon as the
previous one failed, or after :data:`ATTEMPT_DELAY` while it is still pending. The first
connection up wins and the others are closed. The caller bounds the whole by its deadline.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable, Sequence
from typing import TypeVar

from alivemcp.plumbing._http_dns import Address
from alivemcp.plumbing._http_errors import ConnectError

__all__ = ["ATTEMPT_DELAY", "connect", "connect_transport", "interleave", "numeric"]

#: RFC 8305's recommended "Connection Attempt Delay".
ATTEMPT_DELAY = 0.25

_Attempt = tuple[socket.socket, "asyncio.Future[None]"]
_P = TypeVar("_P", bound=asyncio.BaseProtocol)


def numeric(address: Address) -> bool:
    """True when the event loop's own connect can take ``address`` as a numeric host and
    port without a lookup (an IPv6 address with a scope id cannot be written so)."""
    family, sockaddr = address
    return family == socket.AF_INET or (family == socket.AF_INET6 and not sockaddr[3])


async def connect_transport(
    loop: asyncio.AbstractEventLoop, address: Address, label: str, factory: Callable[[], _P]
) -> tuple[asyncio.Transport, _P]:
    """A TCP transport to one :func:`numeric` address (the common case: an IP literal, a
    name with one address), by the event loop's own connect.

    For a numeric host neither asyncio nor uvloop looks anything up, and the socket is made
    and watched in the loop's C code: cheaper than :func:`connect` plus a transport built on
    its socket (Python socket object, writability callback, a second registration). Raises
    :class:`ConnectError` naming ``label``."""
    family, sockaddr = address
    try:
        transport, protocol = await loop.create_connection(
            factory, sockaddr[0], sockaddr[1], family=family
        )
    except OSError as exc:
        # asyncio words it "Connect call failed ('127.0.0.1', 80)": name the reason instead.
        reason = OSError(exc.errno, os.strerror(exc.errno)) if exc.errno else exc
        raise _failed(label, [reason]) from None
    return transport, protocol


def interleave(addresses: Sequence[Address]) -> list[Address]:
    """Alternate address families, starting with the first address's (RFC 8305 section 4)."""
    if len(addresses) < 2:
        return list(addresses)
    first = addresses[0][0]
    preferred = [a for a in addresses if a[0] == first]
    others = [a for a in addresses if a[0] != first]
    out: list[Address] = []
    for index in range(max(len(preferred), len(others))):
        out.extend(group[index] for group in (preferred, others) if index < len(group))
    return out


async def connect(
    addresses: Sequence[Address], label: str, *, delay: float = ATTEMPT_DELAY
) -> socket.socket:
    """A connected non-blocking TCP socket to one of ``addresses``; raises
    :class:`ConnectError` (naming ``label``, e.g. ``host:port``) when every attempt failed.
    Cancellation (the caller's deadline) closes every attempt."""
    loop = asyncio.get_running_loop()
    if len(addresses) == 1:  # the common case (an IP literal): no racing machinery
        family, sockaddr = addresses[0]
        try:
            sock, future = _start(loop, family, sockaddr)
        except OSError as exc:
            raise _failed(label, [exc]) from None
        try:
            await future
        except OSError as exc:
            _close(loop, sock)
            raise _failed(label, [exc]) from None
        except BaseException:
            _close(loop, sock)
            raise
        return sock
    return await _race(loop, interleave(addresses), label, delay)


async def _race(
    loop: asyncio.AbstractEventLoop, addresses: list[Address], label: str, delay: float
) -> socket.socket:
    attempts: list[_Attempt] = []
    errors: list[OSError] = []
    winner: socket.socket | None = None
    try:
        for index, (family, sockaddr) in enumerate(addresses):
            try:
                attempts.append(_start(loop, family, sockaddr))
            except OSError as exc:
                errors.append(exc)
                continue
            last = index == len(addresses) - 1
            winner = await _first_up(loop, attempts, errors, None if last else delay)
            if winner is not None:
                return winner
        raise _failed(label, errors)
    finally:
        for sock, future in attempts:
            if sock is not winner:
                future.cancel()
                _close(loop, sock)


async def _first_up(
    loop: asyncio.AbstractEventLoop,
    attempts: list[_Attempt],
    errors: list[OSError],
    delay: float | None,
) -> socket.socket | None:
    """Wait for a connection up (returned) or, with ``delay``, until it passes or an attempt
    fails; failed attempts are moved from ``attempts`` to ``errors``. Without ``delay``, wait
    until one is up or all failed (None)."""
    deadline = None if delay is None else loop.time() + delay
    while True:
        for attempt in list(attempts):
            sock, future = attempt
            if not future.done():
                continue
            exc = future.exception()
            if exc is None:
                return sock
            attempts.remove(attempt)
            _close(loop, sock)
            errors.append(exc if isinstance(exc, OSError) else OSError(str(exc)))
            if delay is not None:
                return None  # a failure: start the next attempt now
        pending = [future for _, future in attempts]
        if not pending:
            return None
        timeout = None if deadline is None else deadline - loop.time()
        if timeout is not None and timeout <= 0:
            return None
        if not await _any_done(loop, pending, timeout):
            return None


async def _any_done(
    loop: asyncio.AbstractEventLoop, futures: list[asyncio.Future[None]], timeout: float | None
) -> bool:
    """Wait until one of ``futures`` is done (True) or ``timeout`` passed (False); a lighter
    ``asyncio.wait(FIRST_COMPLETED)``: this runs for every connect to a name with two
    addresses (localhost)."""
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in futures:
        future.add_done_callback(wake)
    timer = None if timeout is None else loop.call_later(timeout, wake)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for future in futures:
            future.remove_done_callback(wake)
    return any(future.done() for future in futures)


def _start(loop: asyncio.AbstractEventLoop, family: int, sockaddr: tuple[object, ...]) -> _Attempt:
    """Begin a non-blocking connect; the future settles when it is up or failed."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(sockaddr)
    except BaseException:
        sock.close()
        raise
    future: asyncio.Future[None] = loop.create_future()
    if code == 0:
        future.set_result(None)
    elif code in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
        loop.add_writer(sock.fileno(), _settle, loop, sock, future)
    else:
        sock.close()
        raise OSError(code, os.strerror(code))
    return sock, future


def _settle(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, future: asyncio.Future[None]
) -> None:
    loop.remove_writer(sock.fileno())
    if future.done():
        return
    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code == 0:
        future.set_result(None)
    else:
        future.set_exception(OSError(code, os.strerror(code)))


def _close(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fd = sock.fileno()
    if fd >= 0:
        loop.remove_writer(fd)
    sock.close()


def _failed(label: str, errors: Sequence[BaseException]) -> ConnectError:
    if not errors:
        return ConnectError(f"cannot connect to {label}: no address")
    reasons: list[str] = []
    for exc in errors:
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        if reason not in reasons:
            reasons.append(reason)
    tried = f" ({len(errors)} addresses tried)" if len(errors) > 1 else ""
    return ConnectError(f"cannot connect to {label}: {'; '.join(reasons)}{tried}")
