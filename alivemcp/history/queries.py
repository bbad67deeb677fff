"""Read side of the history database: plain functions over a connection.

Used by the daemon's API (in worker threads, one read connection each) and by
``alivemcp report`` (on the file directly, with or without a daemon running: WAL lets readers
and the one writer work at once).

Windows are whole buckets of the resolution that serves them: ``1h`` is the current minute and
the 60 before it, ``24h`` the current hour and the 24 before, ``7d``/``30d``/``90d`` the current
day (UTC) and the 7/30/90 before. A window therefore covers between its length and its length
plus one bucket; the figures equal the status page's bars and the live ``/api/v1/checks`` list.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from alivemcp.history import latency
from alivemcp.history.schema import RESOLUTIONS

__all__ = [
    "WINDOWS",
    "Counts",
    "check_id",
    "counts_between",
    "incidents",
    "known_checks",
    "ratios",
    "series",
    "uptime",
    "window_start",
]

#: window → (bucket table, length in seconds)
WINDOWS: dict[str, tuple[str, int]] = {
    "1h": ("minute", 3600),
    "24h": ("hour", 86400),
    "7d": ("day", 7 * 86400),
    "30d": ("day", 30 * 86400),
    "90d": ("day", 90 * 86400),
}
STATUSES = ("up", "degraded", "down", "unknown")
#: Worst last (the contract's severity order): the colour of a bar with mixed runs.
_SEVERITY = ("up", "unknown", "degraded", "down")

Counts = tuple[int, int, int, int]  # up, degraded, down, unknown


def window_start(window: str, now: float) -> int:
    table, length = WINDOWS[window]
    width = RESOLUTIONS[table]
    return int(now) // width * width - length


def check_id(db: sqlite3.Connection, name: str) -> int | None:
    row = db.execute("SELECT id FROM checks WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


def known_checks(db: sqlite3.Connection) -> dict[str, tuple[int, str]]:
    """name → (id, probe type) of every check with history."""
    return {
        name: (cid, probe) for cid, name, probe in db.execute("SELECT id, name, probe FROM checks")
    }


def ratios(up: int, degraded: int, down: int) -> tuple[float | None, float | None]:
    """(up_ratio, available_ratio) over decided runs; None when there were none."""
    decided = up + degraded + down
    if decided == 0:
        return None, None
    return up / decided, (up + degraded) / decided


def _rows(
    db: sqlite3.Connection, cid: int, table: str, start: int, end: int | None = None
) -> Iterator[tuple[int, int, int, int, int, bytes | None]]:
    if end is None:
        return db.execute(
            f"SELECT bucket, up, degraded, down, unknown, latency FROM {table} "
            "WHERE check_id = ? AND bucket >= ? ORDER BY bucket",
            (cid, start),
        )
    return db.execute(
        f"SELECT bucket, up, degraded, down, unknown, latency FROM {table} "
        "WHERE check_id = ? AND bucket >= ? AND bucket < ? ORDER BY bucket",
        (cid, start, end),
    )


def counts_between(
    db: sqlite3.Connection, cid: int, table: str, start: int, end: int | None = None
) -> tuple[Counts, dict[int, int]]:
    """Run counts and merged latency of buckets starting in [start, end)."""
    up = degraded = down = unknown = 0
    hist: dict[int, int] = {}
    for _, u, g, d, k, blob in _rows(db, cid, table, start, end):
        up += u
        degraded += g
        down += d
        unknown += k
        latency.decode(blob, hist)
    return (up, degraded, down, unknown), hist


def _latency_doc(hist: dict[int, int]) -> dict[str, float | None]:
    p50, p95, p99 = latency.percentiles(hist)
    return {"p50": p50, "p95": p95, "p99": p99}


def uptime(db: sqlite3.Connection, name: str, window: str, now: float) -> dict[str, Any]:
    """The ``/api/v1/checks/{name}/uptime`` document (zero runs when there is no history)."""
    cid = check_id(db, name)
    counts: Counts = (0, 0, 0, 0)
    hist: dict[int, int] = {}
    if cid is not None:
        counts, hist = counts_between(db, cid, WINDOWS[window][0], window_start(window, now))
    up_ratio, available_ratio = ratios(*counts[:3])
    return {
        "check": name,
        "window": window,
        "up_ratio": up_ratio,
        "available_ratio": available_ratio,
        "runs": dict(zip(STATUSES, counts, strict=True)),
        "latency_seconds": _latency_doc(hist),
    }


def series(db: sqlite3.Connection, name: str, window: str, now: float) -> dict[str, Any]:
    """The ``/api/v1/checks/{name}/history`` document: every bucket of the window, oldest
    first, empty ones included (``worst_status`` null), so a chart needs no gap logic."""
    table, _ = WINDOWS[window]
    width = RESOLUTIONS[table]
    start = window_start(window, now)
    cid = check_id(db, name)
    found = {} if cid is None else {row[0]: row for row in _rows(db, cid, table, start)}
    buckets = []
    for bucket in range(start, int(now) // width * width + 1, width):
        row = found.get(bucket)
        counts = row[1:5] if row else (0, 0, 0, 0)
        up_ratio, available_ratio = ratios(*counts[:3])
        present = [s for s, c in zip(STATUSES, counts, strict=True) if c]
        buckets.append(
            {
                "start": bucket,
                "runs": dict(zip(STATUSES, counts, strict=True)),
                "up_ratio": up_ratio,
                "available_ratio": available_ratio,
                "worst_status": max(present, key=_SEVERITY.index) if present else None,
                "latency_seconds": _latency_doc(latency.decode(row[5]) if row else {}),
            }
        )
    return {"check": name, "window": window, "resolution_seconds": width, "buckets": buckets}


def incidents(
    db: sqlite3.Connection, name: str, since: float, now: float, limit: int = 100
) -> list[dict[str, Any]]:
    """Incidents of ``name`` open at or after ``since``, newest first."""
    cid = check_id(db, name)
    if cid is None:
        return []
    rows = db.execute(
        "SELECT started_at, ended_at, worst, first_reason, last_reason FROM incidents "
        "WHERE check_id = ? AND COALESCE(ended_at, 9e18) >= ? "
        "ORDER BY started_at DESC LIMIT ?",
        (cid, since, limit),
    )
    return [incident_doc(name, *row, now=now) for row in rows]


def incident_doc(
    name: str, started: float, ended: float | None, worst: str, first: str, last: str, *, now: float
) -> dict[str, Any]:
    return {
        "check": name,
        "started_at": started,
        "ended_at": ended,
        "duration_seconds": round((ended if ended is not None else now) - started, 3),
        "worst_status": worst,
        "first_reason": first,
        "last_reason": last,
    }


def incidents_between(
    db: sqlite3.Connection, cid: int, start: float, end: float
) -> Sequence[tuple[float, float | None, str, str, str]]:
    """Incidents overlapping [start, end), oldest first."""
    return db.execute(
        "SELECT started_at, ended_at, worst, first_reason, last_reason FROM incidents "
        "WHERE check_id = ? AND started_at < ? AND COALESCE(ended_at, 9e18) >= ? "
        "ORDER BY started_at",
        (cid, end, start),
    ).fetchall()
