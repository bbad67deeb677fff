"""Real MCP servers for the MCP probe tests, each started at most once per session.

The servers run in subprocesses on free loopback ports (``alivemcp.testbed.mcp_servers``);
a server that cannot start fails the test with its output (e.g. the npm package missing:
``python -m alivemcp.testbed.mcp_servers fetch-npm``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from alivemcp.testbed import mcp_servers
from alivemcp.testbed.mcp_servers import ServerProcess


def _serve(kind: str) -> Iterator[ServerProcess]:
    server = mcp_servers.start_server(kind)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sdk_stateful() -> Iterator[ServerProcess]:
    yield from _serve("sdk-stateful")


@pytest.fixture(scope="session")
def sdk_stateless_json() -> Iterator[ServerProcess]:
    yield from _serve("sdk-stateless-json")


@pytest.fixture(scope="session")
def sdk_legacy_sse() -> Iterator[ServerProcess]:
    yield from _serve("sdk-legacy-sse")


@pytest.fixture(scope="session")
def sdk_auth() -> Iterator[ServerProcess]:
    yield from _serve("sdk-auth")


@pytest.fixture(scope="session")
def sdk_resumable() -> Iterator[ServerProcess]:
    yield from _serve("sdk-resumable")


@pytest.fixture(scope="session")
def sdk_mutable() -> Iterator[ServerProcess]:
    """The SDK server whose tools change while it runs (``mcp_servers.change_sdk_tool``)."""
    yield from _serve("sdk-mutable")


@pytest.fixture(scope="session")
def npm_streamable() -> Iterator[ServerProcess]:
    server = mcp_servers.start_npm_server("streamableHttp")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def npm_sse() -> Iterator[ServerProcess]:
    server = mcp_servers.start_npm_server("sse")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("certs")


@pytest.fixture(scope="session")
def lab_tls_expiring(certs: Path) -> Iterator[ServerProcess]:
    """The lab over HTTPS with a certificate that expires in 3 days."""
    server = mcp_servers.start_server("lab", tls_cert=mcp_servers.self_signed_cert(certs, 3))
    try:
        yield server
    finally:
        server.stop()
