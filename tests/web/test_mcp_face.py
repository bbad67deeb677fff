"""The daemon's MCP face (``/mcp``) with the official SDK's client in both eras: initialize
negotiating 2025-11-25, a 2026-07-28 client (server/discover, then per-request), every tool
and its output schema, the resources, bad arguments, history or the tool-surface store being
absent, the HTTP edges (GET, another site's Origin, an oversized body), and server text
reaching the model inert."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
import yaml
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, Tool

from alivemcp.app.daemon import Daemon
from alivemcp.config import load_config_text
from alivemcp.config.model import ServerConfig
from alivemcp.engine.status import StatusStore
from alivemcp.web import mcp_face
from alivemcp.web.mcp_answers import FaceReader, check_uri
from alivemcp.web.metrics import Metrics
from alivemcp.web.server import HttpServer
from tests.support.mcp_face import (
    BIDI,
    CHECKS,
    DISCOVERED_NAME,
    ODD_NAME,
    PAYMENTS,
    ZWSP,
    Face,
    serve_face,
)

#: The SDK client's modes: the initialize handshake (2025-11-25) and the 2026-07-28 era.
MODES = ["legacy", "2026-07-28"]
TOOLS = {
    "list_checks",
    "get_check",
    "get_uptime",
    "list_incidents",
    "explain_check",
    "list_tool_surface_changes",
}


@pytest.fixture(scope="module")
async def face(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Face]:
    async with serve_face(tmp_path_factory.mktemp("face")) as served:
        yield served


async def call(face: Face, mode: str, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    async with Client(face.url, mode=mode) as client:
        return await client.call_tool(tool, arguments)


async def answer(face: Face, mode: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's structured content, checked against its output schema and its text twin."""
    async with Client(face.url, mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    doc = result.structured_content
    assert isinstance(doc, dict)
    jsonschema.Draft202012Validator(listed[tool].output_schema).validate(doc)
    assert json.loads(result.content[0].text) == doc  # type: ignore[union-attr]
    text = json.dumps(doc, ensure_ascii=False)
    assert BIDI not in text and ZWSP not in text, text[:300]
    return doc


async def tool_error(face: Face, mode: str, tool: str, arguments: dict[str, Any]) -> str:
    result = await call(face, mode, tool, arguments)
    assert result.is_error, result.structured_content
    assert result.structured_content is None
    return str(result.content[0].text)  # type: ignore[union-attr]


# -- the two eras --------------------------------------------------------------------------------


async def test_initialize_negotiates_2025_11_25(face: Face) -> None:
    async with Client(face.url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None and client.server_info.name == "alivemcp"
        assert "list_checks" in (client.instructions or "")
        capabilities = client.server_capabilities
        assert capabilities.tools is not None and capabilities.resources is not None
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS


async def test_a_2026_07_28_client_discovers_the_server_and_works(face: Face) -> None:
    async with Client(face.url, mode="auto") as client:  # server/discover first
        assert client.protocol_version == "2026-07-28"
        assert client.session.discover_result is not None
        assert "2026-07-28" in client.session.discover_result.supported_versions
        result = await client.call_tool("get_check", {"check": "payments-mcp"})
        assert result.structured_content["status"] == "down"  # type: ignore[index]
    async with Client(face.url, mode="2026-07-28") as client:  # adopted without a probe
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS


async def test_every_tool_is_described_for_a_model_with_both_schemas(face: Face) -> None:
    async with Client(face.url, mode="legacy") as client:
        tools: list[Tool] = (await client.list_tools()).tools
    for tool in tools:
        assert tool.description and len(tool.description) > 150, tool.name
        assert "Use it" in tool.description, tool.name  # says when to call it
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        for name, spec in tool.input_schema["properties"].items():
            assert spec.get("description") or name == "check", (tool.name, name)


# -- the tools -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_list_checks_counts_filters_and_pages(face: Face, mode: str) -> None:
    everything = await answer(face, mode, "list_checks", {})
    assert (everything["total_checks"], everything["matched"]) == (len(CHECKS), len(CHECKS))
    assert everything["summary"] == {"up": 2, "degraded": 1, "down": 2, "unknown": 1, "pending": 1}
    assert [r["check"] for r in everything["checks"]] == [c.name for c in CHECKS]
    assert (everything["truncated"], everything["next_offset"]) == (False, None)
    payments = everything["checks"][0]
    assert payments["status"] == "down" and payments["labels"]["team"] == "payments"
    assert "<U+202E>" in payments["reason"] and "<U+200B>" in payments["reason"]

    async def names(**arguments: Any) -> list[str]:
        doc = await answer(face, mode, "list_checks", arguments)
        assert doc["summary"] == everything["summary"]  # always the whole deployment
        return [row["check"] for row in doc["checks"]]

    assert await names(status="down") == ["payments-mcp", "payments-db"]
    assert await names(status=["degraded", "unknown", "pending"]) == [
        "flaky-s3",
        ODD_NAME,
        "new-check",
    ]
    assert await names(label="team=payments", status="down") == ["payments-mcp", "payments-db"]
    assert await names(label=["env=prod", "team=search"]) == ["search-mcp"]
    assert await names(label="discovery") == [DISCOVERED_NAME]
    assert await names(source="registry") == [DISCOVERED_NAME]
    assert await names(text="REPLICATION LAG") == ["flaky-s3"]  # in the reason, any case
    assert await names(text="odd name") == [ODD_NAME]
    assert await names(status="up", text="nothing like this") == []
    first = await answer(face, mode, "list_checks", {"limit": 3})
    assert (first["returned"], first["truncated"], first["next_offset"]) == (3, True, 3)
    second = await answer(face, mode, "list_checks", {"limit": 3, "offset": 3})
    assert [r["check"] for r in second["checks"]] == [c.name for c in CHECKS[3:6]]
    last = await answer(face, mode, "list_checks", {"limit": 3, "offset": 6})
    assert (last["returned"], last["truncated"], last["next_offset"]) == (1, False, None)
    weather = (await answer(face, mode, "list_checks", {"source": "registry"}))["checks"][0]
    assert weather["source"] == "registry"


@pytest.mark.parametrize("mode", MODES)
async def test_get_check_says_status_since_labels_and_uptime(face: Face, mode: str) -> None:
    doc = await answer(face, mode, "get_check", {"check": "payments-mcp"})
    assert (doc["check"], doc["probe"], doc["status"]) == ("payments-mcp", "mcp_endpoint", "down")
    assert doc["reason"].startswith("HTTP 503 from upstream") and "<U+202E>" in doc["reason"]
    assert doc["since"].endswith("Z") and doc["last_run"].endswith("Z")
    assert 170 <= doc["status_for_seconds"] <= 600  # down since the run 180 s before the start
    assert doc["labels"] == {"team": "payments", "env": "prod"}
    assert doc["depends_on"] == ["payments-db"]
    assert doc["runs_since_start"] == {"up": 2, "degraded": 0, "down": 2, "unknown": 0}
    assert doc["uptime"]["24h"] == {"up_ratio": 0.5, "available_ratio": 0.5}
    assert set(doc["uptime"]) == {"24h", "7d", "30d"}
    assert (doc["owner"], doc["discovered"]) == (None, None)
    assert "locations" not in doc  # one location: no votes to show
    assert doc["resource"] == "alivemcp://checks/payments-mcp"
    weather = await answer(face, mode, "get_check", {"check": DISCOVERED_NAME})
    assert weather["discovered"] == {
        "source": "registry",
        "target": "https://weather.example/mcp",
        "server": "io.example/weather",
        "version": "1.0.0",
        "transport": "streamable-http",
    }
    pending = await answer(face, mode, "get_check", {"check": "new-check"})
    assert (pending["status"], pending["since"], pending["last_run"]) == ("pending", None, None)


@pytest.mark.parametrize("mode", MODES)
async def test_get_uptime_reads_history_over_a_window(face: Face, mode: str) -> None:
    day = await answer(face, mode, "get_uptime", {"check": "payments-mcp"})
    assert (day["window"], day["up_ratio"], day["available_ratio"]) == ("24h", 0.5, 0.5)
    assert day["runs"] == {"up": 2, "degraded": 0, "down": 2, "unknown": 0}
    assert day["latency_seconds"]["p50"] is not None
    assert day["window_start"].endswith("Z")
    hour = await answer(face, mode, "get_uptime", {"check": "flaky-s3", "window": "1h"})
    assert (hour["up_ratio"], hour["available_ratio"]) == (0.0, 1.0)


@pytest.mark.parametrize("mode", MODES)
async def test_list_incidents_shows_the_open_incident(face: Face, mode: str) -> None:
    doc = await answer(face, mode, "list_incidents", {"check": "payments-mcp", "since": "1h"})
    (incident,) = doc["incidents"]
    assert (incident["open"], incident["ended_at"], incident["worst_status"]) == (
        True,
        None,
        "down",
    )
    assert incident["first_reason"] == "connect refused"
    assert "<U+202E>" in incident["last_reason"]
    assert (doc["returned"], doc["truncated"]) == (1, False)
    quiet = await answer(face, mode, "list_incidents", {"check": "search-mcp"})
    assert quiet["incidents"] == []


@pytest.mark.parametrize("mode", MODES)
async def test_list_tool_surface_changes_newest_first_with_findings(face: Face, mode: str) -> None:
    doc = await answer(face, mode, "list_tool_surface_changes", {"since": "2h"})
    assert [(c["check"], c["from_digest"] is None) for c in doc["changes"]] == [
        ("search-mcp", False),
        ("search-mcp", True),
    ]
    latest = doc["changes"][0]
    assert "<U+202E>" in latest["summary"]
    assert [(f["rule"], f["severity"], f["item"]) for f in latest["findings"]] == [
        ("invisible_characters", "critical", "tool:search")
    ]
    one = await answer(face, mode, "list_tool_surface_changes", {"since": "2h", "limit": 1})
    assert (one["returned"], one["truncated"]) == (1, True)
    other = await answer(
        face, mode, "list_tool_surface_changes", {"since": "2h", "check": "payments-mcp"}
    )
    assert other["changes"] == []


@pytest.mark.parametrize("mode", MODES)
async def test_explain_check_says_what_failed_since_when_and_why(face: Face, mode: str) -> None:
    doc = await answer(face, mode, "explain_check", {"check": "payments-mcp"})
    summary = doc["summary"]
    assert summary.startswith("payments-mcp (mcp_endpoint) is down since ")
    assert "Of its last 4 runs: 2 down, 2 up." in summary
    assert "It depends on payments-db (down: no broker answered within 5s)" in summary
    assert "Alerts firing: target (critical)." in summary
    assert [r["status"] for r in doc["recent_runs"]] == ["down", "down", "up", "up"]
    assert doc["recent_counts"] == {"up": 2, "degraded": 0, "down": 2, "unknown": 0}
    assert doc["details"]["http_status"] == 503
    assert doc["details"]["body"] == "Ignore<U+200B> this <U+202E>"
    assert doc["observations"] == {"http_status": 503.0, "tools": None}  # NaN is no JSON
    assert doc["dependencies"] == [
        {"check": "payments-db", "status": "down", "reason": "no broker answered within 5s"}
    ]
    assert [(a["alert"], a["notified"]) for a in doc["firing_alerts"]] == [("target", True)]
    assert len(doc["recent_incidents"]) == 1
    assert doc["tool_surface"] is None
    changed = await answer(face, mode, "explain_check", {"check": "search-mcp"})
    assert changed["tool_surface"]["state"] == "changed"
    assert "tool surface changed and the change is not approved" in changed["summary"]
    pending = await answer(face, mode, "explain_check", {"check": "new-check"})
    assert "has not run yet" in pending["summary"]


@pytest.mark.parametrize("mode", MODES)
async def test_resources_a_template_pages_and_reads(
    face: Face, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_face, "RESOURCE_PAGE", 3)
    async with Client(face.url, mode=mode, cache=None) as client:
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["alivemcp://checks/{name}"]
        uris: list[str] = []
        cursor = None
        for _ in range(5):
            page = await client.list_resources(cursor=cursor)
            uris += [r.uri for r in page.resources]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert uris == [check_uri(c.name) for c in CHECKS]
        assert check_uri(ODD_NAME) == "alivemcp://checks/team%2Fodd%20name%25"
        read = await client.read_resource(check_uri(ODD_NAME))
        (content,) = read.contents
        assert content.mime_type == "application/json"
        assert json.loads(content.text)["check"] == ODD_NAME  # type: ignore[union-attr]
        with pytest.raises(MCPError) as missing:
            await client.read_resource("alivemcp://checks/no-such-check")
        assert missing.value.code == INVALID_PARAMS
        assert "list_checks" in missing.value.message


# -- bad arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_get_errors_that_say_what_to_do(face: Face, mode: str) -> None:
    async with Client(face.url, mode=mode) as client:
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("restart_check", {"check": "payments-mcp"})
    assert unknown.value.code == INVALID_PARAMS
    assert "no tool named 'restart_check'; this server has: list_checks" in unknown.value.message

    cases: list[tuple[str, dict[str, Any], list[str]]] = [
        ("list_checks", {"limit": 0}, ["argument 'limit'", "greater than or equal to 1"]),
        ("list_checks", {"limit": 10_000}, ["less than or equal to 200", "(got 10000)"]),
        ("list_checks", {"status": "broken"}, ["argument 'status'", "'down'", "'broken'"]),
        ("list_checks", {"colour": "red"}, ["unknown argument 'colour'", "It takes: status"]),
        ("list_checks", {"label": "=prod"}, ["label '=prod': write \"key=value\""]),
        ("get_check", {}, ["argument 'check': Field required", "It takes: check."]),
        ("get_check", {"check": "nope"}, ["no check named 'nope'; list_checks shows"]),
        ("get_uptime", {"check": "payments-mcp", "window": "2d"}, ["'1h', '24h', '7d'"]),
        ("get_uptime", {"check": "nope"}, ["no check named 'nope'"]),
        ("list_incidents", {"check": "payments-mcp", "since": "last week"}, ["since: "]),
        ("list_tool_surface_changes", {"since": "-3"}, ["since: "]),
        ("explain_check", {"check": 42}, ["argument 'check': Input should be a valid string"]),
    ]
    for tool, arguments, expected in cases:
        message = await tool_error(face, mode, tool, arguments)
        assert message.startswith(f"{tool}: "), message
        for part in expected:
            assert part in message, (tool, arguments, message)


async def test_malformed_requests_are_json_rpc_errors(face: Face) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "list_checks", "arguments": "not an object"},
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(face.url, json=request, headers=headers) as reply:
            doc = await reply.json()
        assert (doc["id"], doc["error"]["code"]) == (7, INVALID_PARAMS), doc
        async with session.post(face.url, data="{not json", headers=headers) as reply:
            assert reply.status == 400
            assert (await reply.json())["error"]["code"] == -32700


# -- without history, without the tool-surface store, with several locations --------------------


async def test_without_history_the_history_tools_say_so(tmp_path: Path) -> None:
    async with serve_face(tmp_path, history=False) as face:
        for tool, arguments in (
            ("get_uptime", {"check": "payments-mcp"}),
            ("list_incidents", {"check": "payments-mcp"}),
        ):
            message = await tool_error(face, "legacy", tool, arguments)
            assert "keeps no history (history.enabled is false" in message, message
            assert "get_check and explain_check show the current status" in message
        detail = await answer(face, "legacy", "get_check", {"check": "payments-mcp"})
        assert detail["uptime"] is None
        explained = await answer(face, "legacy", "explain_check", {"check": "payments-mcp"})
        assert explained["recent_incidents"] is None


async def test_without_a_tool_surface_store_that_tool_is_not_offered(tmp_path: Path) -> None:
    async with (
        serve_face(tmp_path, surfaces=False) as face,
        Client(face.url, mode="legacy") as client,
    ):
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == TOOLS - {"list_tool_surface_changes"}
        with pytest.raises(MCPError):
            await client.call_tool("list_tool_surface_changes", {})


def test_several_locations_votes_appear_when_the_status_rows_carry_them() -> None:
    class VotingStore(StatusStore):
        def snapshot(self, *, brief: bool = False, only: Any = None) -> dict[str, Any]:
            doc = super().snapshot(brief=brief, only=only)
            for row in doc["checks"]:
                row["locations"] = {
                    "eu-west": {"status": "down", "reason": f"refused{BIDI}", "replica": "r1"},
                    "us-east": {"status": "up", "reason": "ok", "replica": "r4"},
                }
            return doc

    store = VotingStore()
    store.set_checks([PAYMENTS])
    detail = FaceReader(store).check_detail("payments-mcp")
    assert detail.locations is not None
    assert detail.locations["eu-west"]["reason"] == "refused<U+202E>"
    assert detail.locations["us-east"]["status"] == "up"
    plain = StatusStore()
    plain.set_checks([PAYMENTS])
    assert FaceReader(plain).check_detail("payments-mcp").locations is None


# -- HTTP ----------------------------------------------------------------------------------------


async def test_http_edges_get_another_sites_origin_and_a_large_body(face: Face) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    port = face.server.port
    async with aiohttp.ClientSession() as session:
        async with session.get(face.url, headers={"Accept": "text/event-stream"}) as reply:
            assert (reply.status, reply.headers["Allow"]) == (405, "POST")
        evil = {**headers, "Origin": "http://attacker.example"}
        async with session.post(face.url, json=ping, headers=evil) as reply:
            assert reply.status == 403
            assert "another site's web page" in (await reply.json())["error"]["message"]
        same = {**headers, "Origin": f"http://127.0.0.1:{port}"}
        async with session.post(face.url, json=ping, headers=same) as reply:
            assert (reply.status, await reply.json()) == (
                200,
                {"jsonrpc": "2.0", "id": 1, "result": {}},
            )
        async with session.post(face.url, data=b"x" * 300_000, headers=headers) as reply:
            assert reply.status == 413
        async with session.post(face.url, json=ping, headers=headers) as reply:
            assert reply.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_face_is_off_unless_the_server_is_asked_for_it() -> None:
    assert ServerConfig().mcp is True  # the daemon's default
    assert ServerConfig.model_validate({"mcp": False}).mcp is False
    store = StatusStore()
    server = HttpServer(store, Metrics(store), lambda: True, lambda: True)
    await server.start("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.port}/mcp"
        async with aiohttp.ClientSession() as session, session.post(url, json={}) as reply:
            assert reply.status == 404
    finally:
        await server.stop()


async def test_the_daemon_serves_the_face_as_server_mcp_says(tmp_path: Path) -> None:
    for enabled, status in ((True, 405), (False, 404)):
        doc = {"server": {"mcp": enabled}, "data_dir": str(tmp_path / str(enabled)), "checks": []}
        daemon = Daemon(load_config_text(yaml.safe_dump(doc)), None)
        await daemon.server.start("127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{daemon.server.port}/mcp"
            async with aiohttp.ClientSession() as session, session.get(url) as reply:
                assert reply.status == status, enabled  # 405: served, but by POST only
        finally:
            await daemon.server.stop()
