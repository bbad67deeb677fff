"""The documented verdicts through the real CLI: ``alivemcp check --config F --json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alivemcp.testbed import mcp_servers
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import check_json

# check name, lab path (or server fixture key), extra params, expected status
LAB_TABLE: list[tuple[str, str, dict[str, Any], str]] = [
    ("json", "/json", {}, "up"),
    ("sse", "/sse", {}, "up"),
    ("legacy", "/legacy", {}, "up"),
    ("modern", "/modern", {}, "up"),
    ("expire", "/expire", {}, "up"),
    ("gated-ok", "/bearer", {"auth_gated_ok": True}, "up"),
    ("hang", "/hang", {"request_timeout": 1}, "down"),
    ("error500", "/error500", {}, "down"),
    ("html", "/html", {}, "down"),
    ("badjson", "/badjson", {}, "down"),
    ("initerror", "/initerror", {}, "down"),
    ("counteroffer", "/counteroffer", {}, "down"),
    ("midclose", "/midclose", {}, "down"),
    ("huge", "/huge", {}, "down"),
    ("gated", "/bearer", {}, "down"),
    ("slow", "/slow", {"degraded_latency": "1s"}, "degraded"),
    ("badtools", "/badtools", {}, "degraded"),
    ("noinitialized", "/noinitialized", {}, "degraded"),
]


def test_cli_verdicts(
    tmp_path: Path,
    lab: ServerProcess,
    sdk_stateful: ServerProcess,
    sdk_legacy_sse: ServerProcess,
    sdk_auth: ServerProcess,
    npm_streamable: ServerProcess,
) -> None:
    checks: list[dict[str, Any]] = [
        {
            "name": name,
            "probe": "mcp_endpoint",
            "timeout": "5s",
            "params": {"url": lab.base + path, **extra},
        }
        for name, path, extra, _ in LAB_TABLE
    ]
    checks += [
        # One check per target with shared params (the way a fleet is configured).
        {
            "name": "fleet",
            "probe": "mcp_endpoint",
            "timeout": 10,
            "params": {"required_tools": ["echo"]},
            "targets": [sdk_stateful.url, sdk_legacy_sse.url, npm_streamable.url],
        },
        {
            "name": "auth-env",
            "probe": "mcp_endpoint",
            "timeout": 10,
            "params": {
                "url": sdk_auth.url,
                "headers": {"Authorization": "Bearer ${ALIVEMCP_TEST_MCP_TOKEN}"},
            },
        },
        {
            "name": "auth-wrong",
            "probe": "mcp_endpoint",
            "timeout": 10,
            "params": {
                "url": sdk_auth.url,
                "headers": {"Authorization": "Bearer ${ALIVEMCP_TEST_BAD_TOKEN}"},
            },
        },
    ]
    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({"checks": checks}))
    bad_token = "bad-token-abcdef123456"
    code, results = check_json(
        config,
        env={
            "ALIVEMCP_TEST_MCP_TOKEN": mcp_servers.STATIC_TOKEN,
            "ALIVEMCP_TEST_BAD_TOKEN": bad_token,
        },
    )
    assert code == 1  # some checks are (correctly) not up
    got = {name: results[name]["status"] for name, *_ in LAB_TABLE}
    assert got == {name: status for name, _, _, status in LAB_TABLE}, {
        n: results[n]["reason"] for n in got
    }
    for target in (sdk_stateful.url, sdk_legacy_sse.url, npm_streamable.url):
        row = results[f"fleet/{target}"]
        assert row["status"] == "up", row["reason"]
        assert row["observations"]["tools"] >= 2
    assert results["auth-env"]["status"] == "up", results["auth-env"]["reason"]
    assert results["auth-wrong"]["status"] == "down"
    assert "credentials rejected" in results["auth-wrong"]["reason"]
    assert bad_token not in str(results)
    assert results["json"]["details"]["protocol_version"] == "2025-11-25"
    assert results["modern"]["details"]["protocol_version"] == "2026-07-28"
