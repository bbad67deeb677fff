"""Demo part: a local MCP registry listing a handful of the demo's own MCP servers.

Starts the registry stand-in (:mod:`alivemcp.testbed.mcp_registry`, the registry API v0.1 on
a loopback port) in the demo's own process, lists the MCP servers :mod:`demo_mcp
<alivemcp.testbed.demo_mcp>` started (so it runs after that part), publishes
``DEMO_REGISTRY_URL``, which the ``registry`` source of ``config/demo.yaml``'s ``discovery:``
section reads: the daemon finds these checks in the registry instead of in the file.

What the registry lists, and what becomes of it (:data:`DISCOVERED`, :data:`SKIPPED`): the SDK
server; the lab's stateless server with its legacy HTTP+SSE endpoint as a second remote (two
checks, the second named ``#sse``); the lab's SSE-answering server; an auth-gated server that
declares a required secret header (probed without it: its 401 with a Bearer challenge is
"auth-gated", up); and three entries that are skipped and counted, as ``GET
/api/v1/discovery`` shows: one with packages only, one whose URL has an unresolved template
variable, one deleted.
"""

from __future__ import annotations

from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from alivemcp.testbed.stack import DemoStack

__all__ = ["DISCOVERED", "NAMESPACE", "SKIPPED", "start"]

#: The demo servers' names in the registry (reverse-DNS namespace / name).
NAMESPACE = "io.alivemcp.demo"

#: Check name → the server's remote (path on the lab, or the SDK server) it probes.
DISCOVERED = {
    f"registry/{NAMESPACE}/sdk": "the Python SDK server",
    f"registry/{NAMESPACE}/lab": "the lab's /json",
    f"registry/{NAMESPACE}/lab#sse": "the lab's /legacy",
    f"registry/{NAMESPACE}/events": "the lab's /sse",
    f"registry/{NAMESPACE}/gated": "the lab's /bearer (auth-gated)",
}
#: Skip reason → how many entries the registry source leaves out for it.
SKIPPED = {"no_remote": 1, "url_template": 1, "deleted": 1}


async def start(stack: DemoStack) -> None:
    sdk_url = stack.env["DEMO_MCP_URL"]
    lab = stack.env["DEMO_MCP_LAB_URL"]
    registry = LocalRegistry()
    registry.add(
        f"{NAMESPACE}/sdk",
        version="2.0.0",
        remotes=[remote(sdk_url)],
    )
    registry.add(
        f"{NAMESPACE}/lab",
        remotes=[remote(f"{lab}/json"), remote(f"{lab}/legacy", kind="sse")],
    )
    registry.add(f"{NAMESPACE}/events", remotes=[remote(f"{lab}/sse")])
    secret = {"name": "Authorization", "isRequired": True, "isSecret": True}
    registry.add(f"{NAMESPACE}/gated", remotes=[remote(f"{lab}/bearer", headers=[secret])])
    # Skipped, and counted by reason.
    registry.add(
        f"{NAMESPACE}/local-only",
        packages=[
            {
                "registryType": "npm",
                "identifier": "@alivemcp/demo-local-only",
                "version": "1.0.0",
                "transport": {"type": "stdio"},
            }
        ],
    )
    registry.add(f"{NAMESPACE}/per-tenant", remotes=[remote(f"{lab}/json/{{tenant_id}}")])
    registry.add(f"{NAMESPACE}/retired", remotes=[remote(f"{lab}/json")], status="deleted")
    url = await registry.start()
    stack.add_cleanup(registry.stop)
    stack.set_env("DEMO_REGISTRY_URL", url)
    stack.note(
        f"MCP registry: local registry at {url}/v0.1/servers listing {len(registry.entries)} "
        f"servers; the `registry` discovery source makes {len(DISCOVERED)} checks of them "
        "(see /api/v1/discovery)"
    )
