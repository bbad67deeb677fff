"""Never let a public list aim the prober inward: the plumbing's private-address rule, on the
resolved address at connect time, with loopback servers that count every connection."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from alivemcp.errors import ErrorKind
from alivemcp.plumbing import _http_open
from alivemcp.plumbing.http import (
    ClientConfigError,
    HttpClients,
    PrivateAddressRefused,
    non_public_reason,
    read_capped,
)
from alivemcp.plumbing.http import public_only as public_only_of
from alivemcp.probe import Status
from alivemcp.verdict import status_for
from tests.discovery.support import Lookups, make_http


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private (RFC 1918)"),
        ("172.16.5.4", "private (RFC 1918)"),
        ("192.168.1.1", "private (RFC 1918)"),
        ("100.64.0.1", "carrier-grade NAT (100.64.0.0/10)"),
        ("fd12:3456::1", "unique local (fc00::/7)"),
        ("fec0::1", "site-local (fec0::/10)"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "not globally routable"),
        ("198.18.0.1", "not globally routable"),
        ("::ffff:127.0.0.1", "loopback, as IPv4 inside IPv6"),
        ("::ffff:169.254.169.254", "link-local, as IPv4 inside IPv6"),
        ("64:ff9b::a00:1", "private (RFC 1918), as IPv4 inside IPv6"),
        ("2002:c0a8:101::1", "private (RFC 1918), as IPv4 inside IPv6"),
        ("not-an-ip", "not an IP address"),
        ("8.8.8.8", None),
        ("93.184.215.14", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
    ],
)
def test_which_addresses_are_public(address: str, reason: str | None) -> None:
    assert non_public_reason(address) == reason


def test_only_public_addresses_are_kept_and_none_is_a_refusal() -> None:
    v4 = socket.AF_INET
    mixed = [(v4, ("127.0.0.1", 80)), (v4, ("93.184.215.14", 80)), (v4, ("10.0.0.1", 80))]
    assert public_only_of(mixed, "mixed.example.com") == [(v4, ("93.184.215.14", 80))]
    with pytest.raises(PrivateAddressRefused) as info:
        public_only_of([(v4, ("10.0.0.1", 443))], "intranet.example.com")
    exc = info.value
    assert str(exc) == (
        "refused to connect to intranet.example.com (10.0.0.1): not a public address "
        "(private (RFC 1918)), and this check may only reach public ones "
        "(allow_private_addresses: false)"
    )
    assert exc.address == "10.0.0.1" and exc.reason == "private (RFC 1918)"
    # The prober's own rule, not the target's failure: the verdict is unknown.
    assert isinstance(exc, ClientConfigError) and exc.kind is ErrorKind.OTHER
    assert status_for(exc.kind) is Status.UNKNOWN


class Counting(asyncio.Protocol):
    """A loopback HTTP server that counts connections and answers each request with
    ``answer`` (bytes)."""

    def __init__(self, server: CountingServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.server.connections += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert isinstance(self.transport, asyncio.Transport)
        self.transport.write(self.server.answer)


class CountingServer:
    def __init__(self, answer: bytes) -> None:
        self.connections = 0
        self.answer = answer
        self.port = 0


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


async def counting_server(host: str, answer: bytes = OK) -> tuple[CountingServer, asyncio.Server]:
    counter = CountingServer(answer)
    server = await asyncio.get_running_loop().create_server(lambda: Counting(counter), host, 0)
    counter.port = server.sockets[0].getsockname()[1]
    return counter, server


@pytest.fixture
async def loopback() -> AsyncIterator[CountingServer]:
    counter, server = await counting_server("127.0.0.1")
    try:
        yield counter
    finally:
        server.close()
        await server.wait_closed()


async def get(http: HttpClients, url: str, *, allow: bool) -> bytes:
    session = http.probe_session(allow_private_addresses=allow)
    try:
        async with session.request("GET", url, timeout=5) as response:
            return await read_capped(response)
    finally:
        await session.aclose()


async def test_a_loopback_target_is_refused_before_any_connection(
    loopback: CountingServer, http: HttpClients
) -> None:
    url = f"http://127.0.0.1:{loopback.port}/mcp"
    with pytest.raises(PrivateAddressRefused) as info:
        await get(http, url, allow=False)
    assert "127.0.0.1" in str(info.value) and "loopback" in str(info.value)
    assert info.value.target == f"127.0.0.1:{loopback.port}"
    with pytest.raises(PrivateAddressRefused):
        await http.fetch("GET", url, timeout=5, allow_private_addresses=False)
    with pytest.raises(PrivateAddressRefused):
        await get(http, f"http://localhost:{loopback.port}/", allow=False)
    assert loopback.connections == 0
    # The same request allowed: the server is there and counts it (so none came before).
    assert await get(http, url, allow=True) == b"ok"
    assert (await http.fetch("GET", url, timeout=5)).body == b"ok"
    assert loopback.connections == 2


async def test_a_name_that_resolves_inward_is_refused_also_when_it_moves_there_later(
    loopback: CountingServer, http: HttpClients, lookups: Lookups
) -> None:
    url = f"http://rebind.example.com:{loopback.port}/mcp"
    lookups.answers["rebind.example.com"] = ["93.184.215.14"]
    # Listed while its name pointed outward: nothing to refuse yet.
    assert await http.address_problem(url, timeout=5) is None
    lookups.answers["rebind.example.com"] = ["127.0.0.1"]  # DNS rebinding
    problem = await http.address_problem(url, timeout=5)
    assert problem is not None and "rebind.example.com (127.0.0.1)" in str(problem)
    with pytest.raises(PrivateAddressRefused) as info:
        await get(http, url, allow=False)
    assert "rebind.example.com (127.0.0.1)" in str(info.value)
    assert "loopback" in str(info.value)
    assert loopback.connections == 0
    # Nothing is told of a name that does not resolve (the run says so itself).
    assert await http.address_problem("http://nxdomain.test/", timeout=5) is None
    assert await http.address_problem("not a url", timeout=5) is None


async def test_the_metadata_service_is_never_reached(http: HttpClients) -> None:
    with pytest.raises(PrivateAddressRefused) as info:
        await get(http, "http://169.254.169.254/latest/meta-data/", allow=False)
    assert "link-local" in str(info.value)


async def test_a_redirect_inward_is_held_to_the_same_rule(
    loopback: CountingServer, http: HttpClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A "public" server (127.0.0.2, taken as public for this test) redirects to a loopback
    one: the session follows nowhere inward, and the inner server sees no connection."""
    real: Callable[[str], str | None] = non_public_reason

    def outside_is_127_0_0_2(address: str) -> str | None:
        return None if address == "127.0.0.2" else real(address)

    monkeypatch.setattr(_http_open, "non_public_reason", outside_is_127_0_0_2)
    inner = f"http://127.0.0.1:{loopback.port}/mcp"
    redirect = (
        f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {inner}\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    outer, server = await counting_server("127.0.0.2", redirect)
    try:
        session = http.probe_session(allow_private_addresses=False)
        try:
            async with session.request(
                "POST", f"http://127.0.0.2:{outer.port}/mcp", timeout=5, body=b"{}"
            ) as response:
                await read_capped(response)
                location = response.headers["Location"]
            assert response.status == 307 and location == inner
            with pytest.raises(PrivateAddressRefused):
                async with session.request("POST", location, timeout=5, body=b"{}"):
                    pass
        finally:
            await session.aclose()
    finally:
        server.close()
        await server.wait_closed()
    assert outer.connections == 1 and loopback.connections == 0


async def test_through_a_proxy_the_target_name_is_looked_up_and_refused(
    lookups: Lookups,
) -> None:
    proxy, server = await counting_server("127.0.0.1")
    http = make_http(lookups, {"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}"})
    try:
        lookups.answers["inward.example.com"] = ["10.9.8.7"]
        with pytest.raises(PrivateAddressRefused) as info:
            await get(http, "http://inward.example.com/mcp", allow=False)
        assert "inward.example.com (10.9.8.7)" in str(info.value)
        assert proxy.connections == 0
        # A name only the proxy knows is the proxy's business.
        assert await get(http, "http://only-the-proxy-knows.test/", allow=False) == b"ok"
        assert proxy.connections == 1
    finally:
        await http.aclose()
        server.close()
        await server.wait_closed()
