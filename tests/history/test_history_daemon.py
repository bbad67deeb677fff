"""History through the real daemon process into a real SQLite file: a target that flips on a
known schedule, kill -9 in the middle of an incident, and checks a reload removes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.history import queries
from alivemcp.history.config import Retention
from alivemcp.history.writer import BATCH_SECONDS, HistoryWriter
from alivemcp.probe import Status
from tests.support import DaemonProcess
from tests.support.history import (
    RunLog,
    db_counts,
    db_incidents,
    deadline_loop,
    expected_incidents,
    file_check,
    open_history,
    set_state,
    state_file,
    write_config,
)

#: (status written in the file, runs to see in that state before the next flip)
SCHEDULE = [
    ("up", 4),
    ("down", 5),
    ("up", 3),
    ("degraded", 3),
    ("unknown", 2),
    ("degraded", 2),
    ("down", 2),
    ("up", 4),
]


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 0.0011  # /status rounds start times to the millisecond


def test_uptime_runs_and_incidents_match_a_flip_schedule(tmp_path: Path) -> None:
    name = "api/flip me"
    config = write_config(tmp_path, [file_check(tmp_path, name)])
    state = state_file(tmp_path, name)
    with DaemonProcess(config) as d:
        log = RunLog(d)
        phases: list[tuple[str, float]] = []  # (status, when the file was flipped to it)
        waited: list[int] = []  # the runs of each phase seen when the test flipped the next
        for status, runs in SCHEDULE:
            flipped = time.time()
            set_state(state, status, f"scheduled {status}")
            phases.append((status, flipped))
            waited.append(len(log.wait_runs(name, status, runs, after=flipped)))
        log.poll()
        truth = log.of(name)
        # A graceful stop writes every queued result; runs after the last poll were "up".
        assert d.stop() == 0
    data = tmp_path / "data"

    # The schedule happened as planned, within one run a phase of what the test saw before
    # it flipped the state (a run in flight at a flip may still read the old state).
    for k, ((status, flipped), (_, planned)) in enumerate(zip(phases, SCHEDULE, strict=True)):
        end = phases[k + 1][1] if k + 1 < len(phases) else float("inf")
        seen = [s for t, s in truth if flipped <= t < end and s == status]
        assert planned <= len(seen) <= waited[k] + 1 + (k == len(phases) - 1), (status, seen)

    counts = {s: sum(1 for _, x in truth if x == s) for s in queries.STATUSES}
    for window in ("1h", "24h", "7d", "30d", "90d"):
        got = db_counts(data, name, window)
        assert {s: got[s] for s in ("degraded", "down", "unknown")} == {
            s: counts[s] for s in ("degraded", "down", "unknown")
        }, window
        assert counts["up"] <= got["up"] <= counts["up"] + 2, window  # + runs after the poll
    db = open_history(data)
    doc = queries.uptime(db, name, "1h", time.time())
    up, degraded, down = doc["runs"]["up"], doc["runs"]["degraded"], doc["runs"]["down"]
    assert doc["up_ratio"] == pytest.approx(up / (up + degraded + down))
    assert doc["available_ratio"] == pytest.approx((up + degraded) / (up + degraded + down))
    assert doc["latency_seconds"]["p50"] is not None
    # The series' buckets add up to the same runs.
    series = queries.series(db, name, "1h", time.time())["buckets"]
    assert sum(b["runs"]["down"] for b in series) == counts["down"]
    db.close()

    # Two incidents: the down stretch, then degraded..unknown..degraded..down (unknown runs
    # neither close nor open one); each ends at the start of the next up run.
    want = expected_incidents(truth)
    assert [w[2] for w in want] == ["down", "down"]
    got_incidents = db_incidents(data, name)
    assert len(got_incidents) == 2, got_incidents
    for (start, ended, worst), inc in zip(want, got_incidents, strict=True):
        assert _close(inc["started_at"], start) and _close(inc["ended_at"], ended), (inc, want)
        assert inc["worst_status"] == worst
    assert got_incidents[0]["first_reason"] == "scheduled down"
    assert got_incidents[1]["first_reason"] == "scheduled degraded"
    assert got_incidents[1]["last_reason"] == "scheduled down"


def test_kill_9_mid_incident_keeps_it_open_and_a_restart_closes_it_once(tmp_path: Path) -> None:
    name = "k"
    config = write_config(tmp_path, [file_check(tmp_path, name)])
    state = state_file(tmp_path, name)
    data = tmp_path / "data"
    d = DaemonProcess(config).start()
    try:
        log = RunLog(d)
        log.wait_runs(name, "up", 3, after=0)
        went_down = time.time()
        set_state(state, "down", "refused")
        downs = log.wait_runs(name, "down", 8, after=went_down)
        first_down = downs[0][0]
        # Mid-incident: the file holds it open, with runs committed.
        for _ in deadline_loop(30, "the open incident in the file", d.logs):
            incidents = db_incidents(data, name) if (data / "history.sqlite").exists() else []
            if (
                incidents
                and incidents[-1]["ended_at"] is None
                and db_counts(data, name)["down"] >= 4
            ):
                break
        before_kill = db_counts(data, name)
        log.poll()
        killed_at = time.time()
        d.kill()  # SIGKILL: no flush, no clean close
    finally:
        d.kill()
    truth = log.of(name)
    after_kill = db_counts(data, name)

    # Every committed batch survived; only the newest runs (the last batch) may be missing.
    assert all(after_kill[s] >= before_kill[s] for s in before_kill), (before_kill, after_kill)
    truth_counts = log.counts(name)
    assert after_kill["up"] == truth_counts["up"]  # all long before the kill
    recent = sum(1 for t, _ in truth if t >= killed_at - BATCH_SECONDS - 4)  # 4 s: a busy box
    assert truth_counts["down"] - recent <= after_kill["down"] <= truth_counts["down"] + 2
    incidents = db_incidents(data, name)
    assert len(incidents) == 1 and incidents[0]["ended_at"] is None
    assert _close(incidents[0]["started_at"], first_down)

    # Restart, still down: the same incident goes on; then up closes it, once.
    with DaemonProcess(config) as again:
        log2 = RunLog(again)
        log2.wait_runs(name, "down", 3, after=0)
        came_up = time.time()
        set_state(state, "up")
        ups = log2.wait_runs(name, "up", 3, after=came_up)
        log2.poll()
        restarted = log2.counts(name)
        assert again.stop() == 0
    incidents = db_incidents(data, name)
    assert len(incidents) == 1, incidents
    assert _close(incidents[0]["started_at"], first_down)
    assert _close(incidents[0]["ended_at"], ups[0][0])
    assert incidents[0]["worst_status"] == "down"
    # The window counts the downtime of both lives of the daemon.
    final = db_counts(data, name, "24h")
    assert final["down"] == after_kill["down"] + restarted["down"]
    assert (
        after_kill["up"] + restarted["up"] <= final["up"] <= after_kill["up"] + restarted["up"] + 2
    )
    doc = queries.uptime(open_history(data), name, "24h", time.time())
    assert doc["up_ratio"] == pytest.approx(final["up"] / (final["up"] + final["down"]))


def _seed(path: Path, runs: list[tuple[str, str, float]]) -> None:
    """History left by an earlier daemon: written by the real writer, with old start times."""
    writer = HistoryWriter(path, Retention())
    writer.set_configured([name for name, _, _ in runs])  # nothing pruned while seeding
    writer.start()
    for name, status, started in runs:
        writer.observe(
            CheckResult(
                CheckInfo(name, "test_file"), Status(status), status, 0.01, started, started + 0.01
            )
        )
    marker = writer.marker()
    for _ in deadline_loop(20, "the seed to be written"):
        if writer.reached(marker):
            break
        writer.marker()
    writer.stop(10)


def test_reload_keeps_a_removed_checks_history_continues_it_and_prunes_after_retention(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    now = time.time()
    # "expired" was removed long ago (its last run is older than every retention); "a" ran
    # yesterday already.
    _seed(
        data / "history.sqlite",
        [
            ("expired", "down", now - 100 * 86400),
            ("expired", "up", now - 100 * 86400 + 60),
            ("a", "down", now - 86400),
        ],
    )
    checks = [file_check(tmp_path, "a"), file_check(tmp_path, "b")]
    config = write_config(tmp_path, checks)
    with DaemonProcess(config) as d:
        log = RunLog(d)
        # Retention runs at start: the long-removed check is gone, names and all.
        for _ in deadline_loop(30, "the expired check to be pruned", d.logs):
            if "expired" not in queries.known_checks(open_history(data)):
                break
        assert db_incidents(data, "expired") == []
        log.wait_runs("b", "up", 3, after=0)
        a_id = queries.known_checks(open_history(data))["a"][0]

        write_config(tmp_path, [checks[1]])  # "a" removed
        d.signal(signal.SIGHUP)
        for _ in deadline_loop(30, "a to leave /status", d.logs):
            if not d.status_of("a"):
                break
        # Pruning now (a reload prunes at once) keeps "a": its history is within retention.
        log.wait_runs("b", "up", 3, after=time.time())
        kept = db_counts(data, "a", "7d")
        assert kept["down"] == 1 and kept["up"] >= 3
        assert queries.known_checks(open_history(data))["a"][0] == a_id

        write_config(tmp_path, checks)  # "a" is back: same name, same history
        d.signal(signal.SIGHUP)
        back = time.time()
        log.wait_runs("a", "up", 3, after=back)
        for _ in deadline_loop(30, "a's new runs in the file", d.logs):
            if db_counts(data, "a", "7d")["up"] >= kept["up"] + 3:
                break
        assert queries.known_checks(open_history(data))["a"][0] == a_id
        assert db_counts(data, "a", "7d")["down"] == 1
