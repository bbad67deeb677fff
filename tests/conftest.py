"""Shared real-component fixtures. A component that cannot start fails the run loudly."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The test-only probe plugin (tests/plugins) is found through its entry point exactly as an
# installed third-party package would be; it must be on sys.path before the registry is read.
PLUGINS = str(Path(__file__).resolve().parent / "plugins")
if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)

from alivemcp.testbed.moto import MotoServer  # noqa: E402


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


@pytest.fixture(autouse=True)
def _registered_secrets_per_test() -> Iterator[None]:
    """Secrets a config registers live as long as the process: in a daemon that is right, but
    in one pytest process a secret from one test would redact text in the next."""
    from alivemcp.hygiene import redact

    known, by_prefix = set(redact._known), {k: list(v) for k, v in redact._by_prefix.items()}
    yield
    redact._known.clear()
    redact._known.update(known)
    redact._by_prefix.clear()
    redact._by_prefix.update(by_prefix)
