"""Other clients of the MCP face: alivemcp's own ``mcp_endpoint`` probe (both eras), the demo's
check of its own face, and the npm reference client (``@modelcontextprotocol/sdk``, from the
npm cache the reference server is installed in)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.mcp_servers import NPM_DIR
from alivemcp.toolsurface.findings import find
from alivemcp.web.mcp_answers import check_uri
from tests.support import REPO, run_check
from tests.support.mcp_face import BIDI, ODD_NAME, ZWSP, Face, serve_face

FACE_TOOLS = [
    "list_checks",
    "get_check",
    "get_uptime",
    "list_incidents",
    "explain_check",
    "list_tool_surface_changes",
]
NPM_SDK = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "sdk"
NPM_CLIENT = REPO / "tests" / "support" / "mcp_npm_client.mjs"


@pytest.fixture(scope="module")
async def face(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Face]:
    async with serve_face(tmp_path_factory.mktemp("face-clients")) as served:
        yield served


async def test_the_mcp_endpoint_probe_finds_the_face_up_in_both_eras(face: Face) -> None:
    deep = {
        "url": face.url,
        "required_tools": FACE_TOOLS,
        "call": {
            "name": "list_checks",
            "arguments": {"status": "down"},
            "expect_json_path": "structuredContent.matched",
            "expect_value": 2,
        },
    }
    handshake = await run_check("mcp_endpoint", deep)
    assert handshake.status == "up", handshake.reason
    details = handshake.details or {}
    assert (details["transport"], details["protocol_version"]) == (
        "streamable_http",
        "2025-11-25",
    )
    assert details["server_name"] == "alivemcp"
    assert handshake.observations["tools"] == len(FACE_TOOLS)
    stateless = await run_check("mcp_endpoint", {**deep, "transport": "stateless"})
    assert stateless.status == "up", stateless.reason
    assert (stateless.details or {})["protocol_version"] == "2026-07-28"
    # What the face offers models raises none of the tool-poisoning signs the monitor looks for
    # in other servers (the demo pins its surface: a finding would hold the first approval).
    assert handshake.surface is not None
    assert find(handshake.surface) == []


async def test_the_demo_config_probes_its_own_face(face: Face) -> None:
    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    (check,) = [c for c in doc["checks"] if c["name"] == "alivemcp-mcp-face"]
    assert check["probe"] == "mcp_endpoint"
    listen = f"127.0.0.1:{face.server.port}"  # what `alivemcp demo` sets DEMO_LISTEN to
    loaded = load_config_text(yaml.safe_dump({"checks": [check]}), env={"DEMO_LISTEN": listen})
    plumbing = Plumbing()
    try:
        handle = build_handle(loaded.checks[0], plumbing)
        result = await handle.run()
        await handle.teardown()
    finally:
        await plumbing.aclose()
    assert result.status == "up", result.reason


async def test_the_npm_reference_client_uses_every_tool(face: Face) -> None:
    node = shutil.which("node")
    if node is None or not (NPM_SDK / "package.json").exists():
        pytest.fail(
            "the npm reference client needs node and @modelcontextprotocol/sdk in .cache/npm: "
            "python -m alivemcp.testbed.mcp_servers fetch-npm (make deps does it)"
        )
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "list_checks": ("list_checks", {"status": ["down", "degraded"], "limit": 5}),
        "get_check": ("get_check", {"check": "payments-mcp"}),
        "get_uptime": ("get_uptime", {"check": "payments-mcp", "window": "7d"}),
        "list_incidents": ("list_incidents", {"check": "payments-mcp", "since": "1d"}),
        "explain_check": ("explain_check", {"check": "payments-mcp"}),
        "list_tool_surface_changes": ("list_tool_surface_changes", {"since": "1d"}),
    }
    bad = {"bad_window": ("get_uptime", {"check": "payments-mcp", "window": "2d"})}
    proc = await asyncio.create_subprocess_exec(
        node,
        str(NPM_CLIENT),
        str(NPM_SDK),
        face.url,
        json.dumps({**calls, **bad}),
        check_uri(ODD_NAME),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    doc = json.loads(out)
    assert doc["protocolVersion"] == "2025-11-25"
    assert doc["server"]["name"] == "alivemcp"
    assert {t["name"] for t in doc["tools"]} == set(FACE_TOOLS)
    assert all(t["hasOutputSchema"] for t in doc["tools"])
    for name in calls:
        answer = doc["calls"][name]
        assert "thrown" not in answer, (name, answer)  # the client checked the output schema
        assert answer["isError"] is False, (name, answer)
        assert json.loads(answer["text"]) == answer["structuredContent"]
        text = json.dumps(answer["structuredContent"], ensure_ascii=False)
        assert BIDI not in text and ZWSP not in text
    assert [r["check"] for r in doc["calls"]["list_checks"]["structuredContent"]["checks"]] == [
        "payments-mcp",
        "payments-db",
        "flaky-s3",
    ]
    assert doc["calls"]["explain_check"]["structuredContent"]["status"] == "down"
    wrong = doc["calls"]["bad_window"]
    assert wrong["isError"] is True and wrong["structuredContent"] is None
    assert wrong["text"].startswith("get_uptime: argument 'window': Input should be '1h'")
    # No such tool: a JSON-RPC error, which the client raises.
    assert doc["errors"]["unknownTool"]["code"] == -32602
    assert "no tool named 'no_such_tool'" in doc["errors"]["unknownTool"]["message"]
    assert doc["templates"] == ["alivemcp://checks/{name}"]
    assert json.loads(doc["resource"]["text"])["check"] == ODD_NAME
