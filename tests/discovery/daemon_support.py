"""Helpers of the daemon-level discovery tests: the real ``alivemcp run`` (a subprocess) driven
from an async test, the lab MCP server served in the test's own process (so a test can count
what reaches it, request by request and at once), and readers of what the daemon shows.

The registry, the http_sd endpoint and the lab all run on the test's event loop; every read of
the daemon (blocking HTTP) runs in a worker thread, so those servers keep answering while a
test waits. Waits are :func:`tests.support.poll_until` deadlines (the daemon's log tail in the
failure), made of the configured intervals by :func:`within`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from alivemcp.app.daemon import Daemon
from alivemcp.config import load_config
from alivemcp.engine.grid import MIN_MISFIRE_GRACE, stable_offset
from alivemcp.hygiene.logging import configure_logging
from alivemcp.testbed.mcp_lab.app import lab_app
from alivemcp.testbed.mcp_lab.healthy import fast_json
from alivemcp.testbed.mcp_lab.state import LAB_STATE, LabState
from tests.support import DaemonProcess, run_until, write_daemon_config
from tests.support.aiohttp_server import serve_app

#: The daemon tests' sources refresh every second; their checks run every 2 s, each run given
#: 1.5 s: deadlines are counted in these.
REFRESH = 1.0
INTERVAL = 2.0
TIMEOUT = 1.5

_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
#: Allowance on top of the configured intervals for what no interval governs: the daemon's
#: start, a first run's connection, a machine shared with other test workers.
SLACK = 20.0


def within(
    *, refreshes: float = 0.0, refresh: float = 0.0, runs: float = 0.0, interval: float = 0.0
) -> float:
    """A deadline made of the configured intervals: ``refreshes`` refreshes of ``refresh``
    seconds, ``runs`` runs of ``interval`` seconds, and :data:`SLACK`."""
    return refreshes * refresh + runs * interval + SLACK


# -- the daemon --------------------------------------------------------------------------------


@asynccontextmanager
async def running_daemon(config: Path) -> AsyncIterator[DaemonProcess]:
    """``alivemcp run`` on ``config`` until the block ends (stopped by SIGTERM, killed if it
    does not stop)."""
    daemon = DaemonProcess(config)
    try:
        await asyncio.to_thread(daemon.start)
        yield daemon
    finally:
        try:
            await asyncio.to_thread(daemon.stop)
        finally:
            daemon.kill()


async def until(
    daemon: DaemonProcess, predicate: Callable[[], Any], within: float, what: str
) -> Any:
    """``predicate()`` (blocking reads of the daemon are fine: it runs in a worker thread)
    until it is truthy; fails after ``within`` seconds with the daemon's log tail."""
    return await asyncio.to_thread(daemon.wait_for, predicate, within, what)


@asynccontextmanager
async def daemon_in_process(
    config: Path, prepare: Callable[[Daemon], None] | None = None
) -> AsyncIterator[Daemon]:
    """The daemon on the test's own event loop, for what only its inside shows (a run
    waiting for a slot) or what a test must decide for it (its name lookups: ``prepare`` is
    given the daemon before it starts). Its HTTP server listens where ``config`` says."""
    configure_logging("warning", "json")
    daemon = Daemon(load_config(config), config)
    if prepare is not None:
        prepare(daemon)
    await daemon._start()
    try:
        yield daemon
    finally:
        await daemon.shutdown()


async def settled(predicate: Callable[[], Any], within: float, what: str) -> Any:
    """``predicate()`` (a look at state in this process) every 20 ms until it is truthy."""

    async def look() -> Any:
        return predicate()

    return await run_until(look, bool, what, within, pause=0.02)


def rows(daemon: DaemonProcess) -> dict[str, dict[str, Any]]:
    """The daemon's ``/status`` rows by check name (blocking)."""
    return {row["check"]: row for row in daemon.get_json("/status")["checks"]}


def source_of(daemon: DaemonProcess, name: str) -> dict[str, Any]:
    """Source ``name`` as ``GET /api/v1/discovery`` shows it (blocking)."""
    sources: list[dict[str, Any]] = daemon.get_json("/api/v1/discovery")["sources"]
    return {s["name"]: s for s in sources}[name]


