"""Helpers for history tests on the real daemon: file-driven checks, the runs the daemon
reported (the truth the history file is held to), reading the history file, log events."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from alivemcp.history import queries, schema
from tests import support
from tests.support import DaemonProcess

#: Interval of the file-driven checks: short, so a schedule of ~25 runs takes a few seconds.
INTERVAL = 0.25


def set_state(path: Path, status: str, reason: str = "") -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{status}\n{reason}\n" if reason else f"{status}\n")
    tmp.replace(path)  # atomic: the probe never reads a half-written file


def file_check(tmp: Path, name: str, status: str = "up", **extra: Any) -> dict[str, Any]:
    state = tmp / f"{name.replace('/', '_')}.state"
    set_state(state, status)
    return {
        "name": name,
        "probe": "test_file",
        "interval": INTERVAL,
        "timeout": 0.2,
        "params": {"path": str(state)},
        **extra,
    }


def state_file(tmp: Path, name: str) -> Path:
    return tmp / f"{name.replace('/', '_')}.state"


def write_config(
    tmp: Path, checks: list[dict[str, Any]], data_dir: Path | None = None, **top: Any
) -> Path:
    path = tmp / "alivemcp.yaml"
    doc = {
        "logging": {"format": "json"},
        "data_dir": str(data_dir or tmp / "data"),
        "checks": checks,
        **top,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def deadline_loop(
    timeout: float, what: str, logs: Callable[[], str] = lambda: ""
) -> Iterator[None]:
    """Yield until the caller breaks out; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        yield
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{logs()[-3000:]}")


class RunLog:
    """Every run the daemon reported in /status (it keeps the last 20 per check), by check:
    started_at (ms) → status. A thread of its own polls it every half second while the daemon
    runs, far more often than 20 runs take, whatever the test waits on meanwhile (a test that
    polled only in its own waits missed runs while it waited on something else)."""

    def __init__(self, daemon: DaemonProcess, every: float = 0.5) -> None:
        self.daemon = daemon
        self.runs: dict[str, dict[float, str]] = {}
        self._lock = threading.Lock()
        self._every = every
        threading.Thread(target=self._follow, name="run-log", daemon=True).start()

    def _follow(self) -> None:
        while (proc := self.daemon.proc) is not None and proc.poll() is None:
            # Stopping (refused, a 503, half an answer): its last runs were polled before.
            with contextlib.suppress(OSError, AssertionError, ValueError):
                self.poll()
            time.sleep(self._every)  # why: the pace of a poller, not a wait for an event

    def poll(self) -> None:
        checks = self.daemon.get_json("/status")["checks"]
        with self._lock:
            for row in checks:
                seen = self.runs.setdefault(row["check"], {})
                for started, _duration, status in row["history"]:
                    seen[started] = status

    def of(self, name: str) -> list[tuple[float, str]]:
        with self._lock:
            return sorted(self.runs.get(name, {}).items())

    def counts(self, name: str) -> dict[str, int]:
        out = {s: 0 for s in queries.STATUSES}
        for _, status in self.of(name):
            out[status] += 1
        return out

    def wait_runs(
        self, name: str, status: str, count: int, after: float, timeout: float = 30.0
    ) -> list[tuple[float, str]]:
        """Poll until ``count`` runs of ``name`` that started after ``after`` said
        ``status``; returns those runs."""
        for _ in deadline_loop(timeout, f"{count} {status} runs of {name}", self.daemon.logs):
            self.poll()
            got = [r for r in self.of(name) if r[0] >= after and r[1] == status]
            if len(got) >= count:
                return got
        raise AssertionError  # unreachable: deadline_loop raises


def open_history(data_dir: Path) -> sqlite3.Connection:
    return schema.connect(data_dir / schema.FILE_NAME, readonly=True, timeout=10)


def db_counts(data_dir: Path, name: str, window: str = "1h") -> dict[str, int]:
    db = open_history(data_dir)
    try:
        return dict(queries.uptime(db, name, window, time.time())["runs"])
    finally:
        db.close()


def db_incidents(data_dir: Path, name: str) -> list[dict[str, Any]]:
    """Oldest first."""
    db = open_history(data_dir)
    try:
        return list(reversed(queries.incidents(db, name, 0, time.time(), 1000)))
    finally:
        db.close()


def expected_incidents(runs: list[tuple[float, str]]) -> list[tuple[float, float | None, str]]:
    """(start, end, worst) of each stretch of non-up runs, from the runs as reported."""
    out: list[tuple[float, float | None, str]] = []
    start: float | None = None
    worst = ""
    for started, status in runs:
        if status == "unknown":
            continue
        if status == "up":
            if start is not None:
                out.append((start, started, worst))
                start = None
            continue
        if start is None:
            start, worst = started, status
        elif status == "down":
            worst = "down"
    if start is not None:
        out.append((start, None, worst))
    return out


def log_events(d: DaemonProcess, event: str) -> list[dict[str, Any]]:
    out = []
    for line in d.logs().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if row.get("event") == event:
                    out.append(row)
    return out


class Webhook(support.Webhook):
    """The shared loopback receiver, as the history fault tests configure and read it."""

    def alerting(self) -> dict[str, Any]:
        """An alerting section that pages this receiver at the first failure."""
        return {
            "receivers": [{"name": "hook", "type": "webhook", "url": self.url}],
            "default_receivers": ["hook"],
            "group_wait": 0,
            "policy": {"failures_to_fire": 1},
        }

    def mentions(self, text: str) -> int:
        return sum(text in json.dumps(body) for body in self.bodies)
