"""Shared real-component fixtures. A component that cannot start fails the run loudly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alivemcp.localstack.moto import MotoServer


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto in server mode on a free loopback port, shared by the session."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def moto(moto_server: MotoServer) -> Iterator[MotoServer]:
    """The shared moto server, reset to empty before each test."""
    moto_server.reset()
    yield moto_server
