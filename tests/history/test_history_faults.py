"""History faults on the real daemon: a full disk (a tiny tmpfs), a read-only data_dir (a
read-only tmpfs) and a corrupt file. Probing and alerting go on, the fault is said once, and
history recovers when the fault goes: results held meanwhile are written, none lost."""

from __future__ import annotations

import contextlib
import errno
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import DaemonProcess
from tests.support.history import (
    RunLog,
    Webhook,
    db_counts,
    db_incidents,
    deadline_loop,
    file_check,
    log_events,
    set_state,
    state_file,
    write_config,
)

CANNOT_WRITE = (
    "history cannot be written; probing and alerting go on, results wait in memory and are retried"
)
WRITABLE_AGAIN = "history writable again"
SET_ASIDE = "history database unusable; moved aside, starting a fresh one"


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    try:
        yield hook
    finally:
        hook.close()


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def remount(where: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True)


def write_errors(d: DaemonProcess, reason: str) -> float:
    _, text = d.get("/metrics")
    found = re.search(
        rf'^alivemcp_history_write_errors_total{{reason="{reason}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def fill(directory: Path) -> Path:
    """Take every free byte of the file system ``directory`` is on."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    # Unbuffered: a write the disk refuses leaves nothing behind for close() to flush again.
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    with contextlib.suppress(OSError), filler.open("ab", buffering=0) as f:  # the last pages
        for _ in range(64):
            f.write(b"\0" * 512)
            f.flush()
    return filler


def said(d: DaemonProcess, event: str) -> list[dict]:
    return log_events(d, event)


def held_through_a_fault(
    d: DaemonProcess, log: RunLog, webhook: Webhook, name: str, reason: str
) -> None:
    """While the fault lasts: the check goes down, is paged, runs on; the fault is said once
    though the writer retried it several times."""
    state = Path(d.config_path).parent / f"{name}.state"
    set_state(state, "down", "target refused")
    for _ in deadline_loop(30, f"{reason} to be said", d.logs):
        if said(d, CANNOT_WRITE):
            break
    assert [e["reason"] for e in said(d, CANNOT_WRITE)] == [reason]
    for _ in deadline_loop(30, "the page to reach the receiver", d.logs):
        if webhook.mentions(name):
            break
    log.wait_runs(name, "down", 6, after=0)
    for _ in deadline_loop(30, "the writer to retry", d.logs):
        if write_errors(d, reason) >= 3:
            break
    assert len(said(d, CANNOT_WRITE)) == 1  # retried, not repeated


def recovered(d: DaemonProcess, log: RunLog, name: str, data: Path) -> dict[str, int]:
    """After the fault: said once, the check comes up, everything the daemon reported is in
    the file (what waited in memory included). Stops the daemon."""
    for _ in deadline_loop(30, "history to recover", d.logs):
        if said(d, WRITABLE_AGAIN):
            break
    came_up = time.time()
    set_state(Path(d.config_path).parent / f"{name}.state", "up")
    log.wait_runs(name, "up", 3, after=came_up)
    log.poll()
    truth = log.counts(name)
    assert d.stop() == 0
    assert len(said(d, CANNOT_WRITE)) == 1 and len(said(d, WRITABLE_AGAIN)) == 1
    got = db_counts(data, name, "24h")
    assert {s: got[s] for s in ("degraded", "down", "unknown")} == {
        s: truth[s] for s in ("degraded", "down", "unknown")
    }
    assert truth["up"] <= got["up"] <= truth["up"] + 2
    incidents = db_incidents(data, name)
    assert len(incidents) == 1 and incidents[0]["ended_at"] is not None
    return got


def test_disk_full_holds_results_in_memory_and_writes_them_when_space_returns(
    tmp_path: Path, webhook: Webhook
) -> None:
    name = "full"
    with tmpfs(tmp_path / "data", "2m") as data:
        config = write_config(
            tmp_path, [file_check(tmp_path, name)], data_dir=data, alerting=webhook.alerting()
        )
        with DaemonProcess(config) as d:
            log = RunLog(d)
            for _ in deadline_loop(30, "the first batch", d.logs):
                if (data / "history.sqlite").exists() and db_counts(data, name)["up"] >= 2:
                    break
            filler = fill(data)
            held_through_a_fault(d, log, webhook, name, "disk_full")
            assert d.proc is not None and d.proc.poll() is None
            filler.unlink()
            recovered(d, log, name, data)


def test_read_only_data_dir_at_start_then_writable(tmp_path: Path, webhook: Webhook) -> None:
    name = "ro"
    with tmpfs(tmp_path / "data", "8m") as data:
        remount(data, "ro")
        config = write_config(
            tmp_path, [file_check(tmp_path, name)], data_dir=data, alerting=webhook.alerting()
        )
        with DaemonProcess(config) as d:
            log = RunLog(d)
            log.wait_runs(name, "up", 2, after=0)
            held_through_a_fault(d, log, webhook, name, "unwritable")
            assert not (data / "history.sqlite").exists()
            remount(data, "rw")
            got = recovered(d, log, name, data)
        assert got["up"] >= 2  # the runs from before the file could be created


def test_a_corrupt_file_is_set_aside_and_a_fresh_one_started(
    tmp_path: Path, webhook: Webhook
) -> None:
    name = "c"
    data = tmp_path / "data"
    data.mkdir()
    garbage = b"this was never a database\n" * 400
    (data / "history.sqlite").write_bytes(garbage)
    config = write_config(
        tmp_path, [file_check(tmp_path, name, "down")], alerting=webhook.alerting()
    )
    with DaemonProcess(config) as d:
        log = RunLog(d)
        for _ in deadline_loop(30, "the page to reach the receiver", d.logs):
            if webhook.mentions(name):
                break
        downs = log.wait_runs(name, "down", 4, after=0)
        for _ in deadline_loop(30, "the first batch in a fresh file", d.logs):
            try:
                if db_counts(data, name)["down"] >= 4:
                    break
            except sqlite3.DatabaseError:
                continue  # opened the garbage just before the daemon moved it aside

        set_state(state_file(tmp_path, name), "up")
        log.wait_runs(name, "up", 2, after=time.time())
        log.poll()
        truth = log.counts(name)
        assert d.stop() == 0
    moved = said(d, SET_ASIDE)
    assert len(moved) == 1, d.logs()[-3000:]
    assert said(d, CANNOT_WRITE) == []  # moving it aside was the remedy, not a failure
    aside = sorted(data.glob("history.sqlite.corrupt-*"))
    assert [p.name for p in aside] == [Path(moved[0]["moved_to"]).name]
    assert aside[0].read_bytes() == garbage  # kept, not deleted
    got = db_counts(data, name, "24h")
    assert got["down"] == truth["down"] and truth["up"] <= got["up"] <= truth["up"] + 2
    assert db_incidents(data, name)[0]["started_at"] == pytest.approx(downs[0][0], abs=0.0011)
