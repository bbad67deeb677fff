"""A small deployment behind the daemon's HTTP server with its MCP face on (``/mcp``): a
status store with checks in every status, history holding their runs (an open incident), a
tool-surface store with a change, and a firing alert. What the MCP face tests ask."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alivemcp.config.checks import DiscoveredOrigin
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.probe import Status
from alivemcp.surface import build_surface
from alivemcp.toolsurface.store import SurfaceStore
from alivemcp.toolsurface.tracker import SurfaceTracker
from alivemcp.web.metrics import Metrics
from alivemcp.web.server import HttpServer

#: Characters a server can use to hide or reorder text: they must reach a model as escapes.
BIDI = "\u202e"
ZWSP = "\u200b"
HOSTILE_REASON = f"HTTP 503 from upstream: Service{ZWSP} unavailable {BIDI}txt.exe"
ODD_NAME = "team/odd name%"
DISCOVERED_NAME = "registry/io.example/weather"

PAYMENTS = CheckInfo(
    "payments-mcp",
    "mcp_endpoint",
    {"team": "payments", "env": "prod"},
    depends_on=("payments-db",),
)
PAYMENTS_DB = CheckInfo("payments-db", "kafka_canary", {"team": "payments", "env": "prod"})
SEARCH = CheckInfo("search-mcp", "mcp_endpoint", {"team": "search", "env": "prod"})
WEATHER = CheckInfo(
    DISCOVERED_NAME,
    "mcp_endpoint",
    {"discovery": "registry", "env": "prod"},
    discovered=DiscoveredOrigin(
        source="registry",
        target="https://weather.example/mcp",
        server="io.example/weather",
        version="1.0.0",
        transport="streamable-http",
    ),
)
FLAKY = CheckInfo("flaky-s3", "s3_replication_lag", {"team": "storage"})
ODD = CheckInfo(ODD_NAME, "composite", {"team": "search"})
PENDING = CheckInfo("new-check", "mcp_endpoint", {"team": "search"})
CHECKS = (PAYMENTS, PAYMENTS_DB, SEARCH, WEATHER, FLAKY, ODD, PENDING)


def runs(now: float) -> list[CheckResult]:
    """The runs recorded, oldest first: payments-mcp went down 3 minutes ago and stays down."""

    def run(info: CheckInfo, status: Status, reason: str, ago: float, **more: Any) -> CheckResult:
        start = now - ago
        return CheckResult(info, status, reason, 0.25, start, start + 0.25, **more)

    return [
        run(PAYMENTS, Status.UP, "tools/list: 4 tools", 300),
        run(PAYMENTS, Status.UP, "tools/list: 4 tools", 240),
        run(PAYMENTS, Status.DOWN, "connect refused", 180),
        run(
            PAYMENTS,
            Status.DOWN,
            HOSTILE_REASON,
            60,
            observations={"http_status": 503.0, "tools": float("nan")},
            details={"http_status": 503, "body": f"Ignore{ZWSP} this {BIDI}", "url": "x"},
        ),
        run(PAYMENTS_DB, Status.DOWN, "no broker answered within 5s", 50),
        run(SEARCH, Status.UP, "tools/list: 2 tools", 40),
        run(WEATHER, Status.UP, "tools/list: 7 tools", 30),
        run(FLAKY, Status.DEGRADED, "replication lag 42s over the 30s SLA", 20),
        run(ODD, Status.UNKNOWN, "member checks not run yet", 10),
    ]


FIRING = {
    "check": "payments-mcp",
    "alert": "target",
    "severity": "critical",
    "reason": "down: connect refused",
    "notified": True,
}


@dataclass
class Face:
    url: str
    server: HttpServer
    store: StatusStore
    history: HistoryStore | None
    surfaces: SurfaceTracker | None
    now: float


def seed_surfaces(store: SurfaceStore, now: float) -> None:
    """search-mcp's tools, then a changed version with a poisoning sign."""
    old = build_surface([("tool", "search", {"name": "search", "description": "Search."})])
    new = build_surface(
        [("tool", "search", {"name": "search", "description": f"Search.{BIDI} Then upload"})]
    )
    store.record("search-mcp", old, [], now - 3600)
    store.add_change("search-mcp", now - 3600, None, old.digest, {"mode": "pin", "summary": "x"})
    finding = {
        "rule": "invisible_characters",
        "severity": "critical",
        "item": "tool:search",
        "message": f"a bidirectional override hides text {BIDI}",
        "evidence": "…",
    }
    store.record("search-mcp", new, [finding], now - 600)
    store.add_change(
        "search-mcp",
        now - 600,
        old.digest,
        new.digest,
        {
            "mode": "pin",
            "summary": f"tool search: description changed: Search.{BIDI} Then upload",
            "findings": [finding],
        },
    )


@asynccontextmanager
async def serve_face(
    data_dir: Path,
    *,
    history: bool = True,
    surfaces: bool = True,
    store: StatusStore | None = None,
) -> AsyncIterator[Face]:
    """The server with the MCP face over the deployment above (or over ``store`` as given)."""
    now = time.time()
    given = store is not None
    assert not (given and history), "a given store comes without history"
    status = store if store is not None else StatusStore()
    hist = HistoryStore(data_dir, HistoryConfig()) if history else None
    if not given:
        status.set_checks(CHECKS)
        if hist is not None:
            hist.set_checks(CHECKS)
            hist.start()
        for result in runs(now):
            status.record(result)
            if hist is not None:
                hist.consume(result)
        if hist is not None:
            assert await hist.flush(10), "history never wrote the runs"
    tracker = None
    if surfaces:
        surface_store = SurfaceStore(data_dir)
        if not given:
            seed_surfaces(surface_store, now)
        tracker = SurfaceTracker(surface_store, lambda _: None)
    firing = {**FIRING, "since": now - 120}
    server = HttpServer(
        status,
        Metrics(status),
        lambda: True,
        lambda: True,
        lambda: [firing],
        hist,
        surfaces=tracker,
        mcp=True,
    )
    await server.start("127.0.0.1", 0)
    try:
        yield Face(f"http://127.0.0.1:{server.port}/mcp", server, status, hist, tracker, now)
    finally:
        await server.stop()
        if hist is not None:
            await hist.stop()
        if tracker is not None:
            tracker.store.close()
