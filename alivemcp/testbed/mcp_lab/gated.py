"""What stands in a client's way: a bearer challenge, a server that speaks only 2026-07-28,
sessions that expire, and redirects (to a trailing slash, another origin, a 301, a loop)."""

from __future__ import annotations

import secrets

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import MODERN, result_for
from alivemcp.testbed.mcp_lab.state import json_reply, lab_state, read_message

__all__ = ["bearer", "expire", "modern", "redirect"]


async def bearer(request: web.Request) -> web.StreamResponse:
    """/bearer: 401 with a Bearer challenge for every request."""
    base = f"http://{request.host}"
    return web.Response(
        status=401,
        text="unauthorized",
        headers={
            "WWW-Authenticate": f'Bearer error="invalid_token", error_description="missing", '
            f'resource_metadata="{base}/.well-known/oauth-protected-resource"'
        },
    )


async def modern(request: web.Request) -> web.StreamResponse:
    """/modern: a 2026-07-28-only server (-32022 to any other version, no initialize)."""
    if request.method != "POST":
        return web.Response(status=405)
    message = await read_message(request) or {}
    version = request.headers.get("MCP-Protocol-Version")
    meta = (message.get("params") or {}).get("_meta") or {}
    if (
        version != MODERN
        or meta.get("io.modelcontextprotocol/protocolVersion") != MODERN
        or request.headers.get("Mcp-Method") != message.get("method")
    ):
        return json_reply(
            {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "error": {
                    "code": -32022,
                    "message": "Unsupported protocol version",
                    "data": {"supported": [MODERN], "requested": version},
                },
            },
            400,
        )
    if message.get("method") in ("initialize", "ping"):
        return json_reply(
            {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "error": {"code": -32601, "message": "Method not found"},
            },
            404,
        )
    return json_reply(result_for(message))


async def expire(request: web.Request) -> web.StreamResponse:
    """/expire and /expire400: stateful; every other tools/list finds its session expired."""
    # /expire answers a forgotten session with 404 (the spec), /expire400 with 400 (as the
    # npm reference server does).
    state = lab_state(request)
    sessions = state.sessions
    gone = 400 if request.path == "/expire400" else 404
    session = request.headers.get("Mcp-Session-Id")
    if request.method == "DELETE":
        return web.Response(status=404 if session not in sessions else 200)
    message = await read_message(request) or {}
    if message.get("method") == "initialize":
        session = secrets.token_hex(8)
        sessions.add(session)
        return json_reply(result_for(message), headers={"Mcp-Session-Id": session})
    if session not in sessions:
        return web.Response(status=gone)
    if message.get("method") == "tools/list":
        # Every other tools/list finds its session expired: a client that initializes
        # again gets through on its second session.
        state.expiry_next = not state.expiry_next
        if not state.expiry_next:
            sessions.discard(session)
            return web.Response(status=gone, text="session not found")
    if "id" not in message:
        return web.Response(status=202)
    return json_reply(result_for(message))


async def redirect(request: web.Request) -> web.StreamResponse:
    """/redir, /redir-foreign, /redir301 and /redir-loop/N."""
    path = request.path
    if path == "/redir":
        location = "/redir/"
    elif path == "/redir-foreign":
        location = f"http://localhost:{request.url.port}/json"
    elif path == "/redir301":
        return web.Response(status=301, headers={"Location": "/json"})
    else:
        hop = int(request.match_info.get("hop", "0"))
        location = f"/redir-loop/{hop + 1}"
    return web.Response(status=307, headers={"Location": location})
