"""MCP over HTTP, one request at a time: the streamable HTTP and legacy HTTP+SSE transports.

Every failure below the MCP layer becomes a :class:`WireError` carrying a sentence an on-call
engineer can act on ("cannot connect to 127.0.0.1:8080: connection refused", "no complete
response within 5s", "connection closed mid-response"), so the probe never shows a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from alivemcp.plumbing.http import (
    ClientConfigError,
    ConnectionClosed,
    HttpError,
    HttpResponse,
    InvalidRequest,
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
    "is_request_id",
    "json_kind",
    "post",
    "same_origin",
    "send_delete",
]

ACCEPT_BOTH = "application/json, text/event-stream"
_log = logging.getLogger("probes.mcp_endpoint")
#: Error bodies are only read for a JSON-RPC error code or a challenge: a small cap suffices.
_ERROR_BODY_LIMIT = 64 * 1024
_JSON_TYPES = ("application/json",)
#: How long to wait for an SSE response stream to end after the response event.
_STREAM_END_GRACE = 0.05
#: Resumptions (GET with Last-Event-ID) allowed for one request's event stream.
MAX_RESUMPTIONS = 5
#: The longest wait before resuming a stream, whatever ``retry`` the server asked for (the
#: request's deadline may be shorter still).
MAX_RETRY_SECONDS = 5.0
#: Requests of its own a server may send on one response stream (``ping``) before answering.
MAX_SERVER_REQUESTS = 16
#: Printable ASCII, as a header value echoed back to a server must be (session ids, event ids).
_HEADER_SAFE = re.compile(r"[\x20-\x7e]{1,1024}")


class WireError(Exception):
    """The request did not complete at the HTTP level (connect, TLS, timeout, truncation).

    A :class:`~alivemcp.plumbing.http.ClientConfigError` (the prober's own CA, certificate or
    proxy settings are unusable) is not one: it passes through, for an ``unknown`` verdict."""


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
    #: Times the response's event stream was resumed (GET with Last-Event-ID).
    resumptions: int = 0


#: The C encoder ``json.dumps`` ends up in, built directly: ``json.dumps`` with separators
#: makes a new ``JSONEncoder`` and runs its Python set-up for every message (4 per probe run).
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def encode(message: Mapping[str, Any]) -> bytes:
    """``message`` as compact JSON (what ``json.dumps(message, separators=(",", ":"))``
    gives, circular references refused the same way)."""
    if _C_ENCODER is None:  # pragma: no cover - CPython always has the C accelerator
        return _COMPACT.encode(message).encode()
    chunks = _C_ENCODER(
        {},
        _COMPACT.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )(message, 0)
    return "".join(chunks).encode()


def _describe(exc: HttpError) -> str:
    """One sentence for a client-side failure; never includes request headers."""
    if isinstance(exc, ProtocolError) and not isinstance(exc, InvalidRequest):
        return f"malformed HTTP response: {exc}"
    return str(exc)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    return parts.scheme, parts.hostname, port


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (a URL that does not even parse is another origin)."""
    try:
        return _origin(a) == _origin(b)
    except ValueError:
        return False


