"""Demo part: local MCP servers for the ``mcp_endpoint`` checks of ``config/demo.yaml``.

Starts the official Python SDK server (stateful streamable HTTP) and the lab server (for its
legacy HTTP+SSE endpoint, and a server whose tool surface changes), and publishes
``DEMO_MCP_URL``, ``DEMO_MCP_LEGACY_URL``, the lab's base URL, ``DEMO_MCP_LAB_URL`` (the demo's
local registry lists some of its other paths), and ``DEMO_MCP_CHANGING_URL``: a server whose
``echo`` tool gets a poisoned description ``DEMO_MCP_SURFACE_CHANGE_SECONDS`` (default 180)
after it is first asked, so that a check pinning its tool surface shows a change on the status
page (and alerts) a few minutes into the demo.
"""

from __future__ import annotations

import asyncio
import os

from alivemcp.testbed.mcp_servers import start_server
from alivemcp.testbed.stack import DemoStack

#: Seconds after its first request the changing server's tool description changes.
SURFACE_CHANGE_SECONDS = 180.0


def surface_change_seconds() -> float:
    """``DEMO_MCP_SURFACE_CHANGE_SECONDS`` from the environment (a test makes it short), else
    :data:`SURFACE_CHANGE_SECONDS`."""
    raw = os.environ.get("DEMO_MCP_SURFACE_CHANGE_SECONDS", "")
    try:
        seconds = float(raw) if raw else SURFACE_CHANGE_SECONDS
    except ValueError:
        seconds = SURFACE_CHANGE_SECONDS
    return max(0.0, seconds)


async def start(stack: DemoStack) -> None:
    sdk = await asyncio.to_thread(start_server, "sdk-stateful")
    stack.add_cleanup(sdk.stop)
    lab = await asyncio.to_thread(start_server, "lab")
    stack.add_cleanup(lab.stop)
    change_after = surface_change_seconds()
    stack.set_env("DEMO_MCP_URL", sdk.url)
    stack.set_env("DEMO_MCP_LEGACY_URL", lab.base + "/legacy")
    stack.set_env("DEMO_MCP_LAB_URL", lab.base)
    stack.set_env("DEMO_MCP_CHANGING_URL", f"{lab.base}/surface/later/{change_after:g}")
    stack.note(f"MCP: Python SDK server at {sdk.url}; legacy HTTP+SSE server at {lab.base}/legacy")
    stack.note(
        f"MCP: {lab.base}/surface/later/{change_after:g} poisons its echo tool's description "
        f"{change_after:g}s after its first check (a tool-surface change to approve or not)"
    )
