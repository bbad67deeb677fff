"""What the lab's servers say when they behave: the protocol versions they know, their two
tools, and the JSON-RPC answer to each method.

Standard library only: the SDK servers' module (which also runs in the SDK 1.x virtualenv,
without aiohttp) takes :data:`RESUME_RETRY_MS` from here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KNOWN", "LAB_TOOLS", "MODERN", "RESUME_RETRY_MS", "result_for"]

#: The ``retry`` (milliseconds) the resumable servers ask clients to wait before resuming.
RESUME_RETRY_MS = 100

LAB_TOOLS = [
    {
        "name": "echo",
        "description": "Echo",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "add",
        "description": "Add",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        },
    },
]
MODERN = "2026-07-28"
KNOWN = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def result_for(message: dict[str, Any], *, version: str | None = None) -> dict[str, Any]:
    """A well-behaved server's JSON-RPC response to ``message`` (``version``: the protocol
    version to answer initialize with, whatever the client offered)."""
    method = message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        offered = params.get("protocolVersion")
        result: Any = {
            "protocolVersion": version or (offered if offered in KNOWN else KNOWN[-1]),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "alivemcp-lab", "version": "0.9"},
        }
    elif method == "server/discover":
        result = {
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "alivemcp-lab-modern", "version": "2.0"},
        }
    elif method == "tools/list":
        result = {"tools": LAB_TOOLS}
    elif method == "tools/call":
        args = params.get("arguments") or {}
        if params.get("name") == "echo":
            result = {"content": [{"type": "text", "text": str(args.get("text", ""))}]}
        else:
            total = int(args.get("a", 0)) + int(args.get("b", 0))
            result = {
                "content": [{"type": "text", "text": str(total)}],
                "structuredContent": {"sum": total},
            }
    elif method == "ping":
        result = {}
    else:
        return {
            "jsonrpc": "2.0",
            "id": message.get("id"),
            "error": {"code": -32601, "message": "Method not found"},
        }
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}
