"""The ``composite`` probe type ("can we fail over now"): one verdict from other checks' latest
results, in the real daemon, with test probes whose state a file or their params set.

Seed 004's case: a DR endpoint that answers beside a replication-lag check that is red means the
DR server is up but would serve a stale bucket; the composite must say down and name the
replication member. A composite reads results, it never runs its members."""

from __future__ import annotations

import itertools
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from alivemcp.config import ConfigError, load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.grid import MIN_START_WINDOW
from alivemcp.engine.status import StatusStore
from alivemcp.plumbing import Plumbing
from alivemcp.probe import Status
from tests.support import DaemonProcess, cli, run_times, write_daemon_config

# How late a run may be on this shared 2-core machine without the test calling it a bug.
SLACK = 1.0


def file_check(tmp_path: Path, name: str, state: str, *, interval: float = 1.0) -> dict[str, Any]:
    """A ``test_file`` check whose status (and reason, on the second line) a file sets."""
    path = tmp_path / f"{name}.state"
    path.write_text(state)
    return {"name": name, "probe": "test_file", "interval": interval, "params": {"path": str(path)}}


def composite(
    name: str, members: list[str], *, interval: float = 0.5, **params: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "probe": "composite",
        "interval": interval,
        "params": {"members": members, **params},
    }


def row(d: DaemonProcess, name: str) -> dict[str, Any]:
    return d.status_of(name)


def runs_of(d: DaemonProcess, name: str) -> float:
    """alivemcp_check_runs_total of one check, over every result."""
    metrics = d.get("/metrics")[1]
    return sum(
        float(m.group(1))
        for m in re.finditer(
            rf'^alivemcp_check_runs_total\{{[^}}]*check="{re.escape(name)}"[^}}]*\}} (\S+)$',
            metrics,
            re.M,
        )
    )


def wait_status(
    d: DaemonProcess, name: str, status: str, timeout: float = 15.0, reason: str | None = None
) -> dict[str, Any]:
    """The check's /status row once it has ``status`` (and, if given, exactly ``reason``:
    while members are still getting their first results the composite says other things)."""

    def ready() -> dict[str, Any] | None:
        r = row(d, name)
        if r.get("status") != status:
            return None
        if reason is not None and r["reason"] != reason:
            return None
        return r

    return d.wait_for(ready, timeout=timeout, what=f"{name} {status} {reason or ''}")


# -- the seed-004 case, on the real daemon ---------------------------------------------------


def test_dr_readiness_follows_its_members_and_never_runs_them(tmp_path: Path) -> None:
    """Healthy members → up; endpoint up + replication down → down, naming the replication
    member with its reason first; back up when replication recovers. Meanwhile a member that
    a fast composite reads runs only on its own schedule."""
    endpoint = file_check(tmp_path, "dr-endpoint", "up\nMCP initialize ok")
    replication = file_check(tmp_path, "dr-replication", "up\nreplication lag 2s")
    counted_log = tmp_path / "counted.txt"
    member_interval = 2.0
    counted = {
        "name": "counted",
        "probe": "test_static",
        "interval": member_interval,
        "params": {"record_to": str(counted_log)},
    }
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            endpoint,
            replication,
            counted,
            composite("dr-ready", ["dr-endpoint", "dr-replication"]),
            # Reads `counted` about seven times per member interval.
            composite("reads-counted", ["counted"], interval=0.3),
        ],
    )
    with DaemonProcess(config) as d:
        started = time.time()
        up = wait_status(d, "dr-ready", "up", reason="dr-endpoint up; dr-replication up")
        assert up["observations"] == {"members": 2.0, "members_up": 2.0}, up
        assert [m["check"] for m in up["details"]["members"]] == ["dr-endpoint", "dr-replication"]

        Path(replication["params"]["path"]).write_text("down\nreplication lag 312s > 60s")
        down = wait_status(d, "dr-ready", "down")
        assert down["reason"] == (
            "dr-replication down (replication lag 312s > 60s); dr-endpoint up"
        ), down
        assert down["details"]["members"][1]["status"] == "down"
        assert down["observations"] == {"members": 2.0, "members_up": 1.0}
        # Its own metrics, like any check.
        metrics = d.get("/metrics")[1]
        assert re.search(
            r'^alivemcp_probe_members_up\{[^}]*check="dr-ready"[^}]*\} 1\.0$', metrics, re.M
        ), metrics[-2000:]

        Path(replication["params"]["path"]).write_text("up\nreplication lag 3s")
        wait_status(d, "dr-ready", "up")

        # Let the fast composite read `counted` many times over several member intervals.
        d.wait_for(
            lambda: time.time() - started > 4 * member_interval + SLACK,
            timeout=20,
            what="four member intervals",
        )
        elapsed = time.time() - started
        composite_runs = runs_of(d, "reads-counted")
        assert row(d, "reads-counted")["status"] == "up"
        assert d.stop() == 0
    runs = run_times(counted_log)
    # One first run soon after start, then one per interval: never more, although the
    # composite reading it ran every 0.3 s, several times as often.
    assert 2 <= len(runs) <= elapsed / member_interval + 2, (len(runs), elapsed, runs)
    assert composite_runs >= 2 * len(runs), (composite_runs, runs)
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(g >= member_interval / 2 - 0.05 for g in gaps), gaps


