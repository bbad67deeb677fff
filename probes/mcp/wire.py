"""MCP over HTTP, one request at a time: the streamable HTTP and legacy HTTP+SSE transports.

Every failure below the MCP layer becomes a :class:`WireError` carrying a sentence an on-call
engineer can act on ("cannot connect to 127.0.0.1:8080: connection refused", "no complete
response within 5s", "connection closed mid-response"), so the probe never shows a traceback.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from alivemcp.plumbing.http import (
    HttpError,
    HttpResponse,
    ProbeSession,
    ProtocolError,
    RequestTimeout,
    read_capped,
)
from probes.mcp.sse import SseParser

__all__ = [
    "ACCEPT_BOTH",
    "LegacySseChannel",
    "NotMcp",
    "Reply",
    "WireError",
    "encode",
    "post",
    "send_delete",
]

ACCEPT_BOTH = "application/json, text/event-stream"
#: Error bodies are only read for a JSON-RPC error code or a challenge: a small cap suffices.
_ERROR_BODY_LIMIT = 64 * 1024
_JSON_TYPES = ("application/json",)
#: How long to wait for an SSE response stream to end after the response event.
_STREAM_END_GRACE = 0.05


class WireError(Exception):
    """The request did not complete at the HTTP level (connect, TLS, timeout, truncation)."""


class NotMcp(Exception):
    """The server answered, but not with MCP (HTML, bad JSON, no matching response...)."""


@dataclass(slots=True)
class Reply:
    """An HTTP answer; ``message`` is the JSON-RPC response for our id, when there is one."""

    status: int
    headers: Mapping[str, str]
    message: dict[str, Any] | None
    content_type: str
    seconds: float


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _describe(exc: HttpError) -> str:
    """One sentence for a client-side failure; never includes request headers."""
    if isinstance(exc, ProtocolError):
        return f"malformed HTTP response: {exc}"
    return str(exc)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    return parts.scheme, parts.hostname, port


def _matching(payload: Any, request_id: int) -> dict[str, Any] | None:
    """The JSON-RPC response to ``request_id`` in a decoded body (object or batch)."""
    items = payload if isinstance(payload, list) else (payload,)
    for item in items:
        if isinstance(item, dict) and item.get("id") == request_id and (
            "result" in item or "error" in item
        ):
            return item
    return None


def _loads(data: bytes | str, what: str) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise NotMcp(f"{what} is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    except ValueError as exc:  # bytes that are not UTF-8
        raise NotMcp(f"{what} is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise NotMcp(f"{what} is JSON nested too deeply") from exc


async def _response_from_sse(
    session: ProbeSession, response: HttpResponse, request_id: int
) -> dict[str, Any]:
    parser = SseParser()
    stream = session.stream(response)
    found: dict[str, Any] | None = None
    async for chunk in stream:
        for event in parser.feed(chunk):
            if not event.data or event.event != "message":
                continue  # the priming event, or some other event type
            found = _matching(_loads(event.data, "an SSE event's data"), request_id)
            if found is not None:
                break
        if found is not None:
            break
    if found is None:
        raise NotMcp(f"the event stream ended without a response to request {request_id}")
    # Servers close the stream right after the response: wait a moment for its end so the
    # connection can carry the next request instead of opening a new one. A stream that
    # stays open is simply dropped (the connection is then closed).
    response.deadline = min(response.deadline,
                            asyncio.get_running_loop().time() + _STREAM_END_GRACE)
    with suppress(HttpError):
        async for _ in stream:
            pass
    await stream.aclose()
    return found


async def post(
    session: ProbeSession,
    url: str,
    message: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    timeout: float,
) -> Reply:
    """POST one JSON-RPC message; for a request, find its response (JSON or SSE)."""
    request_id = message.get("id")
    started = time.perf_counter()
    try:
        async with session.request("POST", url, headers=headers, body=encode(message),
                                   timeout=timeout) as resp:
            status = resp.status
            ctype = resp.content_type
            found: dict[str, Any] | None = None
            if 200 <= status < 300 and request_id is not None and status != 202:
                if ctype == "text/event-stream":
                    found = await _response_from_sse(session, resp, request_id)
                elif ctype in _JSON_TYPES or ctype.endswith("+json"):
                    body = await read_capped(resp, session.max_body_bytes)
                    payload = _loads(body, "the response body")
                    found = _matching(payload, request_id)
                    if found is None:
                        raise NotMcp(
                            f"the JSON body is not a JSON-RPC response to request {request_id}"
                        )
                else:
                    raise NotMcp(
                        f"HTTP {status} with content-type {ctype or 'none'} "
                        "(neither JSON nor an event stream)"
                    )
            elif status >= 300:
                found = await _error_body(resp)
            else:
                await read_capped(resp, _ERROR_BODY_LIMIT)
            return Reply(status, resp.headers, found, ctype, time.perf_counter() - started)
    except RequestTimeout as exc:
        raise WireError(f"no complete response within {timeout:.3g}s") from exc
    except HttpError as exc:
        raise WireError(_describe(exc)) from exc


async def _error_body(resp: HttpResponse) -> dict[str, Any] | None:
    """A JSON-RPC error object from an error response, if it carries one."""
    try:
        body = await read_capped(resp, _ERROR_BODY_LIMIT)
    except HttpError:
        return None
    if resp.content_type not in _JSON_TYPES:
        return None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


async def send_delete(
    session: ProbeSession, url: str, headers: Mapping[str, str], *, timeout: float
) -> int | str:
    """End a session. Returns the status, or a short reason when the request failed."""
    try:
        async with session.request("DELETE", url, headers=headers, timeout=timeout) as resp:
            await read_capped(resp, _ERROR_BODY_LIMIT)
            return resp.status
    except RequestTimeout:
        return f"no response within {timeout:.3g}s"
    except HttpError as exc:
        return _describe(exc)


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
        self.endpoint: str | None = None
        self.open_status: int | None = None
        self.open_headers: Mapping[str, str] = {}

    async def open(self, *, timeout: float, lifetime: float) -> None:
        """GET the stream (kept open for ``lifetime`` seconds at most) and wait up to
        ``timeout`` for its endpoint event. Raises :class:`NotMcp` when it is not a legacy
        SSE endpoint."""
        headers = {**self._headers, "Accept": "text/event-stream"}
        headers.pop("Content-Type", None)
        try:
            async with asyncio.timeout(timeout):
                resp = await self._stack.enter_async_context(
                    self._session.request("GET", self._url, headers=headers,
                                          timeout=max(timeout, lifetime))
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
                            endpoint = urljoin(self._url, event.data.strip())
                            if _origin(endpoint) != _origin(self._url):
                                # Never let a server point the prober at another host.
                                raise NotMcp("the endpoint event names another origin: "
                                             f"{endpoint[:200]}")
                            self.endpoint = endpoint
                        elif event.event == "message" and event.data:
                            self._deliver(event.data)
        except (TimeoutError, RequestTimeout) as exc:
            raise WireError(f"no endpoint event within {timeout:.3g}s") from exc
        except HttpError as exc:
            raise WireError(_describe(exc)) from exc
        self._reader = asyncio.create_task(self._read(stream, parser))

    def _deliver(self, data: str) -> None:
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            self._fail_all("an SSE event's data is not valid JSON")
            return
        if isinstance(payload, dict):
            waiter = self._waiting.pop(payload.get("id"), None)  # type: ignore[arg-type]
            if waiter is not None and not waiter.done():
                waiter.set_result(payload)

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
            self._fail_all(_describe(exc))

    async def send(self, message: Mapping[str, Any], *, timeout: float) -> Reply:
        """POST a message to the endpoint; for a request, wait for its response on the stream."""
        assert self.endpoint is not None
        if self._closed_reason is not None:
            raise WireError(self._closed_reason)
        request_id = message.get("id")
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        waiter: asyncio.Future[dict[str, Any]] | None = None
        if request_id is not None:
            waiter = loop.create_future()
            self._waiting[request_id] = waiter
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            async with asyncio.timeout(timeout):
                async with self._session.request(
                    "POST", self.endpoint, headers=headers, body=encode(message),
                    timeout=timeout,
                ) as resp:
                    status = resp.status
                    ctype = resp.content_type
                    resp_headers = resp.headers
                    await read_capped(resp, _ERROR_BODY_LIMIT)
                found = None
                if waiter is not None and 200 <= status < 300:
                    found = await waiter
        except (TimeoutError, RequestTimeout) as exc:
            raise WireError(f"no response on the event stream within {timeout:.3g}s") from exc
        except HttpError as exc:
            raise WireError(_describe(exc)) from exc
        finally:
            if request_id is not None:
                self._waiting.pop(request_id, None)
        return Reply(status, resp_headers, found, ctype, time.perf_counter() - started)

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with suppress(asyncio.CancelledError):
                await self._reader
        await self._stack.aclose()
