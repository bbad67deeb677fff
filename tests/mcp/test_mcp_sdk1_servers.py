"""The official Python SDK 1.x (``FastMCP``), from its own virtualenv (``fetch-sdk1``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alivemcp.testbed import mcp_servers
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check_series


@pytest.fixture(scope="module", params=mcp_servers.SDK1_KINDS)
def sdk1_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    server = mcp_servers.start_server(request.param)
    try:
        yield server
    finally:
        server.stop()


async def test_sdk1_server_is_up(sdk1_server: ServerProcess) -> None:
    results = await run_check_series(
        "mcp_endpoint",
        {
            "url": sdk1_server.url,
            "required_tools": ["echo", "add"],
            "call": {"name": "add", "arguments": {"a": 1, "b": 2}, "expect_contains": "3"},
        },
        runs=2,
    )
    for result in results:
        assert result.status == "up", result.reason
        details = dict(result.details or {})
        assert details["server_name"] == mcp_servers.SDK1_SERVER_NAME
        assert details["protocol_version"] == "2025-11-25"
        expected = "sse" if sdk1_server.name == "sdk1-legacy-sse" else "streamable_http"
        assert details["transport"] == expected
