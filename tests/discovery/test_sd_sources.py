"""Prometheus service discovery: http_sd against a real local server, file_sd files edited
between refreshes (and noticed by their modification time, without waiting for the refresh)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from alivemcp.plumbing.http import HttpClients
from tests.discovery.support import Sink, manager_for, serve


class SdServer:
    """An http_sd endpoint: answers :attr:`body` with :attr:`status` and
    :attr:`content_type`; records the refresh interval header of each request."""

    def __init__(self) -> None:
        self.body: Any = []
        self.status = 200
        self.content_type = "application/json"
        self.intervals: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.intervals.append(request.headers.get("X-Prometheus-Refresh-Interval-Seconds"))
        text = self.body if isinstance(self.body, str) else json.dumps(self.body)
        return web.Response(
            status=self.status, body=text.encode(), headers={"Content-Type": self.content_type}
        )


def sd_config(url: str, probe: str = "mcp_endpoint") -> str:
    return f"""
defaults: {{labels: {{env: prod}}}}
discovery:
  - name: fleet
    http_sd: {{url: "{url}", refresh: 2m}}
    template: {{probe: {probe}, interval: 30s, labels: {{team: sre}}}}
"""


async def test_http_sd_groups_become_checks_with_their_labels(http: HttpClients) -> None:
    server = SdServer()
    runner, url = await serve(server.handle)
    try:
        server.body = [
            {
                "targets": ["https://a.example.com/mcp", "https://b.example.com/mcp?key=s3cret"],
                "labels": {"zone": "eu", "__meta_sd_thing": "dropped", "team": "override"},
            },
            {"targets": ["https://c.example.com/mcp"]},
            {"targets": ["https://a.example.com/mcp"], "labels": {"zone": "us"}},
            {"targets": "not a list"},
            {"targets": ["https://d.example.com/mcp"], "labels": {"zone": 3}},
            {"targets": ["https://e.example.com/mcp"], "labels": {"check": "reserved"}},
            {"targets": ["https://f.example.com/mcp"], "labels": {"bad-name": "x"}},
            {"targets": ["https://g.example.com/mcp"], "labels": {"discovery": "mine"}},
            {"targets": ["not a url", "", 7, "https://h.example.com/\x1b[31m"]},
        ]
        sink = Sink()
        manager = manager_for(sd_config(url), http, sink)
        assert await manager.refresh("fleet")
        checks = sink.last("fleet")
        assert sorted(checks) == [
            "fleet/https://a.example.com/mcp",
            "fleet/https://b.example.com/mcp?key=[REDACTED]",
            "fleet/https://c.example.com/mcp",
        ]
        a = checks["fleet/https://a.example.com/mcp"]
        assert dict(a.labels) == {
            "env": "prod",
            "team": "override",
            "zone": "eu",
            "discovery": "fleet",
        }
        b = checks["fleet/https://b.example.com/mcp?key=[REDACTED]"]
        assert b.params.url == "https://b.example.com/mcp?key=s3cret"  # type: ignore[attr-defined]
        assert b.discovered is not None and b.discovered.target.endswith("key=[REDACTED]")
        assert b.discovered.server is None and b.discovered.transport is None
        assert server.intervals == ["120"]
        snap = manager.snapshot()[0]
        # the group without a list (1), zone=3 (1), reserved check / bad-name / discovery
        # labels (3), and "not a url", "" , 7 and the escape (4)
        assert snap.skipped == {"duplicate_target": 1, "invalid_entry": 9}
        assert snap.kind == "http_sd" and snap.targets == 3
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "reason"),
    [
        (500, "application/json", "[]", "http_status"),
        (404, "application/json", "[]", "http_status"),
        (200, "text/html", "[]", "not_json"),
        (200, "application/json", "[{", "not_json"),
        (200, "application/json", '{"targets": []}', "invalid"),
    ],
)
async def test_an_http_sd_answer_that_breaks_the_format_keeps_the_last_good_set(
    http: HttpClients, status: int, content_type: str, body: str, reason: str
) -> None:
    server = SdServer()
    runner, url = await serve(server.handle)
    try:
        server.body = [{"targets": ["https://a.example.com/mcp"]}]
        sink = Sink()
        manager = manager_for(sd_config(url), http, sink)
        assert await manager.refresh("fleet")
        server.status, server.content_type, server.body = status, content_type, body
        assert not await manager.refresh("fleet")
        snap = manager.snapshot()[0]
        assert snap.errors == {reason: 1} and snap.targets == 1 and snap.failing
        assert list(manager.checks("fleet")) == ["fleet/https://a.example.com/mcp"]
        server.status, server.content_type, server.body = 200, "application/json", []
        assert await manager.refresh("fleet")  # the full list every time: [] empties it
        assert sink.last("fleet") == {} and manager.snapshot()[0].targets == 0
    finally:
        await runner.cleanup()


def file_config(*globs: str) -> str:
    files = ", ".join(f'"{g}"' for g in globs)
    return f"""
