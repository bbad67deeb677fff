"""Demo part: local MCP servers for the ``mcp_endpoint`` checks of ``config/demo.yaml``.

Starts the official Python SDK server (stateful streamable HTTP) and the lab server (for its
legacy HTTP+SSE endpoint), and publishes ``DEMO_MCP_URL``, ``DEMO_MCP_LEGACY_URL`` and the lab's
base URL, ``DEMO_MCP_LAB_URL`` (the demo's local registry lists some of its other paths).
"""

from __future__ import annotations

import asyncio

from alivemcp.testbed.mcp_servers import start_server
from alivemcp.testbed.stack import DemoStack


async def start(stack: DemoStack) -> None:
    sdk = await asyncio.to_thread(start_server, "sdk-stateful")
    stack.add_cleanup(sdk.stop)
    lab = await asyncio.to_thread(start_server, "lab")
    stack.add_cleanup(lab.stop)
    stack.set_env("DEMO_MCP_URL", sdk.url)
    stack.set_env("DEMO_MCP_LEGACY_URL", lab.base + "/legacy")
    stack.set_env("DEMO_MCP_LAB_URL", lab.base)
    stack.note(f"MCP: Python SDK server at {sdk.url}; legacy HTTP+SSE server at {lab.base}/legacy")
