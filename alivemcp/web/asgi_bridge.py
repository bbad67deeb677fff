"""An ASGI application answering behind one aiohttp route.

The official MCP SDK serves streamable HTTP as ASGI (Starlette); the daemon's server is
aiohttp. Rather than a second listening socket (a second port to open, secure and document;
the TLS and authentication the aiohttp application applies would not cover it) or a reverse
proxy hop inside the process, one aiohttp handler hands each request to the ASGI application
in the same event loop:

* the request becomes an ASGI ``http`` scope (method, path, query, lower-cased raw headers,
  scheme, client and server addresses);
* ``receive`` gives the body as it arrives, a chunk at a time, then ``http.disconnect`` once
  the answer is finished or the client is gone (an application that watches for the client
  leaving, as an SSE answer does, sees it);
* ``send`` turns ``http.response.start`` and the body into an aiohttp response. A start with
  a ``Content-Length`` waits for its body: sent in one message, it becomes a plain
  :class:`aiohttp.web.Response`. A start without one is a stream (an event stream): its
  headers go out at once, as any ASGI server sends them, and each body message is written as
  it comes, each write waiting for the socket.

Hop-by-hop headers (``Connection``, ``Keep-Alive``, ``Transfer-Encoding``) are aiohttp's to
write and are dropped from what the application sends. The scope says ASGI spec 2.4: a write
to a client that left raises ``OSError`` (aiohttp's ``ConnectionResetError``) instead of
passing silently, which is how Starlette notices.

Only HTTP; no WebSocket or lifespan messages (the caller runs the application's own lifespan,
as :mod:`alivemcp.web.mcp_face` does for the SDK's session manager).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog
from aiohttp import web
from multidict import CIMultiDict

__all__ = ["AsgiApp", "AsgiBridge", "Message", "Receive", "Scope", "Send"]

log = structlog.get_logger("alivemcp.web.asgi_bridge")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Bytes of request body handed to the application per ``http.request`` message.
BODY_CHUNK = 64 * 1024
#: How often a ``receive`` waiting for the end checks whether the client went away (aiohttp
#: does not cancel a handler whose client left; only an SSE answer ever waits this way).
DISCONNECT_POLL_SECONDS = 0.5
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


def request_scope(request: web.Request) -> Scope:
    """The ASGI ``http`` scope of ``request``."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    sock = transport.get_extra_info("sockname") if transport is not None else None
    # Both raw, as ASGI wants them: aiohttp's request.path and query_string are decoded.
    raw_path, _, raw_query = request.raw_path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": raw_path.encode("latin-1", "replace"),
        "query_string": raw_query.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": _address(peer),
        "server": _address(sock),
        "state": {},
        "extensions": {},
    }


def _address(info: Any) -> tuple[str, int] | None:
    if isinstance(info, tuple | list) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def _response_headers(raw: Any) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in raw or ():
        key = bytes(name).decode("latin-1")
        if key.lower() not in _HOP_BY_HOP:
            headers.add(key, bytes(value).decode("latin-1"))
    return headers


class _Exchange:
    """One request's ``receive`` and ``send``, and the aiohttp response they build."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.finished = asyncio.Event()
        self.response: web.StreamResponse | None = None
        self._body_done = False
        self._start: Message | None = None
        self._complete = False

    async def receive(self) -> Message:
        if not self._body_done:
            content = self.request.content
            chunk = await content.read(BODY_CHUNK)
            self._body_done = not chunk or content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not self._body_done}
        # The body is all read: what is left to tell is that the exchange is over.
        while not self.finished.is_set() and not self._client_gone():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.finished.wait(), DISCONNECT_POLL_SECONDS)
        return {"type": "http.disconnect"}

    def _client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def send(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            if self._start is not None:
                raise RuntimeError("ASGI application started its response twice")
            self._start = message
            if not any(
                bytes(k).lower() == b"content-length" for k, _ in message.get("headers", ())
            ):
                await self._stream()  # a stream's headers go now: its first event may be late
            return
        if kind != "http.response.body":
            return  # nothing else is defined for http (trailers are not asked for)
        if self._start is None:
            raise RuntimeError("ASGI application sent a body before starting its response")
        if self._complete:
            raise RuntimeError("ASGI application sent a body after it ended")
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if self.response is None and not more:
            # The whole answer in one message: a plain response, sent with its length once
            # the handler returns it.
            self.response = web.Response(
                status=int(self._start["status"]),
                body=body,
                headers=_response_headers(self._start.get("headers")),
            )
            self._complete = True
            self.finished.set()
            return
        response = self.response or await self._stream()
        if self._client_gone():
            raise ConnectionResetError("the client closed the connection")
        if body:
            await response.write(body)
        if not more:
            await response.write_eof()
            self._complete = True
            self.finished.set()

    async def _stream(self) -> web.StreamResponse:
        assert self._start is not None
        self.response = web.StreamResponse(
            status=int(self._start["status"]),
            headers=_response_headers(self._start.get("headers")),
        )
        await self.response.prepare(self.request)
        return self.response

    async def finish(self) -> web.StreamResponse | None:
        """The response once the application returned: what it sent, completed (None: it
        sent nothing)."""
        self.finished.set()
        if self.response is None:
            if self._start is None:
                return None
            # Started without a body message: an empty body.
            self.response = web.Response(
                status=int(self._start["status"]),
                headers=_response_headers(self._start.get("headers")),
            )
        elif not self._complete and self.response.prepared:
            with contextlib.suppress(ConnectionError):
                await self.response.write_eof()
        return self.response


class AsgiBridge:
    """Serves ``app`` (a callable returning the ASGI application, or None: 503, for one not
    started yet or stopped) from an aiohttp route: :meth:`handle` is the route's handler."""

    def __init__(self, app: Callable[[], AsgiApp | None]) -> None:
        self._app = app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        app = self._app()
        if app is None:
            return web.json_response(
                {"error": f"{request.path} is not being served right now"}, status=503
            )
        exchange = _Exchange(request)
        try:
            await app(request_scope(request), exchange.receive, exchange.send)
        except (ConnectionError, asyncio.CancelledError):
            exchange.finished.set()
            raise
        except Exception:
            exchange.finished.set()
            log.exception("ASGI application failed", path=request.path)
            if exchange.response is None:
                return _internal_error()
        response = await exchange.finish()
        if response is None:
            log.error("ASGI application returned without a response", path=request.path)
            return _internal_error()
        return response


def _internal_error() -> web.Response:
    return web.json_response({"error": "internal error"}, status=500)
