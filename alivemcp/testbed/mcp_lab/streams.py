"""2025-11-25's stream features, from the server's side: /resume ends each response stream
early (twice) after an event with an id, to be resumed with GET and Last-Event-ID;
/ping-first pings the client on each response stream before answering."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import KNOWN, RESUME_RETRY_MS, result_for
from alivemcp.testbed.mcp_lab.state import lab_state, open_session, read_message

__all__ = ["ping_first", "resume"]


def _resume_problem(request: web.Request, stream: dict[str, Any]) -> str | None:
    """Why the resuming GET for ``stream`` is refused; None when it is not."""
    if "text/event-stream" not in request.headers.get("Accept", ""):
        return "Accept lacks text/event-stream"
    if request.headers.get("Mcp-Session-Id") != stream["session"]:
        return "wrong or missing Mcp-Session-Id"
    if (
        stream["method"] != "initialize"
        and request.headers.get("MCP-Protocol-Version") not in KNOWN
    ):
        return "missing MCP-Protocol-Version"
    if time.monotonic() - stream["closed_at"] < RESUME_RETRY_MS / 1000 * 0.9:
        return "resumed before the retry delay"
    return None


async def resume(request: web.Request) -> web.StreamResponse:
    """/resume: stateful SSE whose response streams end early, twice, before the response."""
    lab = lab_state(request)
    sessions, resumable = lab.sessions, lab.resumable
    session = request.headers.get("Mcp-Session-Id")
    if request.method == "DELETE":
        sessions.discard(session or "")
        return web.Response(status=200)
    if request.method == "GET":
        stream, _, stage = request.headers.get("Last-Event-ID", "").rpartition("-")
        pending = resumable.get(stream)
        if pending is None or str(pending["stage"]) != stage:
            return web.Response(status=404, text="unknown Last-Event-ID")
        problem = _resume_problem(request, pending)
        if problem is not None:
            lab.note(f"resume refused: {problem}")
            return web.Response(status=429 if "retry" in problem else 400, text=problem)
        pending["stage"] += 1
        pending["closed_at"] = time.monotonic()
        if pending["stage"] == 1:  # a notification, then the stream ends again
            body = (
                f"id: {stream}-1\ndata: "
                '{"jsonrpc":"2.0","method":'
                '"notifications/message","params":{"level":"info","data":"working"}}'
                "\n\n"
            )
        else:
            body = f"id: {stream}-2\ndata: {pending['reply']}\n\n"
            resumable.pop(stream)
        return web.Response(body=body.encode(), content_type="text/event-stream")
    message = await read_message(request)
    if message is None:
        return web.Response(status=400)
    answer, headers, session = open_session(sessions, session, message)
    if answer is not None:
        return answer
    stream = secrets.token_hex(6)
    resumable[stream] = {
        "session": session,
        "method": message.get("method"),
        "stage": 0,
        "reply": json.dumps(result_for(message)),
        "closed_at": time.monotonic(),
    }
    body = f"id: {stream}-0\nretry: {RESUME_RETRY_MS}\ndata: \n\n"
    return web.Response(body=body.encode(), content_type="text/event-stream", headers=headers)


async def ping_first(request: web.Request) -> web.StreamResponse:
    """/ping-first: stateful SSE that answers only after the client answered its ping."""
    lab = lab_state(request)
    sessions, pongs = lab.sessions, lab.pongs
    session = request.headers.get("Mcp-Session-Id")
    if request.method == "DELETE":
        sessions.discard(session or "")
        return web.Response(status=200)
    message = await read_message(request)
    if message is None:
        return web.Response(status=400)
    if "method" not in message:  # the client's answer to our ping
        waiter = pongs.get(str(message.get("id")))
        if waiter is None or message.get("result") != {} or (session not in sessions):
            return web.Response(status=400, text="unexpected answer")
        waiter.set()
        return web.Response(status=202)
    answer, headers, session = open_session(sessions, session, message)
    if answer is not None:
        return answer
    ping_id = "srv-ping-" + secrets.token_hex(4)
    pongs[ping_id] = asyncio.Event()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
    await response.prepare(request)
    ping = json.dumps({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
    await response.write(f"event: message\ndata: {ping}\n\n".encode())
    try:
        await asyncio.wait_for(pongs[ping_id].wait(), 5)
    except TimeoutError:
        return response  # no answer to our ping: end the stream without a response
    finally:
        pongs.pop(ping_id, None)
    lab.note("pong received")
    reply = json.dumps(result_for(message))
    await response.write(f"event: message\ndata: {reply}\n\n".encode())
    return response
