"""The probe's ``User-Agent`` names its location, so a target's operators can tell the vantage
points apart: real local servers record the header each request arrived with, from the MCP
probe's real client, from two Plumbings of two locations in one process, through a proxy, and
from the alert receivers' httpx client (which keeps the plain ``alivemcp/<version>``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from alivemcp import __version__
from alivemcp.plumbing import Plumbing, user_agent
from alivemcp.testbed.mcp_lab.app import lab_app
from tests.support import run_check
from tests.support.aiohttp_server import serve_app
from tests.support.http_proxy import LocalProxy
from tests.support.http_servers import HttpServer

PLAIN = f"alivemcp/{__version__}"
EU_WEST = f"alivemcp/{__version__} (+location eu-west)"
US_EAST = f"alivemcp/{__version__} (+location us-east)"

#: (method, User-Agent) of each request the recording lab served, in order.
Seen = list[tuple[str, str | None]]


@asynccontextmanager
async def recording_lab() -> AsyncIterator[tuple[str, Seen]]:
    """The MCP lab app, in this process, recording each request's User-Agent; yields its base
    URL and the record."""
    seen: Seen = []

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        seen.append((request.method, request.headers.get("User-Agent")))
        return await handler(request)

    app = lab_app()
    app.middlewares.append(record)
    async with serve_app(app, shutdown_timeout=1.0) as served:
        yield served.url, seen


@asynccontextmanager
async def located(location: str | None) -> AsyncIterator[Plumbing]:
    plumbing = Plumbing(user_agent=user_agent(location))
    try:
        yield plumbing
    finally:
        await plumbing.aclose()


def test_the_user_agent_names_the_version_and_the_location() -> None:
    assert user_agent() == PLAIN
    assert user_agent("eu-west") == EU_WEST
    assert Plumbing().user_agent == PLAIN
    assert Plumbing().http.user_agent == PLAIN


@pytest.mark.parametrize("location", ["", "eu(west)", "eu\r\nX-Evil: 1", "eu\\west", "köln"])
def test_a_location_that_would_break_the_header_is_refused(location: str) -> None:
    with pytest.raises(ValueError, match="User-Agent"):
        user_agent(location)


@pytest.mark.parametrize("agent", ["", "alivemcp/1\r\nX-Evil: 1", "alivemcp/1 \x00"])
def test_a_user_agent_that_is_not_a_header_value_is_refused(agent: str) -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        Plumbing(user_agent=agent)


async def test_the_mcp_probe_sends_its_locations_user_agent() -> None:
    async with recording_lab() as (base, seen), located("eu-west") as plumbing:
        result = await run_check(
            "mcp_endpoint", {"url": base + "/sse", "proxy": "direct"}, plumbing=plumbing
        )
    assert result.status == "up", result.reason
    methods = [method for method, _ in seen]
    assert methods.count("POST") == 3 and "DELETE" in methods  # the whole handshake
    assert {agent for _, agent in seen} == {EU_WEST}


async def test_two_plumbings_in_one_process_each_send_their_own() -> None:
    """Same URL, requests interleaved: each client's cached request heads carry its own
    User-Agent, never the other's (and a Plumbing without a location sends the plain one)."""
    with HttpServer() as server:
        url = server.url("/same")
        async with located("eu-west") as eu, located("us-east") as us, located(None) as plain:
            for _ in range(2):
                for plumbing in (eu, us, plain):
                    fetched = await plumbing.http.fetch("GET", url, timeout=5, proxy="direct")
                    assert fetched.status == 200
    assert [seen.headers.get("user-agent") for seen in server.requests] == [
        EU_WEST,
        US_EAST,
        PLAIN,
    ] * 2


async def test_the_mcp_probe_through_a_proxy_sends_the_same_user_agent() -> None:
    """Plain http through a proxy is written in absolute form (its own request head): the
    origin still sees the location's User-Agent."""
    with LocalProxy() as proxy:
        async with recording_lab() as (base, seen), located("eu-west") as plumbing:
            result = await run_check(
                "mcp_endpoint", {"url": base + "/sse", "proxy": proxy.url}, plumbing=plumbing
            )
    assert result.status == "up", result.reason
    through = [s.method for s in proxy.seen]
    assert through.count("POST") == 3 and "DELETE" in through  # the whole run went through it
    assert [s.target.startswith("http://127.0.0.1:") for s in proxy.seen] == [True] * len(through)
    assert len(seen) == len(through) and {agent for _, agent in seen} == {EU_WEST}


async def test_the_alert_receivers_client_sends_the_plain_user_agent() -> None:
    """The httpx client is the engine's own traffic (alert deliveries), not a probe's."""
    with HttpServer() as server:
        async with located("eu-west") as plumbing:
            response = await plumbing.http.httpx.post(server.url("/hook"), json={"a": 1})
            assert response.status_code == 200
    assert server.requests[-1].headers.get("user-agent") == PLAIN
