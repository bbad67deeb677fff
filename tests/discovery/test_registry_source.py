"""The MCP registry source against a local registry over real HTTP: pages and cursors, every
skip reason, the registry's changes between refreshes, and a registry that fails, hangs, sends
garbage or loops its cursor (the source keeps its last good set)."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from alivemcp.plumbing.http import HttpClients
from alivemcp.testbed.mcp_registry import LocalRegistry, entry, remote
from tests.discovery.support import Lookups, Sink, manager_for


def registry_config(url: str, **extra: Any) -> str:
    settings = ", ".join(f"{k}: {v}" for k, v in {"url": f'"{url}"', **extra}.items())
    return f"""
discovery:
  - name: reg
    mcp_registry: {{{settings}}}
    template:
      probe: mcp_endpoint
      interval: 60s
      labels: {{team: eco}}
      overrides:
        - match: {{server: "io.github.acme/*"}}
          labels: {{owner: acme}}
          params: {{headers: {{Authorization: "Bearer acme-token-0123456789"}}}}
"""


async def test_pages_are_followed_by_their_cursors_to_the_end(
    registry: LocalRegistry, http: HttpClients
) -> None:
    registry.max_limit = 3
    for i in range(8):
        registry.add(f"io.example/s{i}", remotes=[remote(f"https://s{i}.example.com/mcp")])
    sink = Sink()
    manager = manager_for(registry_config(registry.url, page_size=3), http, sink)
    assert await manager.refresh("reg")
    checks = sink.last("reg")
    assert sorted(checks) == [f"reg/io.example/s{i}" for i in range(8)]
    assert [r.get("cursor") is None for r in registry.requests] == [True, False, False]
    assert {r["limit"] for r in registry.requests} == {"3"}
    assert {r["version"] for r in registry.requests} == {"latest"}
    check = checks["reg/io.example/s5"]
    assert check.params.url == "https://s5.example.com/mcp"  # type: ignore[attr-defined]
    assert dict(check.labels) == {
        "team": "eco",
        "discovery": "reg",
        "server": "io.example/s5",
        "version": "1.0.0",
        "remote": "streamable-http",
    }
    assert check.discovered is not None
    assert check.discovered.as_json() == {
        "source": "reg",
        "target": "https://s5.example.com/mcp",
        "server": "io.example/s5",
        "version": "1.0.0",
        "transport": "streamable-http",
    }
    assert check.interval == 60.0 and check.timeout == 15.0  # (mcp_endpoint's own default)


async def test_every_skip_reason_is_counted_and_one_bad_entry_skips_only_itself(
    registry: LocalRegistry, http: HttpClients, lookups: Lookups
) -> None:
    lookups.answers["inward.example.com"] = ["10.1.2.3"]
    registry.max_limit = 4  # the bad entries spread over several pages
    registry.add("io.example/good", remotes=[remote("https://good.example.com/mcp")])
    registry.add("io.example/packages-only", packages=[{"registryType": "npm"}])
    registry.add("io.example/no-remotes", remotes=[])
    registry.add("io.example/templated", remotes=[remote("https://{tenant_id}.example.com/mcp")])
    registry.add("io.example/copy", remotes=[remote("https://good.example.com/mcp")])
    registry.add("io.example/websocket", remotes=[remote("wss://ws.example.com/mcp")])
    registry.add("io.example/stdio-remote", remotes=[remote("https://x.example.com", "stdio")])
    registry.add("io.example/loopback", remotes=[remote("http://127.0.0.1:9/mcp")])
    registry.add("io.example/metadata", remotes=[remote("http://169.254.169.254/latest")])
    registry.add("io.example/inward", remotes=[remote("https://inward.example.com/mcp")])
    registry.add(
        "io.example/deleted", remotes=[remote("https://d.example.com/mcp")], status="deleted"
    )
    registry.entries.append({"server": {"name": "io.example/no-meta", "version": "1"}})
    registry.entries += [42, {"server": "nope"}, entry("not a registry name")]
    registry.add("io.example/good", remotes=[remote("https://good2.example.com/mcp")])
    registry.add("io.example/last", remotes=[remote("https://last.example.com/mcp")])
    sink = Sink()
    manager = manager_for(registry_config(registry.url, page_size=4), http, sink)
    assert await manager.refresh("reg")
    assert sorted(sink.last("reg")) == ["reg/io.example/good", "reg/io.example/last"]
    snap = manager.snapshot()[0]
    assert snap.skipped == {
        "no_remote": 2,
        "url_template": 1,
        "duplicate_url": 1,
        "not_http": 2,
        "private_address": 3,
        "deleted": 1,
        "not_latest": 1,
        "invalid_entry": 3,
        "duplicate_name": 1,
    }
    assert snap.targets == 2 and not snap.failing
    private = " ".join(snap.skipped_examples["private_address"])
    assert "loopback" in private and "link-local" in private
    assert "private (RFC 1918)" in private


async def test_several_remotes_are_named_by_type_and_secret_headers_make_it_auth_gated(
    registry: LocalRegistry, http: HttpClients
) -> None:
    secret = [{"name": "Authorization", "isRequired": True, "isSecret": True}]
    optional = [{"name": "X-Trace", "isRequired": False, "isSecret": True}]
    registry.add(
        "io.example/multi",
        remotes=[
            remote("https://m.example.com/sse", "sse"),
            remote("https://m.example.com/mcp", headers=secret),
            remote("https://m.example.com/sse2", "sse", headers=optional),
        ],
        version="2.1.0",
    )
    registry.add("io.github.acme/tools", remotes=[remote("https://acme.example.com/mcp")])
    sink = Sink()
    manager = manager_for(registry_config(registry.url), http, sink)
    assert await manager.refresh("reg")
    checks = sink.last("reg")
    assert sorted(checks) == [
        "reg/io.example/multi",
        "reg/io.example/multi#sse",
        "reg/io.example/multi#sse-2",
        "reg/io.github.acme/tools",
    ]
    main = checks["reg/io.example/multi"]
    assert main.params.url == "https://m.example.com/mcp"  # type: ignore[attr-defined]
    assert main.params.auth_gated_ok is True  # type: ignore[attr-defined]
    assert main.labels["remote"] == "streamable-http" and main.labels["version"] == "2.1.0"
    sse = checks["reg/io.example/multi#sse"]
    assert sse.labels["remote"] == "sse" and sse.discovered and sse.discovered.transport == "sse"
    assert sse.params.auth_gated_ok is False  # type: ignore[attr-defined]
    assert checks["reg/io.example/multi#sse-2"].params.auth_gated_ok is False  # type: ignore[attr-defined]
    acme = checks["reg/io.github.acme/tools"]
    assert acme.labels["owner"] == "acme" and "owner" not in main.labels
    headers = acme.params.headers  # type: ignore[attr-defined]
    assert headers["Authorization"].get_secret_value() == "Bearer acme-token-0123456789"


async def test_added_deleted_and_moved_servers_change_the_set_at_the_next_refresh(
    registry: LocalRegistry, http: HttpClients
) -> None:
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    registry.add("io.example/b", remotes=[remote("https://b.example.com/mcp")])
    sink = Sink()
    manager = manager_for(registry_config(registry.url), http, sink)
    assert await manager.refresh("reg")
    first = sink.last("reg")
    assert sorted(first) == ["reg/io.example/a", "reg/io.example/b"]
    registry.add("io.example/c", remotes=[remote("https://c.example.com/mcp")])
    registry.delete("io.example/b")
    registry.move("io.example/a", "https://new-home.example.com/mcp")
    assert await manager.refresh("reg")
    second = sink.last("reg")
    assert sorted(second) == ["reg/io.example/a", "reg/io.example/c"]
    moved = second["reg/io.example/a"]
    assert moved.params.url == "https://new-home.example.com/mcp"  # type: ignore[attr-defined]
    assert not moved.same_as(first["reg/io.example/a"])
    assert manager.snapshot()[0].skipped == {"deleted": 1}
    assert await manager.refresh("reg")  # nothing changed: the same checks, handed on again
    third = sink.last("reg")
    assert third.keys() == second.keys()
    assert all(third[name] is second[name] for name in third)  # the very same objects
    assert len(sink.calls) == 3


FAULTS = [
    ("error", 0, "http_status"),
    ("garbage", 0, "not_json"),
    ("cursor_loop", 0, "cursor_loop"),
    ("cursor_loop", 1, "cursor_loop"),
    ("oversize", 0, "too_large"),
    ("too_many", 0, "too_many_entries"),
    ("wrong_types", 0, "invalid"),
    ("error", 1, "http_status"),  # a page in the middle of the crawl
    ("hang", 0, "timeout"),
]


@pytest.mark.parametrize(("fault", "from_page", "reason"), FAULTS)
async def test_a_failing_registry_keeps_the_last_good_set(
    registry: LocalRegistry,
    http: HttpClients,
    fault: str,
    from_page: int,
    reason: str,
) -> None:
    registry.max_limit = 1
    registry.add("io.example/a", remotes=[remote("https://a.example.com/mcp")])
    registry.add("io.example/b", remotes=[remote("https://b.example.com/mcp")])
    sink = Sink()
    manager = manager_for(registry_config(registry.url, page_size=1, timeout="0.5s"), http, sink)
    assert await manager.refresh("reg")
    good = sink.last("reg")
    registry.fault, registry.fault_from_page = fault, from_page
    registry.add("io.example/c", remotes=[remote("https://c.example.com/mcp")])
    with structlog.testing.capture_logs() as logs:
        assert not await manager.refresh("reg")
        assert not await manager.refresh("reg")
    snap = manager.snapshot()[0]
    assert snap.failing and snap.errors == {reason: 2} and snap.last_error_reason == reason
    assert snap.targets == 2 and manager.checks("reg") == good
    assert len(sink.calls) == 1  # a failed refresh hands nothing on
    failing = [e for e in logs if e["event"] == "discovery source failing"]
    assert len(failing) == 1, "a failure is logged once per failing spell"
    assert failing[0]["source"] == "reg" and failing[0]["reason"] == reason
    assert failing[0]["kept_targets"] == 2 and failing[0]["log_level"] == "warning"
    registry.fault = None
    with structlog.testing.capture_logs() as logs:
        assert await manager.refresh("reg")
    assert [e["event"] for e in logs] == ["discovery source recovered"]
    assert sorted(sink.last("reg")) == ["reg/io.example/a", "reg/io.example/b", "reg/io.example/c"]
    snap = manager.snapshot()[0]
    assert not snap.failing and snap.errors == {reason: 2} and snap.last_error is not None


async def test_a_registry_that_refuses_connections(http: HttpClients) -> None:
    async with LocalRegistry() as gone:
        url = gone.url
    sink = Sink()
    manager = manager_for(registry_config(url), http, sink)
    assert not await manager.refresh("reg")
    snap = manager.snapshot()[0]
    assert snap.errors == {"connect": 1} and snap.targets == 0 and snap.last_success is None
    assert sink.calls == []


async def test_hostile_strings_never_reach_a_log_line_or_a_label_raw(
    registry: LocalRegistry, http: HttpClients
) -> None:
    evil = "\x1b[2J\x1b[31mFAKE\nlevel=error msg=injected\r\x00"
    registry.add(f"io.example/{evil}", remotes=[remote("https://e.example.com/mcp")])
    registry.add("io.example/v", remotes=[remote("https://v.example.com/mcp")], version=evil)
    registry.add("io.example/u", remotes=[remote(f"https://u.example.com/{evil}")])
    registry.add("io.example/long", remotes=[remote("https://l.example.com/" + "x" * 5000)])
    sink = Sink()
    manager = manager_for(registry_config(registry.url), http, sink)
    assert await manager.refresh("reg")
    checks = sink.last("reg")
    assert list(checks) == ["reg/io.example/v"]
    version = checks["reg/io.example/v"].labels["version"]
    assert not any(ord(c) < 0x20 for c in version) and "FAKE" in version
    snap = manager.snapshot()[0]
    assert snap.skipped == {"invalid_entry": 3}
    for examples in snap.skipped_examples.values():
        for text in examples:
            assert not any(ord(c) < 0x20 for c in text), text
    # A page whose wrong field carries control characters: the error names it, escaped.
    registry.fault = "raw"
    registry.raw_page = ('{"servers": "' + "\\u001b[31m\\nlevel=error FAKE" + '"}').encode()
    with structlog.testing.capture_logs() as logs:
        assert not await manager.refresh("reg")
    [event] = [e for e in logs if e["event"] == "discovery source failing"]
    line = event["error"]
    assert "FAKE" in line and "\x1b" not in line and "\n" not in line
    assert manager.snapshot()[0].last_error_reason == "invalid"