discovery:
  - name: files
    file_sd: {{files: [{files}], refresh: 1h}}
    template: {{probe: test_static, interval: 10s}}
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    # A later write within the file system's time resolution must still look changed.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


async def test_file_sd_reads_json_and_yaml_and_follows_edits(
    tmp_path: Path, http: HttpClients
) -> None:
    targets = tmp_path / "targets"
    write(targets / "a.json", json.dumps([{"targets": ["one", "two"], "labels": {"k": "v"}}]))
    write(targets / "b.yaml", "- targets: [three]\n  labels: {k: w}\n")
    write(targets / "ignored.txt", "not matched by the globs")
    sink = Sink()
    manager = manager_for(
        file_config("targets/*.json", "targets/*.yaml"), http, sink, base_dir=tmp_path
    )
    assert await manager.refresh("files")
    checks = sink.last("files")
    assert sorted(checks) == ["files/one", "files/three", "files/two"]
    assert checks["files/three"].labels["k"] == "w"
    assert checks["files/one"].params.reason == "one"  # type: ignore[attr-defined]
    write(targets / "a.json", json.dumps([{"targets": ["one"]}]))
    write(targets / "c.json", json.dumps([{"targets": ["four"]}]))
    assert await manager.refresh("files")
    assert sorted(sink.last("files")) == ["files/four", "files/one", "files/three"]
    (targets / "b.yaml").unlink()
    assert await manager.refresh("files")
    assert sorted(sink.last("files")) == ["files/four", "files/one"]


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("bad.json", "[{", "not_json"),
        ("bad.yaml", "- targets: [a\n", "invalid"),
        ("bad.json", '{"targets": ["a"]}', "invalid"),
    ],
)
async def test_a_broken_file_keeps_the_last_good_set(
    tmp_path: Path, http: HttpClients, name: str, text: str, reason: str
) -> None:
    write(tmp_path / "good.json", json.dumps([{"targets": ["a"]}]))
    sink = Sink()
    manager = manager_for(file_config("*.json", "*.yaml"), http, sink, base_dir=tmp_path)
    assert await manager.refresh("files")
    write(tmp_path / name, text)
    assert not await manager.refresh("files")
    snap = manager.snapshot()[0]
    assert snap.errors == {reason: 1} and list(manager.checks("files")) == ["files/a"]
    assert name in (snap.last_error or "")


async def test_a_changed_file_is_read_at_once_not_at_the_next_refresh(
    tmp_path: Path, http: HttpClients
) -> None:
    write(tmp_path / "t.json", json.dumps([{"targets": ["a"]}]))
    sink = Sink()
    manager = manager_for(file_config("*.json"), http, sink, base_dir=tmp_path, watch_seconds=0.02)
    await manager.start()
    try:
        assert list(await sink.next()) == ["files/a"]
        write(tmp_path / "t.json", json.dumps([{"targets": ["a", "b"]}]))
        assert sorted(await sink.next()) == ["files/a", "files/b"]  # refresh is 1h
        write(tmp_path / "t.json", "[{")  # broken: noticed, refused, the set stays
        snap = await manager.wait_attempts("files", 3, timeout=10)
        assert snap.failing and snap.targets == 2
        write(tmp_path / "t.json", json.dumps([{"targets": ["c"]}]))  # fixed: read at once
        assert list(await sink.next()) == ["files/c"]
    finally:
        await manager.aclose()
