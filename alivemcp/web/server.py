"""The HTTP server: /metrics, /status, /healthz, /readyz, the status page at /, and the
history API and badges (:mod:`alivemcp.web.api`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from alivemcp.discovery.manager import SourceSnapshot
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.web.api import add_api_routes
from alivemcp.web.metrics import Metrics
from alivemcp.web.statuspage import PAGE_HEADERS, PAGE_HTML

if TYPE_CHECKING:
    from alivemcp.toolsurface.tracker import SurfaceTracker
    from alivemcp.web.auth import WebAccess

__all__ = ["HttpServer"]

#: /healthz fails when the event loop has not ticked for this long.
LOOP_STALL_SECONDS = 5.0
#: ``/status?check=`` names per request (the rows a page shows at once).
MAX_CHECKS_PER_STATUS_REQUEST = 500
#: How long requests in progress may take to finish when the server stops.
STOP_REQUESTS_SECONDS = 1.0


class HttpServer:
    def __init__(
        self,
        store: StatusStore,
        metrics: Metrics,
        scheduler_alive: Callable[[], bool],
        config_loaded: Callable[[], bool],
        firing_alerts: Callable[[], list[dict[str, Any]]] | None = None,
        history: HistoryStore | None = None,
        discovery: Callable[[], Sequence[SourceSnapshot]] | None = None,
        *,
        surfaces: SurfaceTracker | None = None,
        mcp: bool = False,
        access: WebAccess | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._scheduler_alive = scheduler_alive
        self._config_loaded = config_loaded
        self._firing_alerts = firing_alerts
        self._last_tick = time.monotonic()
        self._ticker: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        #: TLS, credentials and response headers (the web config); None: plain and open.
        self._access = access
        app = web.Application(middlewares=[access.middleware] if access is not None else [])
        app.router.add_get("/", self._page)
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/status", self._status)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        add_api_routes(app, store, history, discovery, surfaces=surfaces)
        if mcp:  # the MCP face at /mcp; the SDK is imported only by a server that serves it
            from alivemcp.web.mcp_face import add_mcp_route

            add_mcp_route(app, store, history, surfaces, firing_alerts)
        app.on_response_prepare.append(_no_sniffing)
        if access is not None:
            app.on_response_prepare.append(access.add_headers)
        self._app = app

    async def start(self, host: str, port: int) -> None:
        # A request still being answered at shutdown gets 1 s, not aiohttp's default 60 s:
        # the whole stop must fit inside the orchestrator's termination grace.
        self._runner = web.AppRunner(
            self._app, access_log=None, handle_signals=False, shutdown_timeout=STOP_REQUESTS_SECONDS
        )
        await self._runner.setup()
        tls = self._access.ssl_context if self._access is not None else None
        site = web.TCPSite(self._runner, host, port, reuse_address=True, ssl_context=tls)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self._ticker = asyncio.create_task(self._tick())
        if self._access is not None:
            await self._access.start()

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._access is not None:
            await self._access.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _tick(self) -> None:
        # A heartbeat on the loop: if probes ever block the loop, /healthz notices.
        while True:
            self._last_tick = time.monotonic()
            await asyncio.sleep(1.0)

    async def _page(self, _: web.Request) -> web.Response:
        return web.Response(
            body=PAGE_HTML, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
        )

    async def _metrics_handler(self, request: web.Request) -> web.StreamResponse:
        parts, content_type = await self._metrics.render_parts(request.headers.get("Accept"))
        # Streamed a part at a time (a few hundred KB each), with the length of the whole:
        # each write waits for the socket to drain, so the loop never copies the ~70 MB body
        # of 100,000 checks into the transport's buffer at once, nor joins it.
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.content_length = sum(map(len, parts))
        await response.prepare(request)
        if request.method != "HEAD":
            for part in parts:
                await response.write(part)
        await response.write_eof()
        return response

    async def _status(self, request: web.Request) -> web.Response:
        # ?view=brief: rows without observations, recent runs and details; ?check=NAME
        # (repeatable): only those checks. The status page paints from the first and fills
        # the rows on screen from the second.
        view = request.query.get("view", "full")
        if view not in ("full", "brief"):
            return web.json_response(
                {"error": f"view must be full or brief, not {view[:40]!r}"}, status=400
            )
        names = request.query.getall("check", None)
        if names is not None and len(names) > MAX_CHECKS_PER_STATUS_REQUEST:
            return web.json_response(
                {"error": f"at most {MAX_CHECKS_PER_STATUS_REQUEST} check= per request"}, status=400
            )
        snapshot = self._store.snapshot(brief=view == "brief", only=names)
        if self._firing_alerts is not None:
            snapshot["alerts"] = self._firing_alerts()
        body = await asyncio.to_thread(json.dumps, snapshot, default=str)
        return web.Response(text=body, content_type="application/json")

    async def _healthz(self, _: web.Request) -> web.Response:
        stalled = time.monotonic() - self._last_tick > LOOP_STALL_SECONDS
        if stalled or not self._scheduler_alive():
            reason = "event loop stalled" if stalled else "scheduler not running"
            return web.json_response({"ok": False, "reason": reason}, status=503)
        return web.json_response({"ok": True})

    async def _readyz(self, _: web.Request) -> web.Response:
        if not self._config_loaded():
            return web.json_response({"ready": False, "reason": "no config loaded"}, status=503)
        if not self._store.ready():
            pending = [
                s.info.name for s in self._store.states() if s.last is None and not s.in_flight
            ]
            answer: dict[str, Any] = {"ready": False, "reason": "checks not run yet"}
            # Always open (kubelet probes): behind credentials, the names are not for everyone.
            if self._access is None or not self._access.asks_credentials:
                answer["pending"] = pending[:20]
            answer["pending_count"] = len(pending)
            return web.json_response(answer, status=503)
        return web.json_response({"ready": True})


async def _no_sniffing(_: web.Request, response: web.StreamResponse) -> None:
    # /status carries text that monitored servers control: a browser must never guess it is
    # HTML and render it. Every response says so, error pages included.
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