def samples(daemon: DaemonProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the daemon's ``/metrics``: (name, labels) -> value (blocking)."""
    status, text = daemon.get("/metrics")
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(
    found: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` (None: absent)."""
    return found.get((name, frozenset(labels.items())))


def checks_in_metrics(found: Mapping[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    """The checks ``alivemcp_check_up`` has a sample of."""
    return {dict(labels)["check"] for name, labels in found if name == "alivemcp_check_up"}


def up(row: Mapping[str, Any]) -> bool:
    return row.get("status") == "up"


def run_starts(row: Mapping[str, Any]) -> list[float]:
    """Start times of the runs a ``/status`` row lists (its last few)."""
    return [float(run[0]) for run in row.get("history", [])]


def off_grid(name: str, interval: float, starts: Iterable[float]) -> list[str]:
    """What in ``starts`` (a check's run start times, its first run left out) is not one run
    per point of its grid (``stable_offset(name) + k * interval``): a run later after its
    grid point than the scheduler ever starts one (half an interval, at least a second: it
    skips a later one as missed), or a second run on one point. A check taken off the
    schedule and put back gets an early first run between its grid points: one of the two."""
    offset = stable_offset(name, interval)
    grace = max(MIN_MISFIRE_GRACE, interval / 2) + 0.25  # (the start's own few milliseconds)
    problems: list[str] = []
    seen: set[int] = set()
    for start in starts:
        point = math.floor((start - offset + 0.05) / interval)  # (clocks a hair apart)
        late = start - (offset + point * interval)
        if late > grace:
            problems.append(f"run at {start:.3f} is {late:.3f}s past its grid point")
        if point in seen:
            problems.append(f"run at {start:.3f} is a second run on one grid point")
        seen.add(point)
    return problems


# -- config ------------------------------------------------------------------------------------


def template(interval: float, timeout: float | None = None, **extra: Any) -> dict[str, Any]:
    """An ``mcp_endpoint`` template running every ``interval`` seconds."""
    out: dict[str, Any] = {"probe": "mcp_endpoint", "interval": interval}
    if timeout is not None:
        out["timeout"] = timeout
    return {**out, **extra}


def registry_source(
    name: str, url: str, *, refresh: float, page_size: int = 100, **settings: Any
) -> dict[str, Any]:
    """An ``mcp_registry`` block (add the ``template``)."""
    return {
        "name": name,
        "mcp_registry": {"url": url, "refresh": refresh, "page_size": page_size, **settings},
    }


def write_config(
    path: Path,
    sources: list[dict[str, Any]],
    checks: list[dict[str, Any]] | None = None,
    **top: Any,
) -> Path:
    """A daemon config with these discovery sources (and hand-written checks)."""
    return write_daemon_config(path, checks or [], discovery=sources, **top)


# -- the lab, in this process ------------------------------------------------------------------


class ServedLab:
    """The lab MCP server (``alivemcp.testbed.mcp_lab``) on a loopback port of this process,
    counting its requests (:attr:`state`'s ``seen``) and how many it holds at once."""

    def __init__(self) -> None:
        self.app = lab_app()
        self.app.middlewares.append(self._track)
        #: ``/gate/json`` answers as ``/json`` does once this is set (until then it waits).
        self.gate = asyncio.Event()
        self.app.router.add_route("*", "/gate/json", self._gated)
        self.state: LabState = self.app[LAB_STATE]
        self.in_flight = 0
        self.most_in_flight = 0
        self.base = ""

    @web.middleware
    async def _track(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            self.in_flight -= 1

    async def _gated(self, request: web.Request) -> web.StreamResponse:
        await self.gate.wait()
        return await fast_json(request)

    def url(self, path: str) -> str:
        return self.base + path

    def seen(self, key: str) -> int:
        """Requests seen of ``"METHOD /path"``."""
        return self.state.seen.get(key, 0)

    def requests(self) -> int:
        """Every request seen, whatever its path."""
        return sum(n for key, n in self.state.seen.items() if key.split(" ")[0] in _METHODS)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[ServedLab]:
        async with serve_app(self.app, shutdown_timeout=0.5) as served:
            self.base = served.url
            yield self
