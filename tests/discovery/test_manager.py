"""The discovery manager running its sources on their own, and what the API and ``/metrics``
show of them (rendered from the snapshots alone, no daemon)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from alivemcp.config import ResolvedCheck
from alivemcp.discovery.manager import DiscoveryManager
from alivemcp.plumbing.http import HttpClients
from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from alivemcp.web.discovery import (
    DISCOVERY_METRIC_NAMES,
    DiscoveryCollector,
    discovery_families,
    discovery_json,
)
from tests.discovery.support import Sink, load, manager_for, serve


class Targets:
    """An http_sd endpoint whose target list the test sets."""

    def __init__(self, *targets: str) -> None:
        self.targets = list(targets)
        self.status = 200

    async def handle(self, request: web.Request) -> web.Response:
        body = json.dumps([{"targets": self.targets}]).encode()
        return web.Response(status=self.status, body=body, content_type="application/json")


def two_sources(registry_url: str, sd_url: str) -> str:
    return f"""
discovery:
  - name: reg
    mcp_registry: {{url: "{registry_url}", refresh: 0.1s}}
    template: {{probe: mcp_endpoint}}
  - name: hand
    http_sd: {{url: "{sd_url}", refresh: 0.1s}}
    template: {{probe: test_static, interval: 10s}}
"""


async def test_sources_refresh_on_their_own_and_hand_on_their_whole_set(
    registry: LocalRegistry, http: HttpClients
) -> None:
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    sd = Targets("written", "other", "other")
    runner, sd_url = await serve(sd.handle)
    sink = Sink()
    manager = manager_for(two_sources(registry.url, sd_url), http, sink)
    await manager.start()
    try:
        first: dict[str, set[str]] = {}
        while len(first) < 2:  # each source's first set (in whichever order they come)
            name, checks = await sink.queue.get()
            first.setdefault(name, set(checks))
        assert first == {
            "reg": {"reg/io.example/a"},
            "hand": {"hand/written", "hand/other"},
        }
        registry.add("io.example/b", remotes=[remote("https://b.example.com/mcp")])
        while set(sink.last("reg")) != {"reg/io.example/a", "reg/io.example/b"}:
            await sink.next()
        sd.status = 503  # fails: the set stays, nothing is handed on meanwhile
        before = manager.snapshot()[1].attempts
        snap = await manager.wait_attempts("hand", before + 2, timeout=10)
        assert snap.failing and snap.errors["http_status"] >= 1 and snap.targets == 2
        assert snap.skipped == {"duplicate_target": 1}
        calls = len([c for c in sink.calls if c[0] == "hand"])
        sd.status, sd.targets = 200, ["third"]
        while set(sink.last("hand")) != {"hand/third"}:
            await sink.next()
        assert len([c for c in sink.calls if c[0] == "hand"]) == calls + 1
    finally:
        await manager.aclose()
        await runner.cleanup()
    assert all(s.attempts >= 2 for s in manager.snapshot())


async def test_reconfigure_starts_stops_and_restarts_sources(
    registry: LocalRegistry, http: HttpClients, tmp_path: Path
) -> None:
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    (tmp_path / "t.json").write_text(json.dumps([{"targets": ["x"]}]))
    files = """
  - name: files
    file_sd: {files: ["*.json"], refresh: 1h}
    template: {probe: test_static, interval: 10s}
"""
    reg = f"""
  - name: reg
    mcp_registry: {{url: "{registry.url}", refresh: 1h}}
    template: {{probe: mcp_endpoint, labels: {{team: a}}}}
"""
    sink = Sink()
    manager = DiscoveryManager(load("discovery:" + reg, tmp_path), http, sink, base_dir=tmp_path)
    await manager.start()
    try:
        assert list(await sink.next()) == ["reg/io.example/a"]
        # A source added, the other's template changed: both (re)start and hand on.
        changed = reg.replace("team: a", "team: b")
        await manager.reconfigure(load("discovery:" + changed + files, tmp_path))
        got = {name: checks for name, checks in [await sink.queue.get() for _ in "ab"]}
        assert list(got["files"]) == ["files/x"]
        assert got["reg"]["reg/io.example/a"].labels["team"] == "b"
        # Unchanged: nothing restarts. Removed: its set is handed on empty.
        await manager.reconfigure(load("discovery:" + files, tmp_path))
        assert await sink.queue.get() == ("reg", {})
        assert [s.name for s in manager.snapshot()] == ["files"]
        assert manager.snapshot()[0].attempts == 1
    finally:
        await manager.aclose()


async def test_a_failing_callback_is_counted_and_the_source_goes_on(
    registry: LocalRegistry, http: HttpClients
) -> None:
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    seen: list[int] = []

    async def broken(source: str, checks: Mapping[str, ResolvedCheck]) -> None:
        seen.append(len(checks))
        raise RuntimeError("the engine said no")

    text = f"""
