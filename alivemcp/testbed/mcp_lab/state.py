"""What the lab's servers remember between requests, and the helpers every handler uses.

One :class:`LabState` per app, kept on it under :data:`LAB_STATE`: the servers share it (a
session started on ``/sse`` is known on ``/expire``, the legacy streams and the scripted legacy
streams share their queues), as they did when they were closures over the same variables.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from alivemcp.testbed.mcp_lab.protocol import result_for

__all__ = ["LAB_STATE", "LabState", "answer_fast", "json_reply", "lab_state", "read_message"]


@dataclass
class LabState:
    """Everything the lab's servers remember; one per app, shared by all its paths."""

    #: Live sessions of the stateful servers (``Mcp-Session-Id`` values).
    sessions: set[str] = field(default_factory=set)
    #: /expire: whether the next tools/list keeps its session (it alternates).
    expiry_next: bool = True
    #: /drift: whether the last tools/list offered the extra tool (it alternates).
    drift_extra: bool = False
    #: Requests seen per "METHOD /path" (and a few events): what a client actually sent.
    seen: dict[str, int] = field(default_factory=dict)
    #: Open legacy GET streams (and scripted legacy ones), by session id or script token.
    legacy_queues: dict[str, asyncio.Queue[bytes]] = field(default_factory=dict)
    #: Legacy sessions (/legacy-ping) whose server pings the client before each answer.
    legacy_pinging: set[str] = field(default_factory=set)
    #: Tasks that wait for a ping's answer, kept here so they are not collected mid-wait.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    #: The server's pings awaiting the client's answer, by JSON-RPC id.
    pongs: dict[str, asyncio.Event] = field(default_factory=dict)
    #: /resume: response streams that ended early, by stream id.
    resumable: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Scripted answers (POST /_script), by token.
    scripts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, key: str) -> None:
        """Count one more ``key`` in :attr:`seen`."""
        self.seen[key] = self.seen.get(key, 0) + 1


LAB_STATE = web.AppKey("lab_state", LabState)


def lab_state(request: web.Request) -> LabState:
    return request.app[LAB_STATE]


def json_reply(
    payload: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(payload).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def read_message(request: web.Request) -> dict[str, Any] | None:
    """The request's JSON-RPC message; None when the body is not a JSON object."""
    try:
        message = json.loads(await request.read())
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


async def answer_fast(message: dict[str, Any]) -> web.StreamResponse:
    """What /json answers ``message`` with (202 to a notification)."""
    if "id" not in message:
        return web.Response(status=202)
    return json_reply(result_for(message))


def open_session(
    sessions: set[str], session: str | None, message: dict[str, Any]
) -> tuple[web.Response | None, dict[str, str], str | None]:
    """A stateful server's session rule for one message: ``initialize`` opens a session (its
    id in the headers to send), any other message needs a known one (else 404), and a
    notification is only acknowledged (202). Returns the answer to give at once, if any, the
    headers for the reply and the message's session (a new one for ``initialize``)."""
    headers: dict[str, str] = {}
    if message.get("method") == "initialize":
        session = secrets.token_hex(8)
        sessions.add(session)
        headers["Mcp-Session-Id"] = session
    elif session not in sessions:
        return web.Response(status=404), headers, session
    if "id" not in message:
        return web.Response(status=202), headers, session
    return None, headers, session
