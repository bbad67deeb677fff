"""Servers that hang, fail or answer with garbage: each breaks one thing a client relies on."""

from __future__ import annotations

import asyncio

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import result_for
from alivemcp.testbed.mcp_lab.state import json_reply, read_message

__all__ = [
    "badjson",
    "badtools",
    "counteroffer",
    "error500",
    "hang",
    "html",
    "huge",
    "initerror",
    "midclose",
    "noinitialized",
]


async def hang(request: web.Request) -> web.StreamResponse:
    """/hang: sends headers, then never sends the body."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    await asyncio.sleep(3600)
    return response


async def error500(request: web.Request) -> web.StreamResponse:
    return web.Response(status=500, text="internal error")


async def html(request: web.Request) -> web.StreamResponse:
    """/html: a web page, not MCP."""
    return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")


async def badjson(request: web.Request) -> web.StreamResponse:
    """/badjson: 200 application/json with a body that is not JSON (cut short)."""
    return web.Response(
        body=b'{"jsonrpc": "2.0", "id": 1, "result": {',
        status=200,
        content_type="application/json",
    )


async def initerror(request: web.Request) -> web.StreamResponse:
    """/initerror: a JSON-RPC error to everything, initialize included."""
    message = await read_message(request) or {}
    return json_reply(
        {
            "jsonrpc": "2.0",
            "id": message.get("id"),
            "error": {"code": -32603, "message": "database unavailable"},
        }
    )


async def counteroffer(request: web.Request) -> web.StreamResponse:
    """/counteroffer: initialize answers with a protocol version nobody knows."""
    message = await read_message(request) or {}
    if "id" not in message:
        return web.Response(status=202)
    return json_reply(result_for(message, version="2099-01-01"))


async def midclose(request: web.Request) -> web.StreamResponse:
    """/midclose: starts an SSE response and closes the connection inside the first event."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'event: message\ndata: {"jsonrpc":"2.0","id":1,"res')
    assert request.transport is not None
    request.transport.close()
    return response


async def huge(request: web.Request) -> web.StreamResponse:
    """/huge: a correct answer padded to 12 MiB."""
    message = await read_message(request) or {}
    reply = result_for(message)
    reply["result"]["padding"] = "x" * (12 * 1024 * 1024)
    return json_reply(reply)


async def badtools(request: web.Request) -> web.StreamResponse:
    """/badtools: initialize fine, but the tools/list result is not a list."""
    message = await read_message(request) or {}
    if request.method == "DELETE" or "id" not in message:
        return web.Response(status=202)
    if message.get("method") == "tools/list":
        return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": "none"}})
    return json_reply(result_for(message))


async def noinitialized(request: web.Request) -> web.StreamResponse:
    """/noinitialized: initialize fine, notifications (notifications/initialized) get 500."""
    message = await read_message(request) or {}
    if request.method == "DELETE":
        return web.Response(status=204)
    if "id" not in message:
        return web.Response(status=500, text="boom")
    return json_reply(result_for(message))
