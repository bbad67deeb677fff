"""Fixtures of the discovery tests: HTTP clients whose name lookups the test decides, and the
local MCP registry on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from alivemcp.plumbing.http import HttpClients
from alivemcp.testbed.mcp_registry import LocalRegistry
from tests.discovery.daemon_support import ServedLab
from tests.discovery.support import Lookups, make_http


@pytest.fixture
def lookups() -> Lookups:
    return Lookups()


@pytest.fixture
async def http(lookups: Lookups) -> AsyncIterator[HttpClients]:
    clients = make_http(lookups)
    try:
        yield clients
    finally:
        await clients.aclose()


@pytest.fixture
async def registry() -> AsyncIterator[LocalRegistry]:
    async with LocalRegistry() as served:
        yield served


@pytest.fixture
async def lab() -> AsyncIterator[ServedLab]:
    """The MCP lab served in the test's own process (its requests counted)."""
    async with ServedLab().serving() as served:
        yield served
