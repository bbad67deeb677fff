"""Connection attempts across resolved addresses, Happy Eyeballs style (RFC 8305).

A connect that hangs on loopback: a listener whose accept queue is full (``listen(0)`` plus
one connection never accepted) drops further SYNs, so connects to it stay pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from alivemcp.plumbing._http_connect import interleave
from alivemcp.plumbing._http_dns import Address
from alivemcp.plumbing.http import (
    ConnectError,
    HttpClients,
    RequestTimeout,
    Resolver,
    read_capped,
)
from tests.support.http_client_stand_ins import Lookups, Run
from tests.support.http_servers import HttpServer


@contextmanager
def blackhole(host: str, port: int) -> Iterator[None]:
    """Connects to ``host:port`` hang until the context ends."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, port))
        listener.listen(0)
        with socket.create_connection((host, port), timeout=5):  # fills the accept queue
            probe = socket.socket(family, socket.SOCK_STREAM)
            probe.setblocking(False)
            probe.connect_ex((host, port))
            try:
                # Sanity: a further connect really hangs here.
                assert _pending(probe), f"a connect to {host}:{port} did not hang"
            finally:
                probe.close()
            yield


def _pending(sock: socket.socket) -> bool:
    import select

    _, writable, _ = select.select([], [sock], [], 0.3)
    return not writable


def _open_sockets() -> int:
    """Socket descriptors of this process (uvloop leaves closed transports' sockets pointing
    at /dev/null until they are collected: those are not counted)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


async def _leaked_fds(baseline: int) -> int:
    """Sockets open beyond ``baseline`` once server threads closed their side (2 s at most)."""
    deadline = time.monotonic() + 2
    while _open_sockets() > baseline and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return max(0, _open_sockets() - baseline)


async def _get(clients: HttpClients, url: str, timeout: float) -> tuple[int, float, int]:
    """(status, seconds, descriptors left open after the session closed)."""
    loop = asyncio.get_running_loop()
    baseline = _open_sockets()
    started = loop.time()
    session = clients.probe_session(proxy="direct")
    try:
        async with session.request("GET", url, timeout=timeout) as response:
            await read_capped(response)
            status, took = response.status, loop.time() - started
    finally:
        await session.aclose()
    return status, took, await _leaked_fds(baseline)


async def _get_failing(clients: HttpClients, url: str, timeout: float) -> tuple[str, int]:
    """(the failure, descriptors left open after the session closed)."""
    baseline = _open_sockets()
    session = clients.probe_session(proxy="direct")
    try:
        async with session.request("GET", url, timeout=timeout):
            raise AssertionError("the request succeeded")
    except (ConnectError, RequestTimeout) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        await session.aclose()
    return failure, await _leaked_fds(baseline)


@pytest.mark.parametrize("hole", ["127.0.0.2", "::1"])
def test_a_hanging_first_address_costs_only_the_attempt_delay(
    run: Run, lookups: Lookups, hole: str
) -> None:
    with HttpServer("127.0.0.1") as server, blackhole(hole, server.port):
        lookups.answers = {"he.example.test": [hole, "127.0.0.1"]}
        clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
        status, took, leaked = run(_get(clients, server.url(host="he.example.test"), timeout=5))
        assert status == 200
        # One-at-a-time connects would have waited on the first address until the deadline.
        assert took < 2.5, took
        assert len(server.requests) == 1
        assert leaked == 0  # the losing attempt was closed


def test_all_addresses_hanging_is_a_timeout_with_nothing_left_open(
    run: Run, lookups: Lookups
) -> None:
    with (
        HttpServer("127.0.0.1") as server,
        blackhole("127.0.0.2", server.port),
        blackhole("127.0.0.3", server.port),
    ):
        lookups.answers = {"he.example.test": ["127.0.0.2", "127.0.0.3"]}
        clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
        failure, leaked = run(_get_failing(clients, server.url(host="he.example.test"), timeout=1))
        assert failure == "RequestTimeout: no complete response before the deadline"
        assert leaked == 0


def test_every_address_refusing_is_one_connect_error(run: Run, lookups: Lookups) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]  # bound, never listening: connects are refused
        lookups.answers = {"he.example.test": ["127.0.0.1", "127.0.0.1"]}
        clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
        assert run(_get_failing(clients, f"http://he.example.test:{port}/", timeout=5)) == (
            f"ConnectError: cannot connect to he.example.test:{port}: Connection refused",
            0,
        )
        assert run(_get_failing(clients, f"http://localhost:{port}/", timeout=5)) == (
            f"ConnectError: cannot connect to localhost:{port}: Connection refused "
            "(2 addresses tried)",
            0,
        )


def test_a_refused_first_address_falls_through(run: Run, lookups: Lookups) -> None:
    with HttpServer("127.0.0.1") as server:
        lookups.answers = {"he.example.test": ["127.0.0.4", "127.0.0.1"]}
        clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
        status, _, leaked = run(_get(clients, server.url(host="he.example.test"), timeout=5))
        assert (status, leaked) == (200, 0)


def test_families_are_interleaved() -> None:
    v6: list[Address] = [(socket.AF_INET6, (f"::{i}", 80, 0, 0)) for i in (1, 2, 3)]
    v4: list[Address] = [(socket.AF_INET, (f"127.0.0.{i}", 80)) for i in (1, 2)]
    assert interleave(v6 + v4) == [v6[0], v4[0], v6[1], v4[1], v6[2]]
    assert interleave(v4 + v6) == [v4[0], v6[0], v4[1], v6[1], v6[2]]
    assert interleave(v4) == v4
