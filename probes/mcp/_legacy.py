"""The legacy MCP transport (2024-11-05, HTTP+SSE): responses arrive on a long-lived GET
stream, requests are POSTed to the URL its ``endpoint`` event names."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urljoin, urlsplit

from alivemcp.plumbing.http import HttpError, ProbeSession, RequestTimeout, read_capped
from probes.mcp._jsonrpc import (
    MAX_SERVER_REQUESTS,
    NotMcp,
    answer_to_server,
    encode,
    loads,
    message_of,
    response_id,
    short,
)
from probes.mcp._transport import (
    ERROR_BODY_LIMIT,
    HEADER_SAFE,
    Reply,
    WireError,
    describe,
    http_failures,
    same_origin,
)
from probes.mcp.sse import SseParser

__all__ = ["LegacySseChannel"]

#: What ends the wait for the endpoint event or a response: the stream's own deadline, or the
#: wait's.
_TIMEOUTS = (TimeoutError, RequestTimeout)


class LegacySseChannel:
    """The 2024-11-05 HTTP+SSE transport: responses arrive on a long-lived GET stream.

    :meth:`open` GETs the URL as an event stream and waits for the ``endpoint`` event (the URL
    to POST messages to); a reader task then routes ``message`` events to waiting requests.
    """

    def __init__(self, session: ProbeSession, url: str, headers: Mapping[str, str]) -> None:
        self._session = session
        self._url = url
        self._headers = dict(headers)
        self._stack = AsyncExitStack()
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._closed_reason: str | None = None
        #: What the reader died of (the prober's bug), raised to every later request too.
        self._reader_error: BaseException | None = None
        #: Answers to the server's own requests (``ping``) being sent.
        self._answers: set[asyncio.Task[None]] = set()
        self._answered = 0
        self._answer_timeout = 5.0
        self.endpoint: str | None = None
        self.open_status: int | None = None
        self.open_headers: Mapping[str, str] = {}

    async def open(self, *, timeout: float, lifetime: float) -> None:
        """GET the stream (kept open for ``lifetime`` seconds at most) and wait up to
        ``timeout`` for its endpoint event. Raises :class:`NotMcp` when it is not a legacy
        SSE endpoint."""
        headers = {**self._headers, "Accept": "text/event-stream"}
        headers.pop("Content-Type", None)
        self._answer_timeout = timeout
        with http_failures(f"no endpoint event within {timeout:.3g}s", _TIMEOUTS):
            async with asyncio.timeout(timeout):
                resp = await self._stack.enter_async_context(
                    self._session.request(
                        "GET", self._url, headers=headers, timeout=max(timeout, lifetime)
                    )
                )
                self.open_status = resp.status
                self.open_headers = resp.headers
                if resp.status != 200 or resp.content_type != "text/event-stream":
                    raise NotMcp(
                        f"GET answered HTTP {resp.status} {resp.content_type or ''}".rstrip()
                        + ", not an event stream"
                    )
                parser = SseParser()
                stream = self._session.stream(resp)
                while self.endpoint is None:
                    chunk = await anext(stream, b"")
                    if not chunk:
                        raise NotMcp("the event stream ended before an endpoint event")
                    for event in parser.feed(chunk):
                        if event.event == "endpoint" and event.data:
                            self.endpoint = self._endpoint_url(event.data.strip())
                        elif event.event == "message" and event.data:
                            self._deliver(event.data)
        self._reader = asyncio.create_task(self._read(stream, parser))
        self._reader.add_done_callback(self._reader_died)

    def _endpoint_url(self, raw: str) -> str:
        """The absolute URL an ``endpoint`` event names; only a same-origin one is accepted."""
        unusable = f"the endpoint event is not a usable URL: {short(raw, 100)!r}"
        if not HEADER_SAFE.fullmatch(raw) or " " in raw:
            raise NotMcp(unusable + " (not printable ASCII without spaces)")
        try:
            endpoint = urljoin(self._url, raw)
            urlsplit(endpoint).port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise NotMcp(f"{unusable} ({exc})") from exc
        if not same_origin(endpoint, self._url):
            # Never let a server point the prober at another host.
            raise NotMcp(f"the endpoint event names another origin: {endpoint[:200]}")
        return endpoint

    def _deliver(self, data: str) -> None:
        """Route one ``message`` event: a response to its waiter, a server request to an
        answer; anything malformed fails every waiting request with the reason."""
        what = "an SSE event's data"
        try:
            message = message_of(loads(data, what), what)
            if "method" in message:
                if "id" in message:
                    self._answer(message)
                return
            rid = response_id(message, what)
            if isinstance(rid, int | float):
                waiter = self._waiting.pop(rid, None)  # type: ignore[arg-type]  # 1.0 is 1
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
        except NotMcp as exc:
            self._fail_all(str(exc))

    def _answer(self, request: dict[str, Any]) -> None:
        method, answer = answer_to_server(request)
        if self.endpoint is None:
            raise NotMcp(
                f"the server sent a {short(method, 60)!r} request before its endpoint event"
            )
        self._answered += 1
        if self._answered > MAX_SERVER_REQUESTS:
            raise NotMcp(f"the server sent more than {MAX_SERVER_REQUESTS} requests of its own")
        task = asyncio.create_task(self._send_answer(answer, method))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _send_answer(self, answer: dict[str, Any], method: str) -> None:
        failed = f"answering the server's {short(method, 60)!r} request"
        try:
            reply = await self.send(answer, timeout=self._answer_timeout)
        except (WireError, NotMcp) as exc:
            self._fail_all(f"{failed}: {exc}")
            return
        if not 200 <= reply.status < 300:
            self._fail_all(f"{failed} got HTTP {reply.status}")

    def _fail_all(self, reason: str) -> None:
        self._closed_reason = reason
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(NotMcp(reason))
        self._waiting.clear()

    async def _read(self, stream: Any, parser: SseParser) -> None:
        try:
            async for chunk in stream:
                for event in parser.feed(chunk):
                    if event.event == "message" and event.data:
                        self._deliver(event.data)
            self._fail_all("the event stream closed")
        except HttpError as exc:
            self._fail_all(describe(exc))
        # Nothing else the server can send ends up here: its events' bytes become NotMcp in
        # _deliver, its transport's failures HttpError. Anything else is the prober's own bug,
        # and _reader_died hands it to the waiting requests.

    def _reader_died(self, task: asyncio.Task[None]) -> None:
        """A reader that ended on an exception (the prober's bug, see _read) fails every
        waiting request with it now, not at its timeout: the run reports a probe error
        (``unknown``), never the server as down."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        self._reader_error = exc  # (logged where the request raises it: mcp_endpoint)
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(exc)
        self._waiting.clear()

    async def send(self, message: Mapping[str, Any], *, timeout: float) -> Reply:
        """POST a message to the endpoint; for a request, wait for its response on the stream."""
        assert self.endpoint is not None
        if self._reader_error is not None:
            raise self._reader_error
        if self._closed_reason is not None:
            raise WireError(self._closed_reason)
        request_id = message.get("id") if "method" in message else None
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        waiter: asyncio.Future[dict[str, Any]] | None = None
        if request_id is not None:
            waiter = loop.create_future()
            self._waiting[request_id] = waiter
        headers = {**self._headers, "Content-Type": "application/json"}
        timed_out = f"no response on the event stream within {timeout:.3g}s"
        try:
            with http_failures(timed_out, _TIMEOUTS):
                async with asyncio.timeout(timeout):
                    async with self._session.request(
                        "POST",
                        self.endpoint,
                        headers=headers,
                        body=encode(message),
                        timeout=timeout,
                    ) as resp:
                        status = resp.status
                        ctype = resp.content_type
                        resp_headers = resp.headers
                        await read_capped(resp, ERROR_BODY_LIMIT)
                    found = None
                    if waiter is not None and 200 <= status < 300:
                        found = await waiter
        finally:
            if request_id is not None:
                self._waiting.pop(request_id, None)
        return Reply(status, resp_headers, found, ctype, time.perf_counter() - started)

    async def aclose(self) -> None:
        tasks = [*self._answers, *([self._reader] if self._reader is not None else [])]
        for task in tasks:
            task.cancel()
        # (a reader that died has handed its exception to the requests: _reader_died)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stack.aclose()
