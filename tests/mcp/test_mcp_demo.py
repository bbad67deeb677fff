"""The demo's MCP part starts its servers and the demo config's MCP checks are up."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed import demo_mcp
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import REPO


async def test_demo_mcp_checks_are_up(tmp_path: Path) -> None:
    stack = DemoStack(workdir=tmp_path, moto=MotoServer())  # this part does not use moto
    plumbing = Plumbing()
    try:
        await demo_mcp.start(stack)
        doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
        # The demo's MCP servers (the daemon's own face, probed by the demo too, needs the
        # daemon: tests/web/test_mcp_face_clients.py runs that check against one).
        checks = [
            c
            for c in doc["checks"]
            if c["probe"] == "mcp_endpoint" and c["name"] != "alivemcp-mcp-face"
        ]
        assert {c["name"] for c in checks} >= {"mcp-sdk", "mcp-sdk-2026", "mcp-legacy-sse"}
        loaded = load_config_text(yaml.safe_dump({"checks": checks}), env=stack.env)
        for check in loaded.checks:
            handle = build_handle(check, plumbing)
            result = await handle.run()
            await handle.teardown()
            assert result.status == "up", (check.name, result.reason)
            assert result.observations["tools"] == 2
    finally:
        await plumbing.aclose()
        await stack.close()
