"""TLS session resumption in the probe client: a session is resumed only with the server
(host and port) and the TLS settings it was made with, only for a while after the full
handshake that verified the server, and never instead of verifying a server that presents
another certificate."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alivemcp.plumbing.http import ConnectionTimings, HttpClients, TlsError, read_capped
from tests.support.http_client_stand_ins import Run
from tests.support.http_servers import Authority, HttpServer


@pytest.fixture(scope="module")
def trusted(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("trusted"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """An authority the client does not trust."""
    return Authority(tmp_path_factory.mktemp("stranger"))


@pytest.fixture
def good(trusted: Authority) -> Iterator[HttpServer]:
    with HttpServer("127.0.0.1", tls=trusted.server_context()) as server:
        yield server


async def _get(clients: HttpClients, url: str, ca_file: Path) -> ConnectionTimings:
    session = clients.probe_session(proxy="direct", ca_file=str(ca_file))
    try:
        async with session.request("GET", url, timeout=5) as response:
            await read_capped(response)
            assert response.status == 200
        return session.timings
    finally:
        await session.aclose()


def _eventually(condition: Callable[[], bool]) -> bool:
    """The server counts a failed handshake in its own thread, after the client saw it."""
    deadline = time.monotonic() + 5
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _resumed(run: Run, clients: HttpClients, url: str, ca_file: Path) -> bool | None:
    timings = run(_get(clients, url, ca_file))
    # The certificate's expiry is known on a resumed connection too (kept in the session).
    assert timings.cert_not_after is not None and timings.cert_not_after > time.time()
    return timings.tls_resumed


def test_a_session_is_resumed_with_the_same_server_only(
    run: Run, trusted: Authority, good: HttpServer
) -> None:
    clients = HttpClients(environ={})
    ca = trusted.ca_file
    assert _resumed(run, clients, good.url(), ca) is False  # a full handshake first
    assert _resumed(run, clients, good.url(), ca) is True
    assert _resumed(run, clients, good.url(), ca) is True
    # The same server under another name is another server: a full handshake.
    assert _resumed(run, clients, good.url(host="localhost"), ca) is False
    # Other TLS settings (here another CA file, with the same content) never share sessions.
    other_ca = ca.with_name("copy-of-ca.pem")
    shutil.copy(ca, other_ca)
    assert _resumed(run, clients, good.url(), other_ca) is False
    assert _resumed(run, clients, good.url(), other_ca) is True


def test_a_session_is_not_offered_to_another_port(run: Run, trusted: Authority) -> None:
    """Two ports served with one TLS context (one certificate, one ticket key) would accept
    each other's sessions: the client offers a session only to the port it came from."""
    context = trusted.server_context()
    with HttpServer("127.0.0.1", tls=context) as one, HttpServer("127.0.0.1", tls=context) as two:
        clients = HttpClients(environ={})
        assert _resumed(run, clients, one.url(), trusted.ca_file) is False
        assert _resumed(run, clients, one.url(), trusted.ca_file) is True
        assert _resumed(run, clients, two.url(), trusted.ca_file) is False
        assert _resumed(run, clients, two.url(), trusted.ca_file) is True


def test_another_port_of_the_same_host_is_verified(
    run: Run, trusted: Authority, stranger: Authority, good: HttpServer
) -> None:
    clients = HttpClients(environ={})
    run(_get(clients, good.url(), trusted.ca_file))
    assert _resumed(run, clients, good.url(), trusted.ca_file) is True
    with HttpServer("127.0.0.1", tls=stranger.server_context()) as impostor:
        with pytest.raises(TlsError) as caught:
            run(_get(clients, impostor.url(), trusted.ca_file))
        assert caught.value.certificate, caught.value
        assert _eventually(lambda: impostor.handshake_failures == 1)


def test_a_new_certificate_on_the_same_port_is_verified_not_resumed(
    run: Run, trusted: Authority, stranger: Authority
) -> None:
    """After resumed connections to a good server, another server on the same host and port
    (the session it cannot resume) presenting an untrusted certificate is rejected."""
    clients = HttpClients(environ={})
    with HttpServer("127.0.0.1", tls=trusted.server_context()) as first:
        port = first.port
        url = first.url()
        run(_get(clients, url, trusted.ca_file))
        assert _resumed(run, clients, url, trusted.ca_file) is True
    with HttpServer("127.0.0.1", port, tls=stranger.server_context()) as impostor:
        for _ in range(2):  # the failed session is not offered again either
            with pytest.raises(TlsError) as caught:
                run(_get(clients, url, trusted.ca_file))
            assert caught.value.certificate, caught.value
        assert _eventually(lambda: impostor.handshake_failures == 2)
    with HttpServer("127.0.0.1", port, tls=trusted.server_context()) as good_again:
        assert _resumed(run, clients, good_again.url(), trusted.ca_file) is False


def test_sessions_expire_into_a_full_handshake(
    run: Run, trusted: Authority, good: HttpServer
) -> None:
    clients = HttpClients(environ={}, tls_resume_seconds=0.3)
    ca = trusted.ca_file
    assert _resumed(run, clients, good.url(), ca) is False
    assert _resumed(run, clients, good.url(), ca) is True
    run(asyncio.sleep(0.35))  # why: the subject: the session's 0.3 s lifetime passes
    # Counted from the full handshake, not from the resumed ones since.
    assert _resumed(run, clients, good.url(), ca) is False
    never = HttpClients(environ={}, tls_resume_seconds=0)
    assert _resumed(run, never, good.url(), ca) is False
    assert _resumed(run, never, good.url(), ca) is False
