"""Discovery in the real daemon (``alivemcp run``, a subprocess) from a local MCP registry
(``alivemcp.testbed.mcp_registry``) listing real MCP servers: the lab, served in the test's
process so that every request reaching it is counted, and the official Python SDK's servers.

The machine is loopback only: every MCP server here listens on 127.0.0.1, so a source whose
checks are meant to run says ``allow_private_addresses: true`` (the registry's default,
false, refuses them: test_discovery_daemon_inward.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from alivemcp.testbed.mcp_servers import SERVER_NAME, ServerProcess, start_server
from tests.discovery.daemon_support import (
    INTERVAL,
    REFRESH,
    TIMEOUT,
    ServedLab,
    checks_in_metrics,
    off_grid,
    registry_source,
    rows,
    run_starts,
    running_daemon,
    sample,
    samples,
    source_of,
    template,
    until,
    up,
    within,
    write_config,
)
from tests.support import REPO
from tests.support.alerting_daemon import log_events

#: Every refresh of the sources here, and every check's interval (seconds).


RULES = REPO / "deploy" / "prometheus" / "alivemcp-rules.yaml"


@pytest.fixture(scope="module")
def sdk_stateful() -> Iterator[ServerProcess]:
    with start_server("sdk-stateful") as server:
        yield server


@pytest.fixture(scope="module")
def sdk_legacy_sse() -> Iterator[ServerProcess]:
    with start_server("sdk-legacy-sse") as server:
        yield server


def trusted_registry(url: str, **settings: Any) -> dict[str, Any]:
    """The ``registry`` source; ``allow_private_addresses: true`` because every MCP server on
    this loopback-only machine is at 127.0.0.1 (the default would refuse them all)."""
    return {
        **registry_source(
            "registry", url, refresh=REFRESH, allow_private_addresses=True, **settings
        ),
        "template": template(INTERVAL, TIMEOUT, labels={"team": "ecosystem"}),
    }


async def test_every_listed_remote_becomes_a_check_that_runs(
    tmp_path: Path,
    lab: ServedLab,
    registry: LocalRegistry,
    sdk_stateful: ServerProcess,
    sdk_legacy_sse: ServerProcess,
) -> None:
    """Several real MCP servers over several pages: each remote a check named
    ``registry/<server>`` (``#sse`` for a second remote), labelled, run and up; every skip
    reason counted; the API and ``/metrics`` say so."""
    registry.add("io.github.lab/streamable", remotes=[remote(lab.url("/json"))])
    registry.add("io.github.lab/stateful", remotes=[remote(lab.url("/sse"))], version="2.1.0")
    registry.add("io.github.lab/legacy", remotes=[remote(lab.url("/legacy"), "sse")])
    registry.add(
        "io.github.sdk/python",
        remotes=[remote(sdk_legacy_sse.url, "sse"), remote(sdk_stateful.url)],
    )
    # What is left out, one reason each (and two of not_http).
    registry.add("io.github.x/packages-only", packages=[{"registryType": "npm"}])
    registry.add("io.github.x/templated", remotes=[remote(lab.url("/{tenant_id}/json"))])
    registry.add("io.github.x/copy", remotes=[remote(lab.url("/json"))])
    registry.add("io.github.x/websocket", remotes=[remote("ws://127.0.0.1:9/mcp")])
    registry.add("io.github.x/stdio", remotes=[remote(lab.url("/html"), "stdio")])
    registry.add("io.github.x/gone", remotes=[remote(lab.url("/error500"))], status="deleted")
    registry.add("io.github.lab/streamable", remotes=[remote(lab.url("/drift"))])
    registry.add("not a registry name", remotes=[remote(lab.url("/html"))])
    config = write_config(tmp_path / "c.yaml", [trusted_registry(registry.url, page_size=3)])
    expected = {
        "registry/io.github.lab/streamable": (
            "io.github.lab/streamable",
            "1.0.0",
            "streamable-http",
            "/json",
        ),
        "registry/io.github.lab/stateful": (
            "io.github.lab/stateful",
            "2.1.0",
            "streamable-http",
            "/sse",
        ),
        "registry/io.github.lab/legacy": ("io.github.lab/legacy", "1.0.0", "sse", "/legacy"),
        "registry/io.github.sdk/python": (
            "io.github.sdk/python",
            "1.0.0",
            "streamable-http",
            sdk_stateful.url,
        ),
        "registry/io.github.sdk/python#sse": (
            "io.github.sdk/python",
            "1.0.0",
            "sse",
            sdk_legacy_sse.url,
        ),
    }
    async with running_daemon(config) as d:
        found = await until(
            d,
            lambda: (r := rows(d)).keys() == expected.keys() and all(map(up, r.values())) and r,
            within(refreshes=1, refresh=REFRESH, runs=1, interval=INTERVAL),
            "every discovered check up",
        )
        for name, (server, version, kind, where) in expected.items():
            row = found[name]
            url = where if "://" in where else lab.url(where)
            assert row["probe"] == "mcp_endpoint"
            assert row["labels"] == {
                "team": "ecosystem",
                "discovery": "registry",
                "server": server,
                "version": version,
                "remote": kind,
            }, name
            assert row["discovered"] == {
                "source": "registry",
                "target": url,
                "server": server,
                "version": version,
                "transport": kind,
            }, name
        # Several pages, each asked for by the cursor the one before gave.
        pages = [r for r in registry.requests if r.get("limit") == "3"]
        assert pages[0].get("cursor") is None and pages[1].get("cursor")
        assert len({r.get("cursor") for r in pages}) == 4  # 12 entries, 3 a page

        source = source_of(d, "registry")
        assert source["kind"] == "mcp_registry" and source["ok"] is True
        assert source["targets"] == 5
        assert source["skipped"] == {
            "deleted": 1,
            "duplicate_name": 1,
            "duplicate_url": 1,
            "invalid_entry": 1,
            "no_remote": 1,
            "not_http": 2,
            "url_template": 1,
        }
        assert source["last_error"] is None and source["last_success"] is not None
        metrics = samples(d)
        assert checks_in_metrics(metrics) == expected.keys()
        assert sample(metrics, "alivemcp_discovery_targets", source="registry") == 5.0
        assert sample(metrics, "alivemcp_checks_configured", probe="mcp_endpoint") == 5.0
        assert (
            sample(metrics, "alivemcp_discovery_last_refresh_successful", source="registry") == 1.0
        )
        assert (
            sample(metrics, "alivemcp_discovery_last_success_timestamp_seconds", source="registry")
            or 0
        ) > 0
        for reason, count in source["skipped"].items():
            assert (
                sample(
                    metrics, "alivemcp_discovery_skipped_targets", source="registry", reason=reason
                )
                == count
            )
        assert (
            sample(
                metrics,
                "alivemcp_discovery_skipped_targets",
                source="registry",
                reason="private_address",
            )
            == 0.0
        )
        assert (
            sample(metrics, "alivemcp_discovery_errors_total", source="registry", reason="timeout")
            == 0.0
        )
        # The discovery group of deploy/prometheus's rules names only what is exported here.
        groups = yaml.safe_load(RULES.read_text())["groups"]
        (group,) = [g for g in groups if g["name"] == "alivemcp-discovery"]
        used = {m for r in group["rules"] for m in re.findall(r"\balivemcp_[a-z_]+", r["expr"])}
        exported = {name for name, _ in metrics}
        assert used and used <= exported, used - exported
        # The lab's own requests came from these checks only (the "copy" and the second
        # "streamable" entry were left out: nobody asked /drift).
        assert lab.seen("POST /json") > 0 and lab.seen("POST /drift") == 0


#: The churn test's interval: long enough (over the 2 s start window) that a check put back on
#: the schedule would get an early first run off its grid.
CHURN_INTERVAL = 4.0
LOG_ALERTS = {
    "receivers": [{"name": "log", "type": "log"}],
    "default_receivers": ["log"],
    "policy": {"failures_to_fire": 1},
    "group_wait": 0,
    "group_interval": 0,
}


def path_of(name: str) -> str:
    return "/api/v1/checks/" + quote(name, safe="") + "/uptime?window=24h"


async def test_added_deleted_and_moved_entries_change_only_their_checks(
    tmp_path: Path, lab: ServedLab, registry: LocalRegistry, sdk_stateful: ServerProcess
) -> None:
    """Between two refreshes one entry is added, one (firing) deleted, one moved: the new one
    runs, the deleted one leaves /status and /metrics and its alert resolves, the moved one
    keeps its name, status and history; the others are neither rebuilt nor run early."""
    steady, legacy = "registry/io.github.lab/steady", "registry/io.github.lab/legacy"
    broken, moving = "registry/io.github.lab/broken", "registry/io.github.lab/moving"
    added = "registry/io.github.lab/added"
    registry.add("io.github.lab/steady", remotes=[remote(lab.url("/json"))])
    registry.add("io.github.lab/legacy", remotes=[remote(lab.url("/legacy"), "sse")])
    registry.add("io.github.lab/broken", remotes=[remote(lab.url("/error500"))])
    registry.add("io.github.lab/moving", remotes=[remote(lab.url("/sse"))])
    source = trusted_registry(registry.url)
    source["template"]["interval"] = CHURN_INTERVAL
    config = write_config(tmp_path / "c.yaml", [source], alerting=LOG_ALERTS)
    first = within(refreshes=1, refresh=REFRESH, runs=2, interval=CHURN_INTERVAL)
    async with running_daemon(config) as d:
        await until(
            d,
            lambda: [a["check"] for a in d.get_json("/status")["alerts"]] == [broken],
            first,
            "the broken server's alert firing",
        )
        await until(
            d,
            lambda: any(
                e["check"] == broken and e["notification_event"] == "firing"
                for e in log_events(d, "alert")
            ),
            first,
            "the firing alert sent",
        )
        # The moved server's history before the move: two runs at least.
        before = await until(
            d,
            lambda: (u := d.get_json(path_of(moving)))["runs"]["up"] >= 2 and u,
            first,
            "two runs of the server that will move",
        )
        old = rows(d)
        assert up(old[steady]) and up(old[legacy]) and up(old[moving])
        assert lab.seen("POST /legacy") == 1  # (one probe instance finds the transport once)

        changed_at = time.time()
        registry.add("io.github.lab/added", remotes=[remote(lab.url("/delayed/0/json"))])
        registry.delete("io.github.lab/broken")
        registry.move("io.github.lab/moving", sdk_stateful.url)
        now = await until(
            d,
            lambda: added in (r := rows(d)) and broken not in r and r,
            within(refreshes=1, refresh=REFRESH),
            "the next refresh applied",
        )
        # The deleted check left /status, /metrics and the firing alerts at that refresh.
        assert broken not in checks_in_metrics(samples(d))
        assert d.get_json("/status")["alerts"] == []
        # Its resolve is queued at that refresh and sent once its state is saved.
        resolved = await until(
            d,
            lambda: [
                e
                for e in log_events(d, "alert")
                if e["check"] == broken and e["notification_event"] == "resolved"
            ],
            first,
            "the broken server's alert resolved",
        )
        assert len(resolved) == 1 and resolved[0]["reason"] == "target left its discovery source"
        assert now[moving]["discovered"]["target"] == sdk_stateful.url
        # The added one runs; the moved one runs at its new URL, its history going on.
        after = await until(
            d,
            lambda: (
                up((r := rows(d))[added])
                and r[moving]["last_run"] > changed_at
                and (u := d.get_json(path_of(moving)))["runs"]["up"] >= before["runs"]["up"] + 2
                and (r, u)
            ),
            within(refreshes=1, refresh=REFRESH, runs=2, interval=CHURN_INTERVAL),
            "the added check up and two runs of the moved one at its new URL",
        )
        moved_row = after[0][moving]
        assert up(moved_row) and moved_row["since"] == old[moving]["since"]
        assert SERVER_NAME in moved_row["reason"]  # (the SDK's server answers now)
        starts = run_starts(moved_row)
        assert min(starts) < changed_at < max(starts)  # runs before and after the move
        # One history: the runs before the move and those after it, none lost or doubled.
        since_move = sum(1 for start in starts if start > changed_at)
        assert after[1]["runs"]["up"] >= before["runs"]["up"] + since_move
        assert after[1]["runs"]["down"] == 0 and after[1]["runs"]["unknown"] == 0
        metrics = samples(d)
        assert added in checks_in_metrics(metrics)
        assert sample(metrics, "alivemcp_checks_configured", probe="mcp_endpoint") == 4.0
        sse_runs = lab.seen("POST /sse")
        # The unchanged ones: the same probe instances (the legacy server's transport was
        # found once), and every run on its grid, one a grid point.
        final = rows(d)
        assert lab.seen("POST /legacy") == 1
        for name in (steady, legacy):
            assert final[name]["since"] == old[name]["since"]
            problems = off_grid(name, CHURN_INTERVAL, run_starts(final[name])[1:])
            assert problems == [], (name, problems, run_starts(final[name]))
        assert lab.seen("POST /sse") == sse_runs  # nothing asks the old URL any more


#: Each fault of the registry, and the reason the daemon counts it by.
FAULTS = [
    ("error", "http_status"),
    ("hang", "timeout"),
    ("garbage", "not_json"),
    ("cursor_loop", "cursor_loop"),
    ("oversize", "too_large"),
    ("too_many", "too_many_entries"),
    ("wrong_types", "invalid"),
]
#: Time allowed for each registry page (a hung one counts as a failure after it).
PAGE_TIMEOUT = 1.0


async def test_a_failing_registry_keeps_the_last_good_set_running(
    tmp_path: Path, lab: ServedLab, registry: LocalRegistry
) -> None:
    """500, a hang past the timeout, garbage, a cursor loop, an oversize page, too many
    entries, wrong types, each on the second page: the checks of the last good read go on,
    the failing spell is logged once, counted by reason and shown as last_error; the daemon
    stays up; once the registry mends, its changes apply; and when it is gone for good
    (connections refused) its checks stay too."""
    names = ["registry/io.github.lab/a", "registry/io.github.lab/b", "registry/io.github.lab/c"]
    registry.add("io.github.lab/a", remotes=[remote(lab.url("/json"))])
    registry.add("io.github.lab/b", remotes=[remote(lab.url("/sse"))])
    registry.add("io.github.lab/c", remotes=[remote(lab.url("/legacy"), "sse")])
    config = write_config(
        tmp_path / "c.yaml",
        [trusted_registry(registry.url, page_size=2, timeout=PAGE_TIMEOUT)],
    )
    refresh = REFRESH + PAGE_TIMEOUT  # (the longest a refresh takes here, a hung one)
    async with running_daemon(config) as d:
        await until(
            d,
            lambda: sorted(n for n, row in rows(d).items() if up(row)) == names,
            within(refreshes=1, refresh=refresh, runs=1, interval=INTERVAL),
            "the registry's checks up",
        )
        registry.fault_from_page = 1
        failing_since = time.time()

        def failed_with(reason: str) -> Callable[[], dict[str, Any] | None]:
            def look() -> dict[str, Any] | None:
                source = source_of(d, "registry")
                error = source["last_error"]
                return source if error is not None and error["reason"] == reason else None

            return look

        for fault, reason in FAULTS:
            registry.fault = fault
            failed = await until(
                d,
                failed_with(reason),
                within(refreshes=2, refresh=refresh),
                f"a refresh failing with {reason} ({fault})",
            )
            assert failed["ok"] is False and failed["targets"] == 3, failed
            assert failed["errors"][reason] >= 1
            metrics = samples(d)
            counted = sample(
                metrics, "alivemcp_discovery_errors_total", source="registry", reason=reason
            )
            assert counted is not None and counted >= 1, (reason, counted)
            assert sample(metrics, "alivemcp_discovery_targets", source="registry") == 3.0
            assert (
                sample(metrics, "alivemcp_discovery_last_refresh_successful", source="registry")
                == 0.0
            )
        # An entry added meanwhile waits for a read that succeeds.
        registry.add("io.github.lab/d", remotes=[remote(lab.url("/delayed/0/sse"))])
        # The last good set ran all along, and the daemon is up and ready.
        kept = await until(
            d,
            lambda: (
                all(
                    up(row) and row["last_run"] > failing_since
                    for name, row in rows(d).items()
                    if name in names
                )
                and rows(d)
            ),
            within(runs=1, interval=INTERVAL),
            "the kept checks running",
        )
        assert sorted(kept) == names
        assert d.get("/healthz")[0] == 200 and d.get("/readyz")[0] == 200
        assert d.proc is not None and d.proc.poll() is None
        registry.fault = None
        await until(
            d,
            lambda: "registry/io.github.lab/d" in rows(d) and source_of(d, "registry")["ok"],
            within(refreshes=2, refresh=refresh),
            "the registry read again after it mended",
        )
        failing = log_events(d, "discovery source failing")
        assert len(failing) == 1 and failing[0]["reason"] == "http_status", failing
        assert len(log_events(d, "discovery source recovered")) == 1
        source = source_of(d, "registry")
        assert source["targets"] == 4 and source["last_error"]["reason"] == "invalid"
        assert set(source["errors"]) >= {reason for _, reason in FAULTS}
        # Gone altogether (connections refused): the same, once more.
        await registry.stop()
        refused = await until(
            d,
            lambda: (s := source_of(d, "registry"))["errors"].get("connect") and s,
            within(refreshes=2, refresh=refresh),
            "a refresh refused",
        )
        assert refused["targets"] == 4 and refused["last_error"]["reason"] == "connect"
        assert len(rows(d)) == 4 and d.get("/healthz")[0] == 200
        assert len(log_events(d, "discovery source failing")) == 2  # (a second spell)
