"""Every lab server (well-behaved and misbehaving) gets its documented verdict."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from alivemcp.config import ConfigError, load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check, run_check_series

# path, extra params, status, words the reason must contain
LAB_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("/json", {}, "up", "MCP 2025-11-25 over streamable_http: alivemcp-lab 0.9, 2 tools"),
    ("/sse", {}, "up", "MCP 2025-11-25 over streamable_http"),
    ("/hang", {}, "down", "initialize: no complete response within"),
    ("/error500", {}, "down", "initialize: HTTP 500"),
    ("/html", {}, "down", "content-type text/html"),
    ("/badjson", {}, "down", "not valid JSON"),
    ("/initerror", {}, "down", "initialize returned JSON-RPC error -32603: database unavailable"),
    ("/slow", {"degraded_latency": 1}, "degraded", "slow: the handshake took"),
    ("/delayed/50/sse", {}, "up", "MCP 2025-11-25 over streamable_http"),
    ("/delayed/50/json", {"degraded_latency": 0.1}, "degraded", "slow: the handshake took"),
    ("/delayed/5001/json", {}, "down", "initialize: HTTP 404"),
    ("/expire", {}, "up", "session expired during tools/list (HTTP 404)"),
    ("/expire400", {}, "up", "session expired during tools/list (HTTP 400)"),
    ("/counteroffer", {}, "down", "unknown protocol version '2099-01-01'"),
    ("/midclose", {}, "down", "connection closed mid-response"),
    ("/huge", {}, "down", "response body larger than"),
    ("/badtools", {}, "degraded", "tools/list: the result has no list of named tools"),
    ("/noinitialized", {}, "degraded", "notifications/initialized: HTTP 500"),
    ("/modern", {}, "up", "MCP 2026-07-28 over stateless: alivemcp-lab-modern 2.0"),
    ("/bearer", {}, "down", "authentication required: HTTP 401"),
    ("/bearer", {"auth_gated_ok": True}, "up", "auth-gated: HTTP 401"),
    ("/legacy", {}, "up", "MCP 2025-11-25 over sse: alivemcp-lab 0.9, 2 tools"),
    (
        "/json",
        {"required_tools": ["echo", "missing_tool"]},
        "degraded",
        "required tool(s) missing: missing_tool",
    ),
    (
        "/json",
        {
            "call": {
                "name": "add",
                "arguments": {"a": 2, "b": 40},
                "expect_json_path": "structuredContent.sum",
                "expect_value": 42,
            }
        },
        "up",
        "MCP 2025-11-25",
    ),
    (
        "/json",
        {
            "call": {
                "name": "add",
                "arguments": {"a": 2, "b": 2},
                "expect_json_path": "structuredContent.sum",
                "expect_value": 5,
            }
        },
        "degraded",
        "structuredContent.sum is 4, expected 5",
    ),
    (
        "/sse",
        {"call": {"name": "echo", "arguments": {"text": "pong"}, "expect_contains": "pong"}},
        "up",
        "MCP 2025-11-25",
    ),
    (
        "/sse",
        {"call": {"name": "echo", "arguments": {"text": "pong"}, "expect_contains": "ping"}},
        "degraded",
        "does not contain 'ping'",
    ),
    ("/json", {"transport": "sse"}, "down", "legacy SSE stream"),
    ("/legacy", {"transport": "streamable_http"}, "down", "initialize: HTTP 405"),
    ("/legacy-foreign", {}, "down", "the endpoint event names another origin"),
]


def _details(result: Any) -> dict[str, Any]:
    return dict(result.details or {})


@pytest.mark.parametrize(
    ("path", "extra", "status", "words"),
    LAB_CASES,
    ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(LAB_CASES)],
)
async def test_lab_verdict(
    lab: ServerProcess, path: str, extra: dict[str, Any], status: str, words: str
) -> None:
    params = {"url": lab.base + path, "request_timeout": 2, **extra}
    result = await run_check("mcp_endpoint", params, timeout=6)
    assert (result.status, words in result.reason) == (status, True), result.reason


async def test_up_result_carries_timings_facts_and_info(lab: ServerProcess) -> None:
    result = await run_check("mcp_endpoint", {"url": lab.base + "/sse"})
    obs = result.observations
    for name in ("connect_seconds", "initialize_seconds", "tools_list_seconds", "total_seconds"):
        assert obs[name] >= 0, name
    assert obs["tools"] == 2
    details = result.details or {}
    assert details["protocol_version"] == "2025-11-25"
    assert details["server_name"] == "alivemcp-lab"
    assert details["tools"] == ["echo", "add"]
    assert details["delete_status"] == 200
    assert len(details["tools_hash"]) == 16
    (info,) = [o for o in result.labeled_observations if o.name == "mcp_server_info"]
    assert info.labels["transport"] == "streamable_http"
    assert info.labels["tools_hash"] == details["tools_hash"]


def _stats(lab: ServerProcess) -> dict[str, int]:
    with urllib.request.urlopen(lab.base + "/_stats", timeout=5) as resp:
        return json.loads(resp.read())


def _handle(url: str, plumbing: Plumbing) -> Any:
    doc = f'checks: [{{name: t, probe: mcp_endpoint, timeout: 5, params: {{url: "{url}"}}}}]'
    return build_handle(load_config_text(doc, env={}).checks[0], plumbing)


async def test_transport_is_remembered_and_redetected_after_failure(lab: ServerProcess) -> None:
    plumbing = Plumbing()
    handle = _handle(lab.base + "/legacy", plumbing)
    try:
        before = _stats(lab).get("POST /legacy", 0)
        first = await handle.run()
        second = await handle.run()
        assert (first.status, second.status) == ("up", "up")
        # Only the first run probed with a streamable-HTTP POST; the second went straight
        # to the remembered legacy stream.
        assert _stats(lab).get("POST /legacy", 0) - before == 1
        assert handle.probe.era == "sse"
        # A failing run forgets the transport, so the next one detects it again.
        handle.probe.params = handle.probe.params.model_copy(update={"url": lab.base + "/error500"})
        assert (await handle.run()).status == "down"
        assert handle.probe.era is None
    finally:
        await handle.teardown()
        await plumbing.aclose()


async def test_remembered_stateless_era_redetects_when_server_changes(lab: ServerProcess) -> None:
    plumbing = Plumbing()
    handle = _handle(lab.base + "/modern", plumbing)
    try:
        assert (await handle.run()).status == "up"
        assert handle.probe.era == "stateless"
        # Same check, server now a legacy-SSE one: server/discover gets 405, so it re-detects.
        handle.probe.params = handle.probe.params.model_copy(update={"url": lab.base + "/legacy"})
        result = await handle.run()
        assert result.status == "up", result.reason
        assert "re-detected" in result.reason
        assert handle.probe.era == "sse"
    finally:
        await handle.teardown()
        await plumbing.aclose()


async def test_tls_expiring_certificate_is_degraded(
    lab_tls_expiring: ServerProcess, certs: Any
) -> None:
    url = lab_tls_expiring.base + "/json"
    ca_file = str(certs / "lab-3d.crt")
    trusted = await run_check("mcp_endpoint", {"url": url, "tls_ca_file": ca_file})
    assert trusted.status == "degraded", trusted.reason
    assert "TLS certificate expires in" in trusted.reason
    assert 2 * 86400 < trusted.observations["tls_cert_expiry_seconds"] <= 3 * 86400
    assert trusted.observations["tls_seconds"] > 0
    # Slow and expiring at once: both are named, not only the first one looked at.
    both = await run_check(
        "mcp_endpoint", {"url": url, "tls_ca_file": ca_file, "degraded_latency": "1ms"}
    )
    assert both.status == "degraded", both.reason
    assert both.reason.startswith("slow: the handshake took"), both.reason
    assert "; TLS certificate expires in" in both.reason, both.reason
    relaxed = await run_check(
        "mcp_endpoint", {"url": url, "tls_ca_file": ca_file, "tls_expiry_days": 1}
    )
    assert relaxed.status == "up", relaxed.reason
    untrusted = await run_check("mcp_endpoint", {"url": url})
    assert untrusted.status == "down"
    assert "TLS certificate of 127.0.0.1" in untrusted.reason


async def test_unreachable_port_is_down() -> None:
    from alivemcp.testbed.mcp_servers import free_port

    result = await run_check("mcp_endpoint", {"url": f"http://127.0.0.1:{free_port()}/mcp"})
    assert result.status == "down"
    assert "cannot connect to 127.0.0.1" in result.reason


async def test_hang_is_cut_by_check_timeout_with_own_reason(lab: ServerProcess) -> None:
    # request_timeout larger than the check's timeout: the probe still reports first.
    result = await run_check(
        "mcp_endpoint", {"url": lab.base + "/hang", "request_timeout": 60}, timeout=1.5
    )
    assert result.status == "down"
    assert "initialize: no complete response within" in result.reason


async def test_tool_drift_is_visible(lab: ServerProcess) -> None:
    first, second = await run_check_series("mcp_endpoint", {"url": lab.base + "/drift"}, runs=2)
    assert first.status == second.status == "up"
    assert _details(first)["tools_hash"] != _details(second)["tools_hash"]
    assert "tools changed: hash" in second.reason
    assert _details(second)["tools_changed_from"] == _details(first)["tools_hash"]
    assert {"tools"} <= set(_details(first)) and {"tools"} <= set(_details(second))


async def test_unchanged_tools_are_not_repeated_in_details(lab: ServerProcess) -> None:
    first, second = await run_check_series("mcp_endpoint", {"url": lab.base + "/json"}, runs=2)
    assert _details(first)["tools"] == ["echo", "add"]
    assert "tools" not in _details(second)
    assert _details(second)["tools_hash"] == _details(first)["tools_hash"]


@pytest.mark.parametrize("url", ["http://", "ftp://127.0.0.1/mcp", "http://127.0.0.1:99999/mcp"])
async def test_unusable_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="url"):
        await run_check("mcp_endpoint", {"url": url})