def test_stale_and_never_run_members_are_unknown_and_down_outranks_them(tmp_path: Path) -> None:
    """A member with no result yet, or whose result is older than max_age, counts as unknown
    ("no fresh result"): the composite is unknown when that is all that is wrong, and down when
    another member is down (a member the prober cannot see never hides one that is red)."""
    never = {
        "name": "never",
        "probe": "test_sleepy",
        "interval": 120,
        "timeout": 60,
        "params": {"seconds": 60, "markers": str(tmp_path / "markers")},
    }
    slow = {"name": "slow", "probe": "test_static", "interval": 60, "params": {"reason": "slow ok"}}
    gone = file_check(tmp_path, "gone", "down\nconnection refused")
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            never,
            slow,
            gone,
            composite("waits", ["never", "slow"]),
            composite("red", ["never", "gone"]),
            # `slow` runs once at start, then not for at least 30 s: its result goes stale.
            composite("fresh", ["slow"], max_age="1.5s"),
        ],
        scheduler={"shutdown_grace": 0.5},
    )
    with DaemonProcess(config) as d:
        waits = wait_status(d, "waits", "unknown", reason="never unknown (no result yet); slow up")
        assert waits["details"]["members"][0] == {
            "check": "never",
            "status": "unknown",
            "reason": "no result yet",
            "age_seconds": None,
        }
        wait_status(
            d, "red", "down", reason="gone down (connection refused); never unknown (no result yet)"
        )
        wait_status(d, "fresh", "up")
        stale = wait_status(d, "fresh", "unknown", timeout=10)
        assert re.fullmatch(
            r"slow unknown \(no fresh result: last one \d+s old, "
            r"max_age 1\.5s\)",
            stale["reason"],
        ), stale
        assert row(d, "slow")["status"] == "up"  # the member itself is still up
        assert d.stop() == 0


def test_first_run_waits_for_a_member_still_on_its_first_run(tmp_path: Path) -> None:
    """At start-up a composite and its members get their first runs in the same start window,
    in no set order: the composite's first run waits for a member's first result instead of
    reporting unknown. The member answers only after the whole start window (2 s) has passed,
    so the composite's first run certainly began before that result existed."""
    member = {
        "name": "slow-start",
        "probe": "test_static",
        "interval": 60,
        "params": {"delay": MIN_START_WINDOW + 0.2, "reason": "warmed up"},
    }
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [member, {**composite("dr-ready", ["slow-start"], interval=60), "timeout": 20}],
    )
    with DaemonProcess(config) as d:
        first = d.wait_for(
            lambda: row(d, "dr-ready").get("last_run") and row(d, "dr-ready"),
            timeout=20,
            what="the composite's first result",
        )
        assert first["status"] == "up" and first["reason"] == "slow-start up", first
        assert len(first["history"]) == 1
        assert d.stop() == 0