discovery:
  - name: reg
    mcp_registry: {{url: "{registry.url}"}}
    template: {{probe: mcp_endpoint}}
"""
    manager = DiscoveryManager(load(text), http, broken, base_dir=Path("."))
    assert await manager.refresh("reg")
    assert await manager.refresh("reg")
    snap = manager.snapshot()[0]
    assert seen == [1, 1] and snap.errors == {"apply": 2} and not snap.failing


async def test_the_api_and_the_metrics_are_made_from_the_snapshots(
    registry: LocalRegistry, http: HttpClients
) -> None:
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    registry.add("io.example/t", remotes=[remote("https://{x}.example.com/mcp")])
    clock = iter(float(t) for t in range(1_700_000_000, 1_700_000_100))
    text = f"""
discovery:
  - name: reg
    mcp_registry: {{url: "{registry.url}"}}
    template: {{probe: mcp_endpoint}}
  - name: never
    http_sd: {{url: "http://127.0.0.1:9/sd"}}
    template: {{probe: mcp_endpoint}}
"""
    manager = manager_for(text, http, Sink(), clock=lambda: next(clock))
    assert await manager.refresh("reg")
    registry.fault = "error"
    assert not await manager.refresh("reg")
    body = discovery_json(manager.snapshot())
    assert json.loads(json.dumps(body)) == body
    reg, never = body["sources"]
    assert reg == {
        "name": "reg",
        "kind": "mcp_registry",
        "refresh_seconds": 3600.0,
        "last_attempt": 1_700_000_002.0,
        "last_success": 1_700_000_001.0,
        "last_duration_seconds": reg["last_duration_seconds"],
        "ok": False,
        "targets": 1,
        "skipped": {"url_template": 1},
        "skipped_examples": {"url_template": [reg["skipped_examples"]["url_template"][0]]},
        "errors": {"http_status": 1},
        "last_error": {
            "reason": "http_status",
            "message": "registry page 1: HTTP 500, not 200",
            "at": 1_700_000_003.0,
        },
    }
    assert never["ok"] is False and never["last_attempt"] is None and never["targets"] == 0

    families = {f.name: f for f in discovery_families(manager.snapshot())}
    assert set(families) == DISCOVERY_METRIC_NAMES

    def value(family: str, **labels: str) -> float:
        [sample] = [
            s
            for s in families[family].samples
            if s.labels == labels and not s.name.endswith("_created")
        ]
        return sample.value

    assert value("alivemcp_discovery_last_success_timestamp_seconds", source="reg") == (
        1_700_000_001.0
    )
    assert value("alivemcp_discovery_last_success_timestamp_seconds", source="never") == 0
    assert value("alivemcp_discovery_last_refresh_successful", source="reg") == 0
    assert value("alivemcp_discovery_targets", source="reg") == 1
    assert value("alivemcp_discovery_skipped_targets", source="reg", reason="url_template") == 1
    assert value("alivemcp_discovery_skipped_targets", source="reg", reason="no_remote") == 0
    assert value("alivemcp_discovery_errors", source="reg", reason="http_status") == 1
    assert value("alivemcp_discovery_errors", source="never", reason="connect") == 0

    registry_ = CollectorRegistry(auto_describe=False)
    registry_.register(DiscoveryCollector(manager.snapshot))
    text_out = generate_latest(registry_).decode()
    assert 'alivemcp_discovery_errors_total{reason="http_status",source="reg"} 1.0' in text_out
    assert "# TYPE alivemcp_discovery_targets gauge" in text_out


@pytest.mark.parametrize("kind", ["http_sd", "file_sd"])
async def test_sd_sources_default_to_allowing_private_addresses(
    http: HttpClients, tmp_path: Path, kind: str
) -> None:
    (tmp_path / "t.json").write_text(json.dumps([{"targets": ["http://127.0.0.1:9/mcp"]}]))
    sd = Targets("http://127.0.0.1:9/mcp")
    runner, url = await serve(sd.handle)
    settings = f'http_sd: {{url: "{url}"}}' if kind == "http_sd" else 'file_sd: {files: ["*.json"]}'
    strict = settings[:-1] + ", allow_private_addresses: false}"
    try:
        for text, expected in ((settings, 1), (strict, 0)):
            config = f"discovery:\n  - name: s\n    {text}\n    template: {{probe: mcp_endpoint}}\n"
            manager = manager_for(config, http, Sink(), base_dir=tmp_path)
            assert await manager.refresh("s")
            snap = manager.snapshot()[0]
            assert snap.targets == expected
            assert snap.skipped == ({} if expected else {"private_address": 1})
    finally:
        await runner.cleanup()
