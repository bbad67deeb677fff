"""MCP over HTTP, one request at a time: the streamable HTTP transport here, the legacy
HTTP+SSE one in :mod:`probes.mcp._legacy` (both importable from this module).

Every failure below the MCP layer becomes a :class:`WireError` carrying a sentence an on-call
engineer can act on ("cannot connect to 127.0.0.1:8080: connection refused", "no complete
response within 5s", "connection closed mid-response"), so the probe never shows a traceback.
JSON-RPC itself (encoding, strict decoding, matching a response to its request) is
:mod:`probes.mcp._jsonrpc`; what both transports share is :mod:`probes.mcp._transport`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from alivemcp.plumbing.http import (
    ClientConfigError,
    ConnectionClosed,
    HttpError,
    HttpResponse,
    ProbeSession,
    RequestTimeout,
    read_capped,
)
from probes.mcp._jsonrpc import (
    MAX_SERVER_REQUESTS,
    NotMcp,
    answer_to_server,
    encode,
    is_request_id,
    json_kind,
    loads,
    message_of,
    response_to,
    short,
)
from probes.mcp._legacy import LegacySseChannel
from probes.mcp._transport import (
    ACCEPT_BOTH,
    ERROR_BODY_LIMIT,
    HEADER_SAFE,
    Reply,
    WireError,
    describe,
    http_failures,
    same_origin,
)
from probes.mcp.sse import SseParser

__all__ = [
    "ACCEPT_BOTH",
    "LegacySseChannel",
    "NotMcp",
    "Reply",
    "WireError",
    "encode",
    "is_request_id",
    "json_kind",
    "post",
    "same_origin",
    "send_delete",
]

_JSON_TYPES = ("application/json",)
#: How long to wait for an SSE response stream to end after the response event.
_STREAM_END_GRACE = 0.05
#: Resumptions (GET with Last-Event-ID) allowed for one request's event stream.
MAX_RESUMPTIONS = 5
#: The longest wait before resuming a stream, whatever ``retry`` the server asked for (the
#: request's deadline may be shorter still).
MAX_RETRY_SECONDS = 5.0


class _Exchange:
    """One POSTed request whose answer is an event stream: it reads the stream, answers the
    server's own requests on it (``ping``), and resumes it when the server closes it early.

    MCP 2025-11-25 lets a server close a request's event stream at any point after an event
    that carries an ``id``; the client then GETs the endpoint with ``Last-Event-ID`` (after the
    ``retry`` delay it was given) and the stream continues there.
    """

    def __init__(
        self,
        session: ProbeSession,
        url: str,
        headers: Mapping[str, str],
        request_id: int,
        deadline: float,
        session_id: str | None,
    ) -> None:
        self.session = session
        self.url = url
        self.headers = headers
        self.request_id = request_id
        self.deadline = deadline
        self.session_id = session_id
        self.parser = SseParser()
        self.resumptions = 0
        self.answered = 0

    def _remaining(self) -> float:
        return self.deadline - asyncio.get_running_loop().time()

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = dict(self.headers)
        if self.session_id and not any(k.lower() == "mcp-session-id" for k in headers):
            headers["Mcp-Session-Id"] = self.session_id
        headers.update(extra)
        return headers

    async def response(self, first: HttpResponse) -> dict[str, Any]:
        found = await self._scan(first)
        while found is None:
            found = await self._resume()
        return found

    async def _scan(self, response: HttpResponse) -> dict[str, Any] | None:
        """Read one stream until the response (returned) or its end (None, resumable)."""
        found: dict[str, Any] | None = None
        feed = self.parser.feed
        what = "an SSE event's data"
        try:
            while found is None and (chunk := await response.next_piece()):
                for event in feed(chunk):
                    if not event.data or event.event != "message":
                        continue  # the priming event, or some other event type
                    message = message_of(loads(event.data, what), what)
                    if "method" in message and "id" in message:
                        await self._answer(message)
                        continue
                    found = response_to(message, self.request_id, what)
                    if found is not None:
                        break
        except ConnectionClosed:
            # A stream cut mid-way is resumable like a clean end, once an id was given.
            if self.parser.last_event_id is None:
                raise
        if found is None:
            return None
        # Servers close the stream right after the response: wait a moment for its end so
        # the connection can carry the next request instead of opening a new one. A stream
        # that stays open is simply dropped (the connection is then closed).
        response.deadline = min(
            response.deadline, asyncio.get_running_loop().time() + _STREAM_END_GRACE
        )
        with suppress(HttpError):
            while await response.next_piece():
                pass
        return found

    async def _resume(self) -> dict[str, Any] | None:
        ended = f"the event stream ended without a response to request {self.request_id}"
        last_id = self.parser.last_event_id
        if last_id is None:
            raise NotMcp(ended)
        if self.resumptions >= MAX_RESUMPTIONS:
            raise NotMcp(f"{ended} (resumed {self.resumptions} times)")
        if not HEADER_SAFE.fullmatch(last_id):
            raise NotMcp(
                f"{ended}, and its last event id {short(last_id, 60)!r} cannot be sent "
                "back as Last-Event-ID (not printable ASCII, or over 1024 characters)"
            )
        retry = self.parser.retry_ms
        asked = 0.0 if retry is None else retry / 1000.0
        delay = min(asked, MAX_RETRY_SECONDS)  # the server streams on once it has the answer
        if delay >= self._remaining():
            raise WireError(
                f"{ended}; the server asked to resume it after {asked:g}s, later "
                "than the request's timeout allows"
            )
        if delay:
            await asyncio.sleep(delay)
        self.resumptions += 1
        self.parser.restart()
        headers = self._headers(**{"Accept": "text/event-stream", "Last-Event-ID": last_id})
        headers.pop("Content-Type", None)
        async with self.session.request(
            "GET", self.url, headers=headers, timeout=max(0.05, self._remaining())
        ) as resp:
            if resp.status != 200 or resp.content_type != "text/event-stream":
                raise NotMcp(
                    f"{ended} and resuming it (GET with Last-Event-ID) got HTTP "
                    f"{resp.status} {resp.content_type}".rstrip()
                )
            return await self._scan(resp)

    async def _answer(self, request: dict[str, Any]) -> None:
        """Answer a server-to-client request: ``ping`` with ``{}`` (the spec requires it),
        anything else with "method not found" (the probe offers no client capabilities)."""
        method, answer = answer_to_server(request)
        self.answered += 1
        if self.answered > MAX_SERVER_REQUESTS:
            raise NotMcp(
                f"the server sent more than {MAX_SERVER_REQUESTS} requests of its own "
                f"before responding to request {self.request_id}"
            )
        try:
            reply = await post(
                self.session,
                self.url,
                answer,
                self._headers(),
                timeout=max(0.05, self._remaining()),
            )
        except (WireError, NotMcp) as exc:
            raise NotMcp(f"answering the server's {short(method, 60)!r} request: {exc}") from exc
        if not 200 <= reply.status < 300:
            raise NotMcp(
                f"answering the server's {short(method, 60)!r} request got HTTP {reply.status}"
            )


async def post(
    session: ProbeSession,
    url: str,
    message: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    timeout: float,
) -> Reply:
    """POST one JSON-RPC message; for a request, find its response (JSON or SSE)."""
    request_id = message.get("id") if "method" in message else None  # answers await nothing
    started = time.perf_counter()
    deadline = asyncio.get_running_loop().time() + timeout
    resumptions = 0
    with http_failures(f"no complete response within {timeout:.3g}s"):
        async with session.request(
            "POST", url, headers=headers, body=encode(message), timeout=timeout
        ) as resp:
            status = resp.status
            ctype = resp.content_type
            found: dict[str, Any] | None = None
            if 200 <= status < 300 and isinstance(request_id, int) and status != 202:
                if ctype == "text/event-stream":
                    exchange = _Exchange(
                        session, url, headers, request_id, deadline, _session_id(resp.headers)
                    )
                    try:
                        found = await exchange.response(resp)
                    finally:
                        resumptions = exchange.resumptions
                elif ctype in _JSON_TYPES or ctype.endswith("+json"):
                    body = await read_capped(resp, session.max_body_bytes)
                    what = "the response body"
                    payload = message_of(loads(body, what), what)
                    found = response_to(payload, request_id, what)
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
                await read_capped(resp, ERROR_BODY_LIMIT)
            return Reply(
                status, resp.headers, found, ctype, time.perf_counter() - started, resumptions
            )


def _session_id(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Mcp-Session-Id")
    return value if value and HEADER_SAFE.fullmatch(value) else None


async def _error_body(resp: HttpResponse) -> dict[str, Any] | None:
    """A JSON-RPC error object from an error response, if it carries one."""
    try:
        body = await read_capped(resp, ERROR_BODY_LIMIT)
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
            await read_capped(resp, ERROR_BODY_LIMIT)
            return resp.status
    except RequestTimeout:
        return f"no response within {timeout:.3g}s"
    except ClientConfigError:
        raise
    except HttpError as exc:
        return describe(exc)
