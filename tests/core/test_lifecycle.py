"""The daemon's lifecycle on real processes: a stop lets runs in flight finish within the grace
and cleans up after them; signals that arrive while the daemon starts neither kill it nor get
lost."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from alivemcp.app.daemon import STOP_OVERHEAD_SECONDS
from alivemcp.config import SchedulerConfig, load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.grid import MIN_START_WINDOW, stable_offset, start_fraction
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckResult
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.plumbing import Plumbing
from tests.support import ALIVEMCP, REPO, DaemonProcess, Webhook, free_port, subprocess_env

# -- helpers ---------------------------------------------------------------------------------


def write_config(path: Path, checks: list[dict[str, Any]], **top: Any) -> Path:
    doc = {
        "logging": {"format": "json"},
        "data_dir": str(path.parent / "data"),
        "checks": checks,
        **top,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def marker(markers: Path, what: str) -> float | None:
    """When the sleepy probe reached ``what`` (started, finished, cancelled, teardown)."""
    path = markers / what
    return float(path.read_text()) if path.exists() else None


def log_rows(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def wait_until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    try:
        yield hook
    finally:
        hook.close()


def sleepy_check(markers: Path, seconds: float, **extra: Any) -> dict[str, Any]:
    # interval 5 s: the first run starts within 5 s of start-up (its grid point).
    return {
        "name": "slow",
        "probe": "test_sleepy",
        "interval": 5,
        "timeout": 4.8,
        "params": {"seconds": seconds, "markers": str(markers), **extra.pop("params", {})},
        **extra,
    }


# -- item: SIGTERM lets runs in flight finish ------------------------------------------------


def test_sigterm_lets_a_run_in_flight_finish_records_it_alerts_then_tears_down(
    tmp_path: Path, webhook: Webhook
) -> None:
    markers = tmp_path / "markers"
    config = write_config(
        tmp_path / "c.yaml",
        [sleepy_check(markers, 3.0, params={"status": "down"})],
        scheduler={"shutdown_grace": 8},
        alerting={
            "receivers": [{"name": "hook", "type": "webhook", "url": webhook.url}],
            "default_receivers": ["hook"],
            "group_wait": 0,
            "policy": {"failures_to_fire": 1},
        },
    )
    with DaemonProcess(config) as d:
        wait_until(lambda: marker(markers, "started"), 15, "the slow run to start")
        sent = time.time()
        d.signal(signal.SIGTERM)
        assert d.proc is not None
        code = d.proc.wait(30)
        exited = time.time()
    assert code == 0, d.logs()[-3000:]
    finished = marker(markers, "finished")
    # The run was not cancelled: it slept its 3 s to the end, after the SIGTERM.
    assert marker(markers, "cancelled") is None, d.logs()[-3000:]
    assert finished is not None and finished > sent
    # Its result was recorded (and logged) and reached alerting: the receiver got the page.
    rows = log_rows(d.logs())
    changes = [
        r for r in rows if r.get("event") == "check status changed" and r.get("check") == "slow"
    ]
    assert changes and changes[-1]["status"] == "down"
    assert webhook.bodies and "slow" in json.dumps(webhook.bodies)
    # Then the teardown (canary clean-up) ran, after the run, before the exit.
    teardown = marker(markers, "teardown")
    assert teardown is not None and finished <= teardown <= exited
    assert exited - sent < 8 + STOP_OVERHEAD_SECONDS
    assert [r["event"] for r in rows][-1] == "stopped"


def test_a_run_longer_than_the_grace_is_cancelled_at_the_grace(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    config = write_config(
        tmp_path / "c.yaml", [sleepy_check(markers, 4.5)], scheduler={"shutdown_grace": 1}
    )
    with DaemonProcess(config) as d:
        started = wait_until(lambda: marker(markers, "started"), 15, "the slow run to start")
        sent = time.time()
        d.signal(signal.SIGTERM)
        assert d.proc is not None
        code = d.proc.wait(30)
        exited = time.time()
    assert code == 0, d.logs()[-3000:]
    cancelled = marker(markers, "cancelled")
    assert marker(markers, "finished") is None
    # Cancelled at the end of the 1 s grace: not at once, and well before its 4.5 s were up.
    assert cancelled is not None and sent + 0.9 <= cancelled < started + 4.5
    teardown = marker(markers, "teardown")
    assert teardown is not None and cancelled <= teardown <= exited
    assert exited - sent < 1 + STOP_OVERHEAD_SECONDS
    assert "runs cancelled at the end of the shutdown grace" in d.logs()


def two_close_names() -> tuple[str, str]:
    """Two check names whose first runs are 0.3-0.8 s apart in a start window (first, then
    second)."""
    starts = {f"c{i}": MIN_START_WINDOW * start_fraction(f"c{i}") for i in range(200)}
    for a, sa in starts.items():
        for b, sb in starts.items():
            if 0.3 < sb - sa < 0.8:
                return a, b
    raise AssertionError("no two names close enough")


def clear_of_grid_points(names: tuple[str, ...], interval: float, clear: float) -> float:
    """Seconds to wait until no grid point of ``names`` falls within the next ``clear`` s."""
    now = time.time()
    offsets = [stable_offset(name, interval) for name in names]
    for delay in [0.0, *sorted((o - now) % interval + 0.01 for o in offsets)]:
        if all((o - now - delay) % interval >= clear for o in offsets):
            return delay
    raise AssertionError("grid points too close together")


async def test_stop_drops_runs_still_waiting_for_a_slot_and_waits_for_the_started_one(
    tmp_path: Path,
) -> None:
    interval = 6.0
    first, second = two_close_names()
    checks = [
        {
            "name": name,
            "probe": "test_sleepy",
            "interval": interval,
            "timeout": 5,
            "params": {"seconds": 2.5, "markers": str(tmp_path / name)},
        }
        for name in (first, second)
    ]
    loaded = load_config_text(yaml.safe_dump({"checks": checks}), env={})
    store = StatusStore()
    results: list[CheckResult] = []
    # One slot for the type: the second check's run waits while the first one sleeps.
    scheduler = Scheduler(
        store.mark_in_flight,
        SchedulerMetrics(CollectorRegistry()),
        results.append,
        SchedulerConfig.model_validate({"per_probe_type": {"test_sleepy": 1}}),
    )
    plumbing = Plumbing()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    # Start when neither grid point is near: both get an extra first run in the start window,
    # in the order of their start fractions (see two_close_names). why: not a wait for an
    # event: the start is placed on the clock, relative to the checks' grids.
    await asyncio.sleep(clear_of_grid_points((first, second), interval, MIN_START_WINDOW + 0.5))
    scheduler.start()
    deadline = time.monotonic() + interval + 2
    while marker(tmp_path / first, "started") is None:
        assert time.monotonic() < deadline, "first run never started"
        await asyncio.sleep(0.02)
    started = marker(tmp_path / first, "started")
    assert started is not None
    # Past the second check's first run: its run is launched and waits for the slot.
    gap = MIN_START_WINDOW * (start_fraction(second) - start_fraction(first))
    deadline = time.monotonic() + gap + interval
    while scheduler.checks[second].waiter is None:
        assert time.monotonic() < deadline, "the second run never waited for the slot"
        await asyncio.sleep(0.02)
    assert marker(tmp_path / second, "started") is None
    await scheduler.stop(10)
    stopped = time.time()
    await plumbing.aclose()
    # The first run finished and its result was recorded; the waiting one never began.
    assert [r.check.name for r in results] == [first]
    finished = marker(tmp_path / first, "finished")
    assert finished is not None
    assert marker(tmp_path / first, "cancelled") is None
    assert marker(tmp_path / second, "started") is None
    # Stop returned when that run ended, not after another (which would sleep its 2.5 s).
    assert stopped - finished < 2.5


# -- item: signals during start-up ------------------------------------------------------------

N_BIG = 10_000  # start-up takes seconds: config load, then building the checks


def big_checks(n: int = N_BIG) -> list[dict[str, Any]]:
    return [{"name": f"noop-{i:05d}", "probe": "test_noop", "interval": 300} for i in range(n)]


def spawn(config: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    log = config.with_suffix(".log")
    proc = subprocess.Popen(
        [*ALIVEMCP, "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=subprocess_env(),
        cwd=REPO,
    )
    return proc, log


def open_fifo_writer(path: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """Wait until the daemon opens the FIFO config for reading (it is then loading its config)
    and return the write end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"daemon exited with {proc.returncode}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.005)
            continue
        os.set_blocking(fd, True)
        return fd
    raise AssertionError("the daemon never opened its config")


def healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def status_rows(port: int) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30) as resp:
        return {row["check"]: row for row in json.loads(resp.read())["checks"]}


def test_sighup_storm_during_start_up_is_survived_and_the_reload_applied_after_start(
    tmp_path: Path,
) -> None:
    # The config is a FIFO: the daemon blocks reading it, so the test knows it is inside
    # config loading, the slowest part of start-up, when the first SIGHUPs arrive.
    config = tmp_path / "c.yaml"
    os.mkfifo(config)
    data = tmp_path / "data"
    first = yaml.safe_dump(
        {"logging": {"format": "json"}, "data_dir": str(data), "checks": big_checks()}
    )
    reloaded = tmp_path / "reloaded.yaml"
    write_config(
        reloaded,
        [*big_checks(), {"name": "added-by-reload", "probe": "test_static", "interval": 1}],
    )
    port = free_port()
    proc, log = spawn(config, port)
    try:
        fd = open_fifo_writer(config, proc)
        for _ in range(5):
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.05)  # why: the storm's pace (signals spread over the load)
        assert proc.poll() is None, log.read_text()
        with os.fdopen(fd, "w") as writer:
            writer.write(first)
        # From now on a reload reads the new file (the daemon's first read got the FIFO's).
        os.replace(reloaded, config)
        hups = 5
        while not healthy(port):
            assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            proc.send_signal(signal.SIGHUP)
            hups += 1
            time.sleep(0.1)  # why: the storm's pace, and how often health is polled
        assert hups > 10  # signals kept arriving all through start-up
        # The reload asked for during start-up is applied once the daemon has started.
        wait_until(
            lambda: status_rows(port).get("added-by-reload", {}).get("status") == "up",
            120,
            "the check added by the reload to run",
        )
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "Traceback" not in text
    events = [r.get("event") for r in log_rows(text)]
    assert events.index("alivemcp running") < events.index("config reloaded")
    # Coalesced: a storm of SIGHUPs makes a few reloads, not one per signal.
    assert events.count("config reloaded") < hups / 2


def test_sigterm_while_loading_the_config_exits_0_at_once(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    os.mkfifo(config)
    proc, log = spawn(config, free_port())
    try:
        open_fifo_writer(config, proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - sent < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert log.read_text() == ""  # no traceback, nothing half-done to report


def test_sigterm_while_the_daemon_builds_its_checks_exits_0_cleanly(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", big_checks())
    lock = tmp_path / "data" / ".lock"
    proc, log = spawn(config, free_port())
    try:
        # The daemon writes its pid into the data_dir lock as the first step of its start-up,
        # before it builds its 10,000 checks.
        wait_until(
            lambda: lock.exists() and lock.read_text().startswith(f"{proc.pid} "),
            120,
            "the daemon to take its data_dir",
        )
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "Traceback" not in text
    assert [r.get("event") for r in log_rows(text)][-1] == "stopped"
    assert took < 10 + STOP_OVERHEAD_SECONDS
    assert lock.read_text() == ""  # released: no stale holder left behind
