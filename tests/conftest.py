"""Shared real-component fixtures. A component that cannot start fails the run loudly."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

# The test-only probe plugin (tests/plugins) is found through its entry point exactly as an
# installed third-party package would be; it must be on sys.path before the registry is read.
PLUGINS = str(Path(__file__).resolve().parent / "plugins")
if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)

from alivemcp.testbed import mcp_servers  # noqa: E402
from alivemcp.testbed.mcp_servers import ServerProcess  # noqa: E402
from alivemcp.testbed.moto import MotoServer  # noqa: E402
from tests.support.alerting_receivers import StandIn  # noqa: E402
from tests.support.cluster import GatedKafkaCluster  # noqa: E402


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto in server mode on a free loopback port, shared by the session."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
async def kafka3() -> AsyncIterator[GatedKafkaCluster]:
    """Three combined broker+controller nodes (ids 1, 2, 3; RF 3, min ISR 2) with gated
    listeners (tests/support/cluster.py), shared by the Kafka probes' and cluster mode's tests
    of a worker: three JVMs started once rather than once for each. Tests that pause brokers
    or cut the gates resume and heal before they finish."""
    cluster = await GatedKafkaCluster(size=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def lab() -> Iterator[ServerProcess]:
    """The lab MCP server (a real aiohttp app in a subprocess) on a free loopback port, shared
    by the session (its surface servers are made per test: ``POST /_surface``)."""
    server = mcp_servers.start_server("lab")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def slack() -> Iterator[StandIn]:
    """A Slack incoming-webhook stand-in (tests/support/alerting_receivers.py)."""
    with StandIn("slack") as server:
        yield server


@pytest.fixture
def pd() -> Iterator[StandIn]:
    """A PagerDuty Events API v2 stand-in."""
    with StandIn("pagerduty") as server:
        yield server


@pytest.fixture
def hook() -> Iterator[StandIn]:
    """A generic webhook stand-in."""
    with StandIn("webhook") as server:
        yield server


@pytest.fixture
def moto(moto_server: MotoServer) -> Iterator[MotoServer]:
    """The shared moto server, reset to empty before each test."""
    moto_server.reset()
    yield moto_server


@pytest.fixture(autouse=True, scope="session")
def _loggers_never_cached() -> Iterator[None]:
    """In this process, loggers are configured without ``cache_logger_on_first_use``: a logger
    cached on first use keeps the processors it was first used with, so a test's
    ``structlog.testing.capture_logs()`` saw nothing once an earlier test in the same worker
    had used that logger (whether it did depends on how the modules are spread over workers).
    Daemons the tests start as processes configure theirs as in production."""
    real = structlog.configure

    def configure(**settings: Any) -> None:
        settings["cache_logger_on_first_use"] = False
        real(**settings)

    structlog.configure = configure
    try:
        yield
    finally:
        structlog.configure = real


@pytest.fixture(autouse=True)
def _logging_config_per_test() -> Iterator[None]:
    """structlog's configuration as it was before the test: a test that runs a daemon in this
    process configures logging (at ``warning``, say), and the next test's captured ``info``
    lines were then filtered out before any capture saw them."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


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


#: Fixtures that need no server, process or network: a test that uses only these, in a module
#: that starts nothing itself, is a unit test, run by ``make check`` too.
UNIT_FIXTURES = frozenset(
    {
        "request",
        "tmp_path",
        "tmp_path_factory",
        "monkeypatch",
        "caplog",
        "capsys",
        "capfd",
        "recwarn",
        "_registered_secrets_per_test",
        "_logging_config_per_test",
        "_loggers_never_cached",
        "event_loop_policy",
    }
)


#: A test module whose source names one of these starts processes or servers (the daemon, the
#: CLI, the local stack): none of its tests is a unit test.
_STARTS_THINGS = (
    "subprocess",
    "Daemon",
    "testbed",
    "serve_http",
    "ALIVEMCP",
    "run_check",
    "Popen",
    "start_daemon",
    "free_port",
)


def _starts_things(module: object, seen: dict[str, bool]) -> bool:
    path = str(getattr(module, "__file__", ""))
    if path not in seen:
        try:
            source = Path(path).read_text(encoding="utf-8")
        except OSError:
            source = ""
        seen[path] = any(word in source for word in _STARTS_THINGS)
    return seen[path]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "unit: no server, process or network (set by conftest; make check runs these)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[str, bool] = {}
    for item in items:
        if getattr(item, "function", None) is None:
            continue
        if set(getattr(item, "fixturenames", ())) - UNIT_FIXTURES:
            continue
        if not _starts_things(getattr(item, "module", None), seen):
            item.add_marker(pytest.mark.unit)