def test_any_up_and_quorum_over_a_multi_target_member(tmp_path: Path) -> None:
    """A multi-target check's base name stands for all its targets; quorum counts each target;
    any_up is up with one member up and the best member status otherwise."""
    region = {
        "name": "region",
        "probe": "test_static",
        "interval": 1,
        "targets": [
            {"name": "east", "params": {"status": "up"}},
            {"name": "west", "params": {"status": "down", "reason": "west gone"}},
            {"name": "south", "params": {"status": "up"}},
        ],
    }
    degraded = {
        "name": "slow-disk",
        "probe": "test_static",
        "interval": 1,
        "params": {"status": "degraded", "reason": "p99 4s"},
    }
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            region,
            degraded,
            composite("two-of-three", ["region"], rule="quorum", quorum=2),
            composite("all-three", ["region"], rule="quorum", quorum=3),
            composite("one-region", ["region/west", "region/east"], rule="any_up"),
            composite("none-up", ["region/west", "slow-disk"], rule="any_up"),
        ],
    )
    with DaemonProcess(config) as d:
        quorum = wait_status(
            d,
            "two-of-three",
            "up",
            reason=(
                "2 of 3 up (need 2): region/west down (west gone); region/east up; region/south up"
            ),
        )
        assert quorum["observations"] == {"members": 3.0, "members_up": 2.0}
        wait_status(
            d,
            "all-three",
            "down",
            reason=(
                "2 of 3 up (need 3): region/west down (west gone); region/east up; region/south up"
            ),
        )
        wait_status(
            d,
            "one-region",
            "up",
            reason="1 of 2 up (need 1): region/west down (west gone); region/east up",
        )
        # Nothing up: the best there is, degraded, not down.
        wait_status(
            d,
            "none-up",
            "degraded",
            reason=(
                "0 of 2 up (need 1): region/west down (west gone); slow-disk degraded (p99 4s)"
            ),
        )
        assert d.stop() == 0


def test_reload_that_adds_a_target_to_a_member_is_seen_by_the_composite(tmp_path: Path) -> None:
    """What a base name stands for is resolved at load: a reload that adds a target rebuilds
    the composite so it judges the new target too."""

    def doc(targets: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "name": "region",
                "probe": "test_static",
                "interval": 1,
                "targets": [{"name": t, "params": {"status": "up"}} for t in targets],
            },
            composite("regions", ["region"]),
        ]

    config = write_daemon_config(tmp_path / "c.yaml", doc(["east"]))
    with DaemonProcess(config) as d:
        assert wait_status(d, "regions", "up")["reason"] == "region/east up"
        write_daemon_config(tmp_path / "c.yaml", doc(["east", "west"]))
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: row(d, "regions").get("reason") == "region/east up; region/west up",
            timeout=15,
            what="the composite judging both targets",
        )
        assert d.stop() == 0


# -- config validation -----------------------------------------------------------------------


def load(checks: list[dict[str, Any]]) -> list[str]:
    """The config errors for ``checks`` (empty if it loads)."""
    try:
        load_config_text(yaml.safe_dump({"checks": checks}), env={})
    except ConfigError as exc:
        return exc.errors
    return []


def static(name: str) -> dict[str, Any]:
    return {"name": name, "probe": "test_static"}


def test_unknown_member_is_named_with_its_path_and_a_suggestion() -> None:
    errors = load(
        [
            static("dr-endpoint"),
            static("dr-replication"),
            composite("dr", ["dr-endpoint", "dr-replicaton", "nothing-like-it"]),
        ]
    )
    assert errors == [
        "checks[2].params.members[1]: no check named 'dr-replicaton'; did you mean "
        "'dr-replication'?",
        "checks[2].params.members[2]: no check named 'nothing-like-it'",
    ]


def test_self_reference_is_refused() -> None:
    assert load([static("a"), composite("dr", ["a", "dr"])]) == [
        "checks[1].params.members[1]: 'dr' is this check itself (a check cannot read its "
        "own result)"
    ]


def test_a_cycle_of_composites_is_refused_and_named() -> None:
    errors = load(
        [
            static("a"),
            composite("c1", ["c2"]),
            composite("c2", ["a", "c3"]),
            composite("c3", ["c1"]),
        ]
    )
    assert errors == [
        "checks[1].params: checks read each other's results in a cycle: "
        "c1 -> c2 -> c3 -> c1 (no result could ever be fresh)"
    ]
    # Nesting without a cycle is fine.
    assert load([static("a"), composite("c1", ["a"]), composite("c2", ["c1", "a"])]) == []


def test_rule_params_are_checked() -> None:
    errors = load(
        [
            static("a"),
            composite("q", ["a"], rule="quorum"),
            composite("w", ["a"], quorum=1),
            composite("dup", ["a", "a"]),
            composite("none", []),
        ]
    )
    assert "checks[1].params: rule quorum needs quorum: how many members must be up" in errors
    assert "checks[2].params: quorum is only used with rule quorum (rule is worst)" in errors
    assert "checks[3].params: members named more than once: a" in errors
    assert any(e.startswith("checks[4].params.members: ") for e in errors), errors


