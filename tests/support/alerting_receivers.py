"""Local HTTP servers standing in for Slack, PagerDuty and a generic webhook.

Each runs on its own event loop in a thread (so it keeps answering while a test blocks on a
daemon subprocess), answers the way the real service does (Slack: 200 ``ok`` and plain-text
errors; PagerDuty: 202 JSON, 400 for an invalid event), validates request bodies as strictly
as the real service, and can be scripted to fail: 429 with Retry-After, 500, hang, 404
``no_service``, 410... Only requests it answered with 2xx count as ``accepted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from tests.support.aiohttp_server import serve_app

Kind = Literal["slack", "pagerduty", "webhook"]


@dataclass(frozen=True)
class Answer:
    """A scripted answer: an HTTP status with body/headers, or ``hang`` (never answer)."""

    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def rate_limited(retry_after: float) -> Answer:
    return Answer(429, "rate_limited", {"Retry-After": f"{retry_after:g}"})


HANG = Answer(hang=True)


@dataclass
class Received:
    at: float  # wall time the request arrived
    status: int  # what we answered (0: hung)
    body: Any
    headers: dict[str, str]


class StandIn:
    def __init__(self, kind: Kind, *, routing_key: str = "R0UTINGKEY0123456789abcdef") -> None:
        self.kind = kind
        self.routing_key = routing_key
        self.script: deque[Answer] = deque()
        self.requests: list[Received] = []
        self.accepted: list[Received] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._serving: contextlib.AsyncExitStack | None = None
        self._release: asyncio.Event | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> StandIn:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"stand-in-{self.kind}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise AssertionError(f"{self.kind} stand-in did not start")
        if errors:
            raise AssertionError(f"{self.kind} stand-in failed to start: {errors[0]!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        # Served until _cleanup: started and stopped by two runs of the stand-in's loop.
        self._serving = contextlib.AsyncExitStack()
        served = await self._serving.enter_async_context(
            serve_app(app, access_log=True, shutdown_timeout=0.5)
        )
        self.port = served.port

    async def _cleanup(self) -> None:
        assert self._release is not None and self._serving is not None
        self._release.set()
        await self._serving.aclose()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.kind == "slack":
            return f"http://127.0.0.1:{self.port}/services/T000/B000/XXXXsecretXXXX"
        if self.kind == "pagerduty":
            return f"http://127.0.0.1:{self.port}/v2/enqueue"
        return f"http://127.0.0.1:{self.port}/hook/s3cr3t-path-token"

    def receiver(self, name: str, **extra: Any) -> dict[str, Any]:
        """The receiver config block pointing at this stand-in (fast timeouts for tests)."""
        base: dict[str, Any] = {
            "name": name,
            "type": self.kind,
            "timeout": 1.0,
            "backoff_initial": 0.05,
            "backoff_max": 0.5,
        }
        if self.kind == "slack":
            base.update(webhook_url=self.url, min_interval=0)
        elif self.kind == "pagerduty":
            base.update(url=self.url, routing_key=self.routing_key, min_interval=0)
        else:
            base.update(url=self.url)
        base.update(extra)
        return base

    # -- what arrived ------------------------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        """PagerDuty: accepted event bodies; webhook (json format): accepted notifications."""
        if self.kind == "pagerduty":
            return [r.body for r in self.accepted]
        out: list[dict[str, Any]] = []
        for r in self.accepted:
            out.extend(r.body.get("notifications") or r.body.get("alerts") or [])
        return out

    def texts(self) -> list[str]:
        return [r.body["text"] for r in self.accepted]

    def wait_for(self, predicate: Any, timeout: float = 20.0, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.02)
        raise AssertionError(
            f"{self.kind}: timed out waiting for {what or predicate}; "
            f"got {len(self.requests)} requests: "
            f"{[(r.status, r.body) for r in self.requests][-5:]}"
        )

    async def await_for(self, predicate: Any, timeout: float = 20.0, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            await asyncio.sleep(0.02)
        raise AssertionError(
            f"{self.kind}: timed out waiting for {what or predicate}; "
            f"got {len(self.requests)} requests: "
            f"{[(r.status, r.body) for r in self.requests][-5:]}"
        )

    # -- the server --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = dict(request.headers)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        answer = self.script.popleft() if self.script else None
        record = Received(time.time(), 0, body, headers)
        self.requests.append(record)
        if answer is not None and answer.hang:
            assert self._release is not None
            # Hold the request until the client gives up (or the stand-in stops).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), 30)
            return web.Response(status=504, text="hung")
        if answer is None:
            answer = self._validate(request.path, body)
        record.status = answer.status
        if 200 <= answer.status < 300:
            self.accepted.append(record)
        content_type = "application/json" if self.kind == "pagerduty" else "text/plain"
        return web.Response(
            status=answer.status,
            text=answer.body,
            headers=answer.headers,
            content_type=content_type,
        )

    def _validate(self, path: str, body: Any) -> Answer:
        if self.kind == "slack":
            return self._validate_slack(body)
        if self.kind == "pagerduty":
            return self._validate_pagerduty(body)
        if not isinstance(body, dict):
            return Answer(400, "not json")
        return Answer(200, "accepted")

    @staticmethod
    def _validate_slack(body: Any) -> Answer:
        if not isinstance(body, dict) or not (body.get("text") or body.get("blocks")):
            return Answer(400, "invalid_payload")
        blocks = body.get("blocks") or []
        if len(blocks) > 50:
            return Answer(400, "invalid_blocks")
        for block in blocks:
            text = (block.get("text") or {}).get("text", "")
            if len(text) > 3000:
                return Answer(400, "invalid_blocks")
            for item in block.get("fields") or []:
                if len(item.get("text", "")) > 2000:
                    return Answer(400, "invalid_blocks")
        return Answer(200, "ok")

    def _validate_pagerduty(self, body: Any) -> Answer:
        def invalid(why: str) -> Answer:
            return Answer(
                400,
                json.dumps(
                    {
                        "status": "invalid event",
                        "message": "Event object is invalid",
                        "errors": [why],
                    }
                ),
            )

        if not isinstance(body, dict):
            return invalid("not json")
        if body.get("routing_key") != self.routing_key:
            return invalid("Invalid routing key")
        action = body.get("event_action")
        key = body.get("dedup_key")
        if action not in ("trigger", "acknowledge", "resolve"):
            return invalid("event_action")
        if key is not None and (not isinstance(key, str) or len(key) > 255):
            return invalid("dedup_key")
        if action == "trigger":
            payload = body.get("payload") or {}
            summary = payload.get("summary")
            if not isinstance(summary, str) or not summary or len(summary) > 1024:
                return invalid("payload.summary")
            if not payload.get("source"):
                return invalid("payload.source")
            if payload.get("severity") not in ("critical", "error", "warning", "info"):
                return invalid("payload.severity")
        elif not key:
            return invalid("dedup_key is required for resolve")
        return Answer(
            202, json.dumps({"status": "success", "message": "Event processed", "dedup_key": key})
        )
