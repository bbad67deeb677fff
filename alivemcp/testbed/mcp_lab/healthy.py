"""Correct servers: fast (the benchmark's targets), slow, delayed, and one whose tool list
drifts between calls."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import LAB_TOOLS, result_for
from alivemcp.testbed.mcp_lab.state import (
    answer_fast,
    json_reply,
    lab_state,
    open_session,
    read_message,
)

__all__ = ["delayed", "drifting", "fast_json", "fast_sse", "slow"]


async def fast_json(request: web.Request) -> web.StreamResponse:
    """/json: stateless streamable HTTP answering in JSON."""
    if request.method == "DELETE":
        return web.Response(status=405)
    message = await read_message(request)
    if message is None:
        return json_reply(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
            400,
        )
    if "id" not in message:
        return web.Response(status=202)
    return json_reply(result_for(message))


async def fast_sse(request: web.Request) -> web.StreamResponse:
    """/sse (and /redir/): stateful streamable HTTP answering in SSE, with a priming event and
    a notification before each response."""
    sessions = lab_state(request).sessions
    session = request.headers.get("Mcp-Session-Id")
    if request.method == "DELETE":
        sessions.discard(session or "")
        return web.Response(status=200)
    message = await read_message(request)
    if message is None:
        return web.Response(status=400)
    answer, headers, session = open_session(sessions, session, message)
    if answer is not None:
        return answer
    reply = json.dumps(result_for(message))
    body = (
        "id: 0\ndata: \n\n"
        'event: message\nid: 1\ndata: {"jsonrpc":"2.0","method":"notifications/message",'
        '"params":{"level":"info","data":"hello"}}\n\n'
        f"event: message\nid: 2\ndata: {reply}\n\n"
    )
    return web.Response(body=body.encode(), content_type="text/event-stream", headers=headers)


async def slow(request: web.Request) -> web.StreamResponse:
    """/slow: /json, 0.6 s per request."""
    await asyncio.sleep(0.6)
    return await fast_json(request)


async def delayed(request: web.Request) -> web.StreamResponse:
    """/delayed/MS/json and /delayed/MS/sse: /json or /sse after MS milliseconds."""
    try:
        milliseconds = int(request.match_info["ms"])
    except ValueError:
        return web.Response(status=404)
    if not 0 <= milliseconds <= 5000:
        return web.Response(status=404)
    await asyncio.sleep(milliseconds / 1000)
    return await (fast_sse if request.match_info["shape"] == "sse" else fast_json)(request)


async def drifting(request: web.Request) -> web.StreamResponse:
    """/drift: stateless JSON whose tools/list gains and loses a tool on alternate calls."""
    state = lab_state(request)
    message = await read_message(request) or {}
    if request.method != "POST":
        return web.Response(status=405)
    if message.get("method") != "tools/list":
        return await answer_fast(message)
    state.drift_extra = not state.drift_extra
    tools = LAB_TOOLS + (
        [{"name": "deploy", "inputSchema": {"type": "object"}}] if state.drift_extra else []
    )
    return json_reply({"jsonrpc": "2.0", "id": message.get("id"), "result": {"tools": tools}})