def test_a_member_with_its_own_error_is_not_reported_twice() -> None:
    errors = load(
        [
            {"name": "a", "probe": "test_static", "params": {"status": "sideways"}},
            composite("dr", ["a"]),
        ]
    )
    assert errors and all(e.startswith("checks[0].params.status") for e in errors), errors


def test_validate_cli_reports_composite_errors(tmp_path: Path) -> None:
    config = write_daemon_config(tmp_path / "c.yaml", [static("a"), composite("dr", ["b"])])
    proc = cli("validate", "--config", str(config))
    assert proc.returncode != 0
    assert "checks[1].params.members[0]: no check named 'b'" in proc.stdout + proc.stderr


# -- the view a probe gets -------------------------------------------------------------------


async def test_a_probe_sees_only_the_checks_its_params_declared() -> None:
    loaded = load_config_text(
        yaml.safe_dump({"checks": [static("a"), static("b"), composite("dr", ["a"])]}), env={}
    )
    store = StatusStore()
    plumbing = Plumbing()
    handles = {c.name: build_handle(c, plumbing, results=store) for c in loaded.checks}
    store.set_checks(h.info for h in handles.values())
    try:
        for name in ("a", "b"):
            store.record(await handles[name].run())
        view = handles["dr"].context.results
        assert view.checks_named("a") == ("a",)
        latest = view.latest("a")
        assert latest is not None and latest.status is Status.UP and latest.interval == 60.0
        # `b` has a result, but the composite did not declare it.
        assert view.latest("b") is None and view.checks_named("b") == ()
        # A check that reads nothing gets the empty view.
        assert handles["a"].context.results.latest("a") is None
        assert (await handles["dr"].run()).status is Status.UP
    finally:
        await plumbing.aclose()


@pytest.mark.parametrize(
    "statuses, rule, quorum, expected",
    [
        (["up", "up"], "worst", None, "up"),
        (["up", "unknown"], "worst", None, "unknown"),
        (["unknown", "degraded"], "worst", None, "degraded"),
        (["degraded", "down"], "any_up", None, "degraded"),
        (["down", "unknown"], "any_up", None, "unknown"),
        (["up", "down", "down"], "any_up", None, "up"),
        (["up", "unknown", "down"], "quorum", 2, "unknown"),
        (["up", "degraded", "down"], "quorum", 2, "degraded"),
    ],
)
async def test_rules_as_a_table(
    statuses: list[str], rule: str, quorum: int | None, expected: str
) -> None:
    """The k-th best member status, k = every member (worst), one (any_up) or quorum."""
    names = [f"m{i}" for i in range(len(statuses))]
    params: dict[str, Any] = {"rule": rule} | ({"quorum": quorum} if quorum else {})
    loaded = load_config_text(
        yaml.safe_dump(
            {
                "checks": [
                    *(
                        {"name": n, "probe": "test_static", "params": {"status": s}}
                        for n, s in zip(names, statuses, strict=True)
                    ),
                    composite("c", names, **params),
                ]
            }
        ),
        env={},
    )
    store = StatusStore()
    plumbing = Plumbing()
    handles = [build_handle(c, plumbing, results=store) for c in loaded.checks]
    store.set_checks(h.info for h in handles)
    try:
        for handle in handles[:-1]:
            store.record(await handle.run())
        assert (await handles[-1].run()).status.value == expected
    finally:
        await plumbing.aclose()


def test_check_cli_runs_members_first_and_once(tmp_path: Path) -> None:
    """`alivemcp check --only` on a composite runs its members first (once each), then the
    composite over their results; other checks are left alone."""
    from tests.support import cli

    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "checks": [
                    {"name": "dr-endpoint", "probe": "test_static", "params": {"reason": "fine"}},
                    {
                        "name": "dr-replication",
                        "probe": "test_static",
                        "params": {"status": "down", "reason": "replication lag 312s > 60s"},
                    },
                    {"name": "unrelated", "probe": "test_static"},
                    {
                        "name": "dr-ready",
                        "probe": "composite",
                        "params": {"members": ["dr-endpoint", "dr-replication"]},
                    },
                ]
            }
        )
    )
    proc = cli("check", "--config", str(config), "--only", "dr-ready", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [yaml.safe_load(line) for line in proc.stdout.splitlines()]
    names = [r["check"] for r in rows]
    assert sorted(names[:2]) == ["dr-endpoint", "dr-replication"] and names[2:] == ["dr-ready"]
    assert rows[2]["status"] == "down"
    assert rows[2]["reason"].startswith("dr-replication down (replication lag 312s > 60s)")
