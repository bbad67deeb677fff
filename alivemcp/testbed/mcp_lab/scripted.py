"""Scripted answers, for the hostile-server tests: ``POST /_script`` with the raw answers
(any bytes) for some methods returns a path that answers those methods with exactly them, and
every other method as /json does (see ``alivemcp.testbed.mcp_servers.script_lab``).

A script with an ``endpoint`` answer (or any answer marked ``legacy``) is a legacy HTTP+SSE
server whose answers are raw SSE events on its GET stream."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from typing import Any

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import result_for
from alivemcp.testbed.mcp_lab.state import answer_fast, json_reply, lab_state, read_message

__all__ = ["add_script", "scripted", "scripted_legacy", "scripted_legacy_post"]


async def add_script(request: web.Request) -> web.StreamResponse:
    """POST /_script: store the answers; reply with the path that gives them."""
    spec = json.loads(await request.read())
    token = secrets.token_hex(6)
    lab_state(request).scripts[token] = {
        method: {
            "status": int(answer.get("status", 200)),
            "content_type": answer.get("content_type", "application/json"),
            "body": base64.b64decode(answer["body"]),
            "headers": answer.get("headers", {}),
        }
        for method, answer in spec.items()
    }
    legacy = "endpoint" in spec or any("legacy" in a for a in spec.values())
    return json_reply({"path": f"/scripted-legacy/{token}" if legacy else f"/scripted/{token}"})


def _scripted_answer(script: dict[str, Any], message: dict[str, Any]) -> bytes | None:
    """The script's body for ``message``'s method, its ``{ID}`` made the message's id."""
    answer = script.get(str(message.get("method")))
    if answer is None:
        return None
    body: bytes = answer["body"]
    return body.replace(b"{ID}", json.dumps(message.get("id")).encode())


async def scripted(request: web.Request) -> web.StreamResponse:
    """/scripted/TOKEN: streamable HTTP answering with the script."""
    script = lab_state(request).scripts.get(request.match_info["token"])
    if script is None:
        return web.Response(status=404)
    if request.method != "POST":
        return web.Response(status=405)
    message = await read_message(request) or {}
    body = _scripted_answer(script, message)
    if body is None:
        return await answer_fast(message)
    answer = script[str(message.get("method"))]
    return web.Response(
        body=body,
        status=answer["status"],
        headers={"Content-Type": answer["content_type"], **answer["headers"]},
    )


async def scripted_legacy(request: web.Request) -> web.StreamResponse:
    """GET /scripted-legacy/TOKEN: the legacy event stream, its first event the script's
    ``endpoint`` (or one naming /scripted-legacy/TOKEN/messages)."""
    state = lab_state(request)
    token = request.match_info["token"]
    script = state.scripts.get(token)
    if script is None or request.method != "GET":
        return web.Response(status=404 if script is None else 405)
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    state.legacy_queues[token] = queue
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    endpoint = script.get("endpoint")
    await response.write(
        endpoint["body"]
        if endpoint
        else f"event: endpoint\ndata: /scripted-legacy/{token}/messages\n\n".encode()
    )
    try:
        while True:
            await response.write(await queue.get())
    finally:
        state.legacy_queues.pop(token, None)


async def scripted_legacy_post(request: web.Request) -> web.StreamResponse:
    """POST /scripted-legacy/TOKEN/messages: the script's answer (else a correct one) goes on
    the stream."""
    state = lab_state(request)
    token = request.match_info["token"]
    queue, script = state.legacy_queues.get(token), state.scripts.get(token)
    if queue is None or script is None:
        return web.Response(status=404)
    message = await read_message(request) or {}
    if "id" in message and "method" in message:
        body = _scripted_answer(script, message)
        if body is None:
            body = f"event: message\ndata: {json.dumps(result_for(message))}\n\n".encode()
        queue.put_nowait(body)
    return web.Response(status=202, text="Accepted")
