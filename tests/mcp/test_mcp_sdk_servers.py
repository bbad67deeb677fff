"""The official Python SDK servers, the npm reference server and the auth-protected server."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from alivemcp.plumbing import Plumbing
from alivemcp.testbed import mcp_servers
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check, run_check_series


def _details(result: Any) -> dict[str, Any]:
    return dict(result.details or {})


def _facts(result: Any) -> tuple[str, str | None, str | None, int | None]:
    details = result.details or {}
    return (
        result.status,
        details.get("transport"),
        details.get("protocol_version"),
        int(result.observations["tools"]) if "tools" in result.observations else None,
    )


async def test_sdk_stateful_sse(sdk_stateful: ServerProcess) -> None:
    result = await run_check("mcp_endpoint", {"url": sdk_stateful.url})
    assert _facts(result) == ("up", "streamable_http", "2025-11-25", 2), result.reason
    assert _details(result)["server_name"] == mcp_servers.SERVER_NAME
    assert _details(result)["server_version"] == mcp_servers.SERVER_VERSION
    assert _details(result)["delete_status"] == 200


async def test_sdk_stateless_json(sdk_stateless_json: ServerProcess) -> None:
    result = await run_check("mcp_endpoint", {"url": sdk_stateless_json.url})
    assert _facts(result) == ("up", "streamable_http", "2025-11-25", 2), result.reason
    assert "delete_status" not in _details(result)  # stateless: no session to end


async def test_sdk_legacy_sse_detected_and_remembered(sdk_legacy_sse: ServerProcess) -> None:
    results = await run_check_series("mcp_endpoint", {"url": sdk_legacy_sse.url}, runs=2)
    assert [_facts(r) for r in results] == [("up", "sse", "2025-11-25", 2)] * 2


async def test_sdk_2026_stateless_era(sdk_stateful: ServerProcess) -> None:
    result = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_stateful.url,
            "transport": "stateless",
            "call": {
                "name": "add",
                "arguments": {"a": 20, "b": 22},
                "expect_json_path": "structuredContent.sum",
                "expect_value": 42,
            },
        },
    )
    assert _facts(result) == ("up", "stateless", "2026-07-28", 2), result.reason
    assert _details(result)["server_name"] == mcp_servers.SERVER_NAME
    assert result.observations["tools_call_seconds"] >= 0


async def test_sdk_tools_hash_is_the_same_in_both_eras(sdk_stateful: ServerProcess) -> None:
    old = await run_check("mcp_endpoint", {"url": sdk_stateful.url})
    new = await run_check("mcp_endpoint", {"url": sdk_stateful.url, "transport": "stateless"})
    assert _details(old)["tools_hash"] == _details(new)["tools_hash"]


async def test_sdk_deep_check_and_required_tools(sdk_stateful: ServerProcess) -> None:
    ok = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_stateful.url,
            "required_tools": ["echo", "add"],
            "call": {"name": "echo", "arguments": {"text": "alive?"}, "expect_contains": "alive?"},
        },
    )
    assert ok.status == "up", ok.reason
    missing = await run_check(
        "mcp_endpoint", {"url": sdk_stateful.url, "required_tools": ["echo", "deploy"]}
    )
    assert (missing.status, missing.reason) == ("degraded", "required tool(s) missing: deploy")
    failing = await run_check(
        "mcp_endpoint", {"url": sdk_stateful.url, "call": {"name": "add", "arguments": {"a": "x"}}}
    )
    assert failing.status == "degraded"
    assert "tools/call add: the tool reported an error" in failing.reason


async def test_npm_reference_server_streamable(npm_streamable: ServerProcess) -> None:
    result = await run_check(
        "mcp_endpoint",
        {
            "url": npm_streamable.url,
            "required_tools": ["echo", "get-sum"],
            "call": {
                "name": "echo",
                "arguments": {"message": "hello npm"},
                "expect_contains": "hello npm",
            },
        },
    )
    assert result.status == "up", result.reason
    assert _details(result)["transport"] == "streamable_http"
    assert _details(result)["delete_status"] == 200
    assert result.observations["tools"] >= 10


async def test_npm_reference_server_legacy_sse(npm_sse: ServerProcess) -> None:
    result = await run_check("mcp_endpoint", {"url": npm_sse.url})
    assert result.status == "up", result.reason
    assert _details(result)["transport"] == "sse"


# -- auth ------------------------------------------------------------------------------------


async def test_auth_without_credentials_is_down_or_gated_ok(sdk_auth: ServerProcess) -> None:
    plain = await run_check("mcp_endpoint", {"url": sdk_auth.url})
    assert plain.status == "down"
    assert plain.reason.startswith("authentication required: HTTP 401")
    metadata = _details(plain)["resource_metadata"]
    assert metadata.endswith("/.well-known/oauth-protected-resource/mcp")
    gated = await run_check("mcp_endpoint", {"url": sdk_auth.url, "auth_gated_ok": True})
    assert gated.status == "up"
    assert gated.reason.startswith("auth-gated: HTTP 401")


async def test_auth_static_header_secret(sdk_auth: ServerProcess) -> None:
    good = await run_check(
        "mcp_endpoint",
        {"url": sdk_auth.url, "headers": {"Authorization": f"Bearer {mcp_servers.STATIC_TOKEN}"}},
    )
    assert good.status == "up", good.reason
    bad_token = "wrong-token-0123456789"
    bad = await run_check(
        "mcp_endpoint", {"url": sdk_auth.url, "headers": {"Authorization": f"Bearer {bad_token}"}}
    )
    assert bad.status == "down"
    assert bad.reason == "credentials rejected: initialize got HTTP 401 (invalid_token)"
    assert bad_token not in json.dumps([bad.reason, bad.details])


def _tokens_issued(server: ServerProcess) -> int:
    with urllib.request.urlopen(server.base + "/oauth/stats", timeout=5) as resp:
        return int(json.loads(resp.read())["tokens_issued"])


async def test_auth_client_credentials_token_is_cached(sdk_auth: ServerProcess) -> None:
    before = _tokens_issued(sdk_auth)
    oauth = {
        "token_url": sdk_auth.base + "/oauth/token",
        "client_id": mcp_servers.CLIENT_ID,
        "client_secret": mcp_servers.CLIENT_SECRET,
    }
    results = await run_check_series("mcp_endpoint", {"url": sdk_auth.url, "oauth": oauth}, runs=3)
    assert [r.status for r in results] == ["up"] * 3, results[-1].reason
    assert _tokens_issued(sdk_auth) - before == 1


async def test_auth_token_endpoint_failures_are_unknown(sdk_auth: ServerProcess) -> None:
    refused = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_auth.url,
            "oauth": {
                "token_url": sdk_auth.base + "/oauth/token",
                "client_id": mcp_servers.CLIENT_ID,
                "client_secret": "not-the-secret-123",
            },
        },
    )
    assert refused.status == "unknown"
    assert "answered HTTP 401 (invalid_client)" in refused.reason
    assert "not-the-secret-123" not in json.dumps([refused.reason, refused.details])
    broken = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_auth.url,
            "oauth": {
                "token_url": sdk_auth.base + "/oauth/broken",
                "client_id": mcp_servers.CLIENT_ID,
                "client_secret": mcp_servers.CLIENT_SECRET,
            },
        },
    )
    assert broken.status == "unknown"
    assert "answered HTTP 500" in broken.reason


async def test_shared_plumbing_serves_many_checks(
    sdk_stateless_json: ServerProcess, lab: ServerProcess
) -> None:
    plumbing = Plumbing()
    try:
        for url in (sdk_stateless_json.url, lab.base + "/sse", lab.base + "/legacy"):
            result = await run_check("mcp_endpoint", {"url": url}, plumbing=plumbing)
            assert result.status == "up", (url, result.reason)
    finally:
        await plumbing.aclose()