def json_kind(value: object) -> str:
    """What a JSON value is, for a reason ("a list", "null"...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def is_request_id(value: object) -> bool:
    """A JSON-RPC id MCP allows: a string or a number (JSON true is not the number 1)."""
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


#: A JSON ``\\uXXXX`` escape of a surrogate: only then can a decoded string hold a lone one.
#: (Most bodies have none; escaped emoji pairs do, and then the decoded value is walked, which
#: costs less than a regex that tells pairs from lone halves.)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
#: One decoder for every answer (``json.loads`` with a hook would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _lone_surrogate(value: Any) -> str | None:
    """The first string in ``value`` that is not valid Unicode (iterative: no recursion)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def _loads(data: bytes | str, what: str) -> Any:
    """Strict JSON (RFC 8259 / I-JSON): no NaN or Infinity, valid UTF-8, no lone surrogates."""
    try:
        # Network JSON is UTF-8 (RFC 8259): no guessing of UTF-16 or UTF-32.
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise NotMcp(f"{what} is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    except RecursionError as exc:
        raise NotMcp(f"{what} is JSON nested too deeply") from exc
    except ValueError as exc:  # bytes that are not UTF-8, NaN, an integer of 5,000 digits
        detail = "a number over 4300 digits" if "digits" in str(exc) else _short(exc)
        raise NotMcp(f"{what} is not valid JSON ({detail})") from exc
    pattern = _SURROGATE_ESCAPE_BYTES if isinstance(data, bytes) else _SURROGATE_ESCAPE
    if pattern.search(data):  # type: ignore[arg-type]
        bad = _lone_surrogate(value)
        if bad is not None:
            shown = bad.encode("ascii", "backslashreplace").decode("ascii")
            raise NotMcp(
                f"{what} holds a string that is not valid Unicode (a lone surrogate: "
                f"{_short(shown, 60)!r})"
            )
    return value


def _short(value: object, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _message(payload: Any, what: str) -> dict[str, Any]:
    """A decoded JSON-RPC message; a batch or a bare value is not one."""
    if isinstance(payload, list):
        raise NotMcp(
            f"{what} is a JSON array (a batch), not the single response a single request gets"
        )
    if not isinstance(payload, dict):
        raise NotMcp(f"{what} is {json_kind(payload)}, not a JSON-RPC message")
    if "method" not in payload and "result" not in payload and "error" not in payload:
        raise NotMcp(f"{what} is an object without method, result or error: not JSON-RPC")
    return payload


def _response_to(message: dict[str, Any], request_id: int, what: str) -> dict[str, Any] | None:
    """``message`` when it is the response to ``request_id``; None for any other message."""
    if "method" in message:
        return None  # a request or notification from the server
    rid = message.get("id")
    if rid is None:
        # JSON-RPC: an error about a request the server could not identify (a parse error).
        return message if "error" in message else None
    if not is_request_id(rid):
        raise NotMcp(
            f"{what} is a JSON-RPC response whose id is {json_kind(rid)} "
            f"({_short(json.dumps(rid), 60)}), not a string or number"
        )
    return message if rid == request_id and not isinstance(rid, str) else None


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
                    message = _message(_loads(event.data, what), what)
                    if "method" in message and "id" in message:
                        await self._answer(message)
                        continue
                    found = _response_to(message, self.request_id, what)
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
        if not _HEADER_SAFE.fullmatch(last_id):
            raise NotMcp(
                f"{ended}, and its last event id {_short(last_id, 60)!r} cannot be sent "
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
        method, rid = request.get("method"), request.get("id")
        if not isinstance(method, str) or not is_request_id(rid):
            raise NotMcp(
                f"the server sent a request whose method is {json_kind(method)} and "
                f"id is {json_kind(rid)}: not valid JSON-RPC"
            )
        self.answered += 1
        if self.answered > MAX_SERVER_REQUESTS:
            raise NotMcp(
                f"the server sent more than {MAX_SERVER_REQUESTS} requests of its own "
                f"before responding to request {self.request_id}"
            )
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if method == "ping":
            answer["result"] = {}
        else:
            answer["error"] = {"code": -32601, "message": f"Method not found: {method[:100]}"}
        try:
            reply = await post(
                self.session,
                self.url,
                answer,
                self._headers(),
                timeout=max(0.05, self._remaining()),
            )
        except (WireError, NotMcp) as exc:
            raise NotMcp(f"answering the server's {_short(method, 60)!r} request: {exc}") from exc
        if not 200 <= reply.status < 300:
            raise NotMcp(
                f"answering the server's {_short(method, 60)!r} request got HTTP {reply.status}"
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
    try:
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
                    payload = _message(_loads(body, what), what)
                    found = _response_to(payload, request_id, what)
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
            return Reply(
                status, resp.headers, found, ctype, time.perf_counter() - started, resumptions
            )
    except RequestTimeout as exc:
        raise WireError(f"no complete response within {timeout:.3g}s") from exc
    except ClientConfigError:
        raise  # the prober's own settings: not the server's fault
    except HttpError as exc:
        raise WireError(_describe(exc)) from exc


def _session_id(headers: Mapping[str, str]) -> str | None:
    value = headers.get("Mcp-Session-Id")
    return value if value and _HEADER_SAFE.fullmatch(value) else None


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
    except ClientConfigError:
        raise
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
        try:
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
        except (TimeoutError, RequestTimeout) as exc:
            raise WireError(f"no endpoint event within {timeout:.3g}s") from exc
        except ClientConfigError:
            raise  # the prober's own settings: not the server's fault
        except HttpError as exc:
            raise WireError(_describe(exc)) from exc
        self._reader = asyncio.create_task(self._read(stream, parser))
        self._reader.add_done_callback(self._reader_died)

    def _endpoint_url(self, raw: str) -> str:
        """The absolute URL an ``endpoint`` event names; only a same-origin one is accepted."""
        unusable = f"the endpoint event is not a usable URL: {_short(raw, 100)!r}"
        if not _HEADER_SAFE.fullmatch(raw) or " " in raw:
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
            message = _message(_loads(data, what), what)
            if "method" in message:
                if "id" in message:
                    self._answer(message)
                return
            rid = message.get("id")
            if rid is not None and not is_request_id(rid):
                raise NotMcp(
                    f"{what} is a JSON-RPC response whose id is {json_kind(rid)} "
                    f"({_short(json.dumps(rid), 60)}), not a string or number"
                )
            if isinstance(rid, int | float):
                waiter = self._waiting.pop(rid, None)  # type: ignore[arg-type]  # 1.0 is 1
                if waiter is not None and not waiter.done():
                    waiter.set_result(message)
        except NotMcp as exc:
            self._fail_all(str(exc))

    def _answer(self, request: dict[str, Any]) -> None:
        method, rid = request.get("method"), request.get("id")
        if not isinstance(method, str) or not is_request_id(rid):
            raise NotMcp(
                f"the server sent a request whose method is {json_kind(method)} and "
                f"id is {json_kind(rid)}: not valid JSON-RPC"
            )
        if self.endpoint is None:
            raise NotMcp(
                f"the server sent a {_short(method, 60)!r} request before its endpoint event"
            )
        self._answered += 1
        if self._answered > MAX_SERVER_REQUESTS:
            raise NotMcp(f"the server sent more than {MAX_SERVER_REQUESTS} requests of its own")
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if method == "ping":
            answer["result"] = {}
        else:
            answer["error"] = {"code": -32601, "message": f"Method not found: {method[:100]}"}
        task = asyncio.create_task(self._send_answer(answer, method))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _send_answer(self, answer: dict[str, Any], method: str) -> None:
        failed = f"answering the server's {_short(method, 60)!r} request"
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
            self._fail_all(_describe(exc))
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
        try:
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
                    await read_capped(resp, _ERROR_BODY_LIMIT)
                found = None
                if waiter is not None and 200 <= status < 300:
                    found = await waiter
        except (TimeoutError, RequestTimeout) as exc:
            raise WireError(f"no response on the event stream within {timeout:.3g}s") from exc
        except ClientConfigError:
            raise  # the prober's own settings: not the server's fault
        except HttpError as exc:
            raise WireError(_describe(exc)) from exc
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
