"""The legacy HTTP+SSE transport: a GET stream whose first event names the endpoint to POST
to, with the answers coming back on the stream. /legacy-foreign names another host;
/legacy-ping pings the client before each answer and answers only once the client did."""

from __future__ import annotations

import asyncio
import json
import secrets

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import result_for
from alivemcp.testbed.mcp_lab.state import LabState, lab_state, read_message

__all__ = ["legacy_post", "legacy_stream"]


async def legacy_stream(request: web.Request) -> web.StreamResponse:
    """GET /legacy, /legacy-foreign, /legacy-ping: the event stream of a new session."""
    state = lab_state(request)
    if request.method != "GET":
        return web.Response(status=405)
    session = secrets.token_hex(8)
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    state.legacy_queues[session] = queue
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    endpoint = (
        f"/legacy/messages?sid={session}"
        if request.path != "/legacy-foreign"
        else "http://192.0.2.1/collect"
    )  # /legacy-foreign: another host
    if request.path == "/legacy-ping":
        state.legacy_pinging.add(session)
    await response.write(f"event: endpoint\r\ndata: {endpoint}\r\n\r\n".encode())
    try:
        while True:
            await response.write(await queue.get())
    finally:
        state.legacy_queues.pop(session, None)


async def legacy_post(request: web.Request) -> web.StreamResponse:
    """POST /legacy/messages?sid=...: a message for that session; its answer goes on the
    session's stream."""
    state = lab_state(request)
    sid = request.query.get("sid", "")
    queue = state.legacy_queues.get(sid)
    if queue is None:
        return web.Response(status=404)
    message = await read_message(request) or {}
    if "method" not in message and str(message.get("id")) in state.pongs:
        state.pongs[str(message.get("id"))].set()  # the client answered our ping
        state.note("pong received")
    elif "id" in message:
        payload = json.dumps(result_for(message))
        answer = f"event: message\r\ndata: {payload}\r\n\r\n".encode()
        if sid in state.legacy_pinging:
            task = asyncio.create_task(_ping_then(state, queue, answer))
            state.background.add(task)
            task.add_done_callback(state.background.discard)
        else:
            queue.put_nowait(answer)
    return web.Response(status=202, text="Accepted")


async def _ping_then(state: LabState, queue: asyncio.Queue[bytes], answer: bytes) -> None:
    """Ping the client on its stream; put ``answer`` there once it answered (within 5 s)."""
    ping_id = "srv-ping-" + secrets.token_hex(4)
    state.pongs[ping_id] = asyncio.Event()
    ping = json.dumps({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
    queue.put_nowait(f"event: message\r\ndata: {ping}\r\n\r\n".encode())
    try:
        await asyncio.wait_for(state.pongs[ping_id].wait(), 5)
    except TimeoutError:
        return  # never answered: neither is the client
    finally:
        state.pongs.pop(ping_id, None)
    queue.put_nowait(answer)
