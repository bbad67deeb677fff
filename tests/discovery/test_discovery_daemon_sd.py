"""Discovery in the real daemon (``alivemcp run``, a subprocess), continued: Prometheus file_sd
files edited while it runs and an http_sd server changing its answer, a hand-written check
that has a discovered one's name and a SIGHUP reload beside the discovered checks, and a
source's ``max_per_host`` held against a slow server.

The MCP servers are the lab's, served in the test's process (every request counted, and how
many at once). http_sd and file_sd allow private addresses by default: these loopback targets
are theirs to run.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from alivemcp.discovery.manager import FILE_WATCH_SECONDS
from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from tests.discovery.daemon_support import (
    INTERVAL,
    REFRESH,
    TIMEOUT,
    ServedLab,
    checks_in_metrics,
    daemon_in_process,
    off_grid,
    registry_source,
    rows,
    run_starts,
    running_daemon,
    sample,
    samples,
    settled,
    source_of,
    template,
    until,
    up,
    within,
    write_config,
)
from tests.support.aiohttp_server import serve_app
from tests.support.alerting_daemon import log_events


def write_json(path: Path, document: Any) -> None:
    """Write a file_sd file whole (text as it is, anything else as JSON), renamed into place:
    the daemon never reads it half-written."""
    part = path.with_suffix(".part")
    part.write_text(document if isinstance(document, str) else json.dumps(document))
    part.replace(path)


# -- file_sd and http_sd ---------------------------------------------------------------------


async def test_file_sd_edits_apply_while_the_daemon_runs(tmp_path: Path, lab: ServedLab) -> None:
    """Files edited under a running daemon (a target added, one removed, a file broken, then
    mended) change its checks within a look at the files, long before the source's refresh,
    and without a SIGHUP; a broken file keeps the last good set running."""
    targets = tmp_path / "targets"
    targets.mkdir()
    a, b = targets / "a.json", targets / "b.yaml"
    write_json(a, [{"targets": [lab.url("/json")], "labels": {"zone": "eu", "__meta_x": "y"}}])
    write_json(b, f"- targets: ['{lab.url('/sse')}']\n")
    source = {
        "name": "files",
        # A refresh far beyond the test's deadlines: what applies here is the file watch.
        "file_sd": {"files": ["targets/*.json", "targets/*.yaml"], "refresh": 600},
        "template": template(INTERVAL, TIMEOUT),
    }
    config = write_config(tmp_path / "c.yaml", [source])
    one_look = within(refreshes=2, refresh=FILE_WATCH_SECONDS, runs=1, interval=INTERVAL)
    json_check, sse_check = f"files/{lab.url('/json')}", f"files/{lab.url('/sse')}"
    legacy_check = f"files/{lab.url('/legacy')}"
    async with running_daemon(config) as d:
        first = await until(
            d,
            lambda: (
                (r := rows(d)).keys() == {json_check, sse_check} and all(map(up, r.values())) and r
            ),
            one_look,
            "the files' checks up",
        )
        assert first[json_check]["labels"] == {"zone": "eu", "discovery": "files"}
        assert first[sse_check]["discovered"] == {
            "source": "files",
            "target": lab.url("/sse"),
            "server": None,
            "version": None,
            "transport": None,
        }
        # A target added to one file, the other file emptied.
        write_json(a, [{"targets": [lab.url("/json"), lab.url("/legacy")]}])
        write_json(b, "[]\n")
        await until(
            d,
            lambda: (r := rows(d)).keys() == {json_check, legacy_check} and up(r[legacy_check]),
            one_look,
            "the added target up and the removed one gone",
        )
        assert sse_check not in checks_in_metrics(samples(d))
        # A broken file: the last good set runs on.
        broken_at = time.time()
        write_json(a, '[{"targets": ["http://half')
        failed = await until(
            d,
            lambda: (s := source_of(d, "files"))["last_error"] is not None and s,
            one_look,
            "the broken file noticed",
        )
        assert failed["ok"] is False and failed["last_error"]["reason"] == "not_json"
        assert failed["targets"] == 2

        def kept_running() -> bool:
            now = rows(d)
            fresh = [up(row) and row["last_run"] > broken_at for row in now.values()]
            return now.keys() == {json_check, legacy_check} and all(fresh)

        await until(
            d,
            kept_running,
            within(runs=1, interval=INTERVAL),
            "the last good set running after the file broke",
        )
        errors = sample(
            samples(d), "alivemcp_discovery_errors_total", source="files", reason="not_json"
        )
        assert errors == 1.0
        # Mended (one target left): applied as soon as it is seen.
        write_json(a, [{"targets": [lab.url("/legacy")], "labels": {"zone": "us"}}])
        mended = await until(
            d,
            lambda: (r := rows(d)).keys() == {legacy_check} and r,
            one_look,
            "the mended file applied",
        )
        assert mended[legacy_check]["labels"] == {"zone": "us", "discovery": "files"}
        assert source_of(d, "files")["ok"] is True
        assert len(log_events(d, "discovery source failing")) == 1
        # No SIGHUP, no reload: the config was loaded once, at start.
        assert sample(samples(d), "alivemcp_config_reloads_total", result="success") == 1.0


class SdEndpoint:
    """An http_sd endpoint: answers :attr:`groups` as JSON; records each request's refresh
    interval header."""

    def __init__(self) -> None:
        self.groups: list[dict[str, Any]] = []
        self.intervals: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.intervals.append(request.headers.get("X-Prometheus-Refresh-Interval-Seconds"))
        return web.json_response(self.groups)


async def test_http_sd_answers_change_the_checks(tmp_path: Path, lab: ServedLab) -> None:
    """A real http_sd server whose answer changes between refreshes: its targets become
    checks with the group's labels, a target replaced in the answer is replaced in the
    daemon; every request carries X-Prometheus-Refresh-Interval-Seconds."""
    endpoint = SdEndpoint()
    endpoint.groups = [
        {"targets": [lab.url("/json"), lab.url("/sse")], "labels": {"tier": "gold"}},
    ]
    app = web.Application()
    app.router.add_get("/sd", endpoint.handle)
    async with serve_app(app, shutdown_timeout=0.5) as served:
        source = {
            "name": "fleet",
            "http_sd": {"url": served.url + "/sd", "refresh": REFRESH},
            "template": template(INTERVAL, TIMEOUT, labels={"team": "sre"}),
        }
        config = write_config(tmp_path / "c.yaml", [source])
        async with running_daemon(config) as d:
            names = {f"fleet/{lab.url('/json')}", f"fleet/{lab.url('/sse')}"}
            first = await until(
                d,
                lambda: (r := rows(d)).keys() == names and all(map(up, r.values())) and r,
                within(refreshes=1, refresh=REFRESH, runs=1, interval=INTERVAL),
                "the http_sd targets up",
            )
            assert first[f"fleet/{lab.url('/json')}"]["labels"] == {
                "team": "sre",
                "tier": "gold",
                "discovery": "fleet",
            }
            endpoint.groups = [
                {"targets": [lab.url("/json")], "labels": {"tier": "gold"}},
                {"targets": [lab.url("/legacy")], "labels": {"tier": "silver"}},
            ]
            later = {f"fleet/{lab.url('/json')}", f"fleet/{lab.url('/legacy')}"}
            changed = await until(
                d,
                lambda: (
                    (r := rows(d)).keys() == later and up(r[f"fleet/{lab.url('/legacy')}"]) and r
                ),
                within(refreshes=1, refresh=REFRESH, runs=1, interval=INTERVAL),
                "the changed answer applied",
            )
            assert changed[f"fleet/{lab.url('/legacy')}"]["labels"]["tier"] == "silver"
            # The answer [] empties the source (the full list, every time).
            endpoint.groups = []
            await until(
                d,
                lambda: rows(d) == {} and source_of(d, "fleet")["targets"] == 0,
                within(refreshes=1, refresh=REFRESH),
                "the empty answer applied",
            )
        assert len(endpoint.intervals) >= 3
        assert set(endpoint.intervals) == {"1"}


# -- hand-written checks beside discovered ones ----------------------------------------------

#: Long enough (over the 2 s start window) that a check put back on the schedule would get
#: an early first run off its grid.
GRID_INTERVAL = 4.0


def uptime_of(d: Any, name: str) -> dict[str, Any]:
    path = f"/api/v1/checks/{quote(name, safe='')}/uptime"
    document: dict[str, Any] = d.get_json(path)
    return document


def hand_check(name: str, url: str) -> dict[str, Any]:
    return {
        "name": name,
        "probe": "mcp_endpoint",
        "interval": GRID_INTERVAL,
        "timeout": TIMEOUT,
        "params": {"url": url},
    }


async def test_a_reload_keeps_discovered_checks_and_hand_written_ones_win_a_name(
    tmp_path: Path, lab: ServedLab
) -> None:
    """SIGHUP reloads beside a registry source's checks: one that would give a hand-written
    check a discovered check's name is refused, and the old config runs on; one that adds a
    hand-written check leaves the discovered checks running as they were (the same probe
    instance, no early run, their history going on); one that drops the source and takes
    one of its checks over by hand runs the hand-written check under that name (its history
    going on), leaves the discovered one out and says so once in the log."""
    later, stays = "registry/io.github.lab/later", "registry/io.github.lab/stays"
    steady = "registry/io.github.lab/steady"
    async with LocalRegistry() as registry:
        registry.add("io.github.lab/later", remotes=[remote(lab.url("/sse"))])
        registry.add("io.github.lab/stays", remotes=[remote(lab.url("/legacy"), "sse")])
        registry.add("io.github.lab/steady", remotes=[remote(lab.url("/delayed/0/sse"))])
        source = {
            # Loopback servers only on this machine: the registry's default would refuse them.
            **registry_source(
                "registry", registry.url, refresh=REFRESH, allow_private_addresses=True
            ),
            "template": template(GRID_INTERVAL, TIMEOUT),
        }
        config = write_config(tmp_path / "c.yaml", [source])
        first = within(refreshes=1, refresh=REFRESH, runs=2, interval=GRID_INTERVAL)
        async with running_daemon(config) as d:
            start = await until(
                d,
                lambda: (
                    (r := rows(d)).keys() == {later, stays, steady}
                    and all(len(row["history"]) >= 2 and up(row) for row in r.values())
                    and r
                ),
                first,
                "every discovered check run twice",
            )
            before = {name: uptime_of(d, name)["runs"]["up"] for name in start}
            assert lab.seen("POST /legacy") == 1  # (one probe instance finds the transport)

            # 1. A hand-written check of a discovered check's name: the reload is refused.
            write_config(config, [source], [hand_check(later, lab.url("/delayed/1/sse"))])
            d.signal(signal.SIGHUP)
            await until(
                d,
                lambda: sample(samples(d), "alivemcp_config_last_reload_successful") == 0.0,
                within(),
                "the reload refused",
            )
            assert "would name discovered checks 'registry/...'" in d.logs()
            assert "discovered" in rows(d)[later]

            # 2. A hand-written check of another name: the discovered checks run on as they
            # were (that the hand-written names changed also restarts the source).
            extra = hand_check("extra", lab.url("/delayed/2/json"))
            reloaded_at = time.time()
            write_config(config, [source], [extra])
            d.signal(signal.SIGHUP)
            reads = len(registry.requests)
            after = await until(
                d,
                lambda: (
                    up((r := rows(d)).get("extra", {}))
                    and len(registry.requests) >= reads + 3
                    and all(uptime_of(d, n)["runs"]["up"] >= before[n] + 2 for n in before)
                    and r
                ),
                within(refreshes=3, refresh=REFRESH, runs=2, interval=GRID_INTERVAL),
                "the reload applied, three refreshes and two more runs of each discovered check",
            )
            assert after.keys() == {later, stays, steady, "extra"}
            configured = sample(samples(d), "alivemcp_checks_configured", probe="mcp_endpoint")
            assert configured == 4.0
            assert sample(samples(d), "alivemcp_config_last_reload_successful") == 1.0
            assert lab.seen("POST /legacy") == 1
            for name in (later, stays, steady):
                assert after[name]["since"] == start[name]["since"]
                starts = run_starts(after[name])
                assert min(starts) < reloaded_at < max(starts)
                problems = off_grid(name, GRID_INTERVAL, starts[1:])
                assert problems == [], (name, problems, starts)

            # 3. The source dropped, one of its checks taken over by hand under its name.
            runs_before = uptime_of(d, later)["runs"]["up"]
            taken_at = time.time()
            write_config(config, [], [extra, hand_check(later, lab.url("/delayed/1/sse"))])
            d.signal(signal.SIGHUP)
            taken = await until(
                d,
                lambda: (
                    (r := rows(d)).keys() == {later, "extra"}
                    and "discovered" not in r[later]
                    and r[later]["last_run"] > taken_at
                    and r
                ),
                within(runs=1, interval=GRID_INTERVAL),
                "the hand-written check run under the discovered one's name",
            )
            assert up(taken[later]) and lab.seen("POST /delayed/1/sse") > 0
            assert uptime_of(d, later)["runs"]["up"] > runs_before  # (its history goes on)
            left_out = log_events(d, "discovered check left out: a hand-written check has its name")
            assert [e["check"] for e in left_out] == [later], left_out
            metrics = samples(d)
            assert stays not in checks_in_metrics(metrics)
            assert sample(metrics, "alivemcp_checks_configured", probe="mcp_endpoint") == 2.0


# -- politeness ------------------------------------------------------------------------------


def slow_targets(lab: ServedLab) -> list[str]:
    """Four MCP servers on one host, each answering every request after 200 ms or so (a run
    takes three requests: over half a second)."""
    return [lab.url(f"/delayed/{ms}/json") for ms in (200, 201, 202, 203)]


async def test_max_per_host_holds_runs_against_one_host_to_the_limit(
    tmp_path: Path, lab: ServedLab
) -> None:
    """A source with ``max_per_host: 1`` and four slow servers on one host: never more than
    one request at that host at once, and each server still gets runs. The same four on
    another server from a source with the default (4) overlap: runs of over half a second,
    four every two seconds, cannot all fit one at a time."""
    (tmp_path / "polite.json").write_text(json.dumps([{"targets": slow_targets(lab)}]))
    async with ServedLab().serving() as other:
        (tmp_path / "eager.json").write_text(json.dumps([{"targets": slow_targets(other)}]))
        polite = {
            "name": "polite",
            "file_sd": {"files": ["polite.json"]},
            "max_per_host": 1,
            "template": template(INTERVAL, INTERVAL),
        }
        eager = {
            "name": "eager",
            "file_sd": {"files": ["eager.json"]},
            "template": template(INTERVAL, INTERVAL),
        }
        config = write_config(tmp_path / "c.yaml", [polite, eager])
        async with running_daemon(config) as d:

            def all_ran_twice() -> bool:
                now = rows(d)
                return len(now) == 8 and all(len(row["history"]) >= 2 for row in now.values())

            await until(
                d,
                all_ran_twice,
                # One at a time, each run over half a second: four a round, two rounds.
                within(runs=4 * 2, interval=INTERVAL),
                "every check run twice",
            )
            assert lab.most_in_flight == 1, lab.most_in_flight
            assert other.most_in_flight >= 2, other.most_in_flight


async def test_a_run_waiting_for_its_host_is_dropped_when_its_target_leaves(
    tmp_path: Path, lab: ServedLab
) -> None:
    """``max_per_host: 1``, the host's slot held by a run the test holds open: runs of two
    other targets wait for it. One target is deleted and the other moved while they wait:
    neither the deleted target nor the moved one's old URL is ever contacted, and the moved
    check's first run goes to its new URL. (The daemon runs in this process: only its
    scheduler shows that a run waits for a slot.)"""
    holder, gone, moving, added = (
        "registry/io.github.lab/holder",
        "registry/io.github.lab/gone",
        "registry/io.github.lab/moving",
        "registry/io.github.lab/added",
    )
    async with LocalRegistry() as registry:
        registry.add("io.github.lab/holder", remotes=[remote(lab.url("/gate/json"))])
        quick = 0.2  # (the refresh: what matters here happens while a run waits)
        source = {
            # Loopback servers only on this machine: the registry's default would refuse them.
            **registry_source(
                "registry", registry.url, refresh=quick, allow_private_addresses=True
            ),
            "max_per_host": 1,
            # Runs far apart, and a timeout that lets the held run hold the slot throughout.
            "template": template(30.0, 30.0),
        }
        config = write_config(tmp_path / "c.yaml", [source], server={"listen": "127.0.0.1:0"})
        async with daemon_in_process(config) as daemon:
            checks, store = daemon.scheduler.checks, daemon.store
            await settled(
                lambda: (s := store.get(holder)) is not None and s.in_flight,
                within(refreshes=1, refresh=quick, runs=1, interval=2.0),
                "the holder's run holding the host's slot",
            )
            registry.add("io.github.lab/gone", remotes=[remote(lab.url("/delayed/0/json"))])
            registry.add("io.github.lab/moving", remotes=[remote(lab.url("/delayed/1/json"))])
            await settled(
                lambda: all(
                    (e := checks.get(n)) is not None and e.waiter is not None
                    for n in (gone, moving)
                ),
                within(refreshes=1, refresh=quick, runs=1, interval=2.0),
                "two runs waiting for the host's slot",
            )
            registry.delete("io.github.lab/gone")
            registry.move("io.github.lab/moving", lab.url("/delayed/2/json"))
            registry.add("io.github.lab/added", remotes=[remote(lab.url("/delayed/3/json"))])
            await settled(
                lambda: (
                    store.get(gone) is None
                    and store.get(added) is not None
                    and (s := store.get(moving)) is not None
                    and s.info.discovered is not None
                    and s.info.discovered.target == lab.url("/delayed/2/json")
                ),
                within(refreshes=2, refresh=quick),
                "the deletion, the move and the addition applied",
            )
            lab.gate.set()  # the holder's run ends: the host's slot is free
            await settled(
                lambda: all(
                    (s := store.get(n)) is not None and s.last is not None
                    for n in (holder, added, moving)
                ),
                within(runs=2, interval=2.0),
                "the holder's, the added and the moved check's runs",
            )
            assert lab.seen("POST /delayed/0/json") == 0, lab.state.seen  # (deleted)
            assert lab.seen("POST /delayed/1/json") == 0, lab.state.seen  # (moved away)
            assert lab.seen("POST /delayed/2/json") > 0 and lab.seen("POST /delayed/3/json") > 0
            assert lab.most_in_flight == 1
