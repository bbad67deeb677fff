"""One batch of results into the database, in one transaction: bucket counts and incidents.

A run adds to the counts (and the latency summary) of its minute, hour and day bucket, and
opens, extends or closes its check's incident. Nothing in memory changes until the
transaction commits: :func:`write_batch` returns what memory must learn (new check ids, the
incidents left open, the bucket counts for the live windows), so a batch that fails can be
retried from scratch.

Incidents: a stretch of ``down``/``degraded`` runs, from the first such run's start to the
start of the next ``up`` run. ``unknown`` runs (the prober could not decide) neither open nor
close an incident, and count in no uptime ratio.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from alivemcp.history import latency, schema

__all__ = [
    "DEGRADED",
    "DOWN",
    "UNKNOWN",
    "UP",
    "Batch",
    "Incident",
    "Pending",
    "Row",
    "write_batch",
]

UP, DEGRADED, DOWN, UNKNOWN = range(4)
WORST_NAME = {DEGRADED: "degraded", DOWN: "down"}

#: (check name, probe type, status code, started_at, duration, reason)
Row = tuple[str, str, int, float, float, str]


class Pending:
    """Results waiting to be written, kept as columns.

    Strings, ints and floats are not tracked by the garbage collector, so a second's worth of
    results adds nothing for it to walk. With a tuple per result (alive for up to a second,
    so promoted to older generations), full collections came four times as often at 50,000
    checks, each pausing the event loop for 200-350 ms (benchmarks/history.py steady).
    """

    __slots__ = ("codes", "durations", "names", "probes", "reasons", "started")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.probes: list[str] = []
        self.codes = bytearray()
        self.started = array("d")
        self.durations = array("d")
        self.reasons: list[str] = []

    def append(
        self, name: str, probe: str, code: int, started: float, duration: float, reason: str
    ) -> None:
        self.names.append(name)
        self.probes.append(probe)
        self.codes.append(code)
        self.started.append(started)
        self.durations.append(duration)
        self.reasons.append(reason)

    def extend(self, other: Pending) -> None:
        for column in self.__slots__:
            getattr(self, column).extend(getattr(other, column))

    def drop_oldest(self, count: int) -> None:
        for column in self.__slots__:
            del getattr(self, column)[:count]

    def __len__(self) -> int:
        return len(self.codes)

    def rows(self) -> Iterator[Row]:
        return zip(
            self.names,
            self.probes,
            self.codes,
            self.started,
            self.durations,
            self.reasons,
            strict=True,
        )


_UPSERT = """
INSERT INTO {table} (check_id, bucket, up, degraded, down, unknown, latency)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (check_id, bucket) DO UPDATE SET
    up = up + excluded.up, degraded = degraded + excluded.degraded,
    down = down + excluded.down, unknown = unknown + excluded.unknown,
    latency = latency_merge(latency, excluded.latency)
"""


@dataclass(slots=True)
class Incident:
    id: int | None
    check_id: int
    started_at: float
    last_at: float
    worst: int
    first_reason: str
    last_reason: str
    ended_at: float | None = None


@dataclass(slots=True)
class Batch:
    """What a committed batch changed, for memory to follow."""

    new_ids: dict[str, int]
    #: check id → its incident after the batch (None: closed, or none open)
    incidents: dict[int, Incident | None]
    #: The check id of each result, in the batch's order.
    check_ids: array[int]


def load_open_incidents(db: sqlite3.Connection) -> dict[int, Incident]:
    return {
        cid: Incident(
            iid, cid, started, last, DOWN if worst == "down" else DEGRADED, first, last_reason
        )
        for iid, cid, started, last, worst, first, last_reason in db.execute(
            "SELECT id, check_id, started_at, last_at, worst, first_reason, last_reason "
            "FROM incidents WHERE ended_at IS NULL ORDER BY started_at"
        )
    }


def write_batch(
    db: sqlite3.Connection,
    batch: Pending,
    ids: Mapping[str, int],
    open_incidents: Mapping[int, Incident],
) -> Batch:
    """Add ``batch`` to the database in one transaction (committed on return)."""
    new_ids: dict[str, int] = {}
    working: dict[int, Incident | None] = {}
    touched: dict[int, Incident] = {}  # id(incident) → incident, in first-touch order
    check_ids = array("q")
    db.execute("BEGIN IMMEDIATE")
    # The hot loop of the writer (every result passes here once): plain locals, no helper
    # call for the common case of a check that is up with no incident open.
    for name, probe, code, started, _, reason in batch.rows():
        cid = ids.get(name) or new_ids.get(name)
        if cid is None:
            cid = db.execute(
                "INSERT INTO checks (name, probe, first_seen) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET probe = excluded.probe "
                "RETURNING id",
                (name, probe, started),
            ).fetchone()[0]
            new_ids[name] = cid
        check_ids.append(cid)
        if code == UP and cid not in working and cid not in open_incidents:
            continue  # nothing to open, extend or close
        _track_incident(cid, code, started, reason, open_incidents, working, touched)
    summaries = [
        None if code == UNKNOWN else latency.one_run(duration)
        for code, duration in zip(batch.codes, batch.durations, strict=True)
    ]
    # Checks run at most once a batch at intervals of a second or more, so a batch usually
    # names each check once: then one upsert per result, with no grouping to pay for (a set
    # of ints is built in C). Otherwise a batch's runs of one bucket are added up here first
    # and that bucket gets a single upsert.
    rows = _bucket_rows if len(set(check_ids)) == len(check_ids) else _summed_rows
    for table, width in schema.RESOLUTIONS.items():
        db.executemany(_UPSERT.format(table=table), rows(batch, check_ids, summaries, width))
    for incident in touched.values():
        _save_incident(db, incident)
    db.execute("COMMIT")
    return Batch(new_ids, working, check_ids)


def _bucket_rows(
    batch: Pending, check_ids: array[int], summaries: list[bytes | None], width: int
) -> Iterator[tuple[int, int, int, int, int, int, bytes | None]]:
    for cid, code, started, summary in zip(
        check_ids, batch.codes, batch.started, summaries, strict=True
    ):
        second = int(started)
        yield (
            cid,
            second - second % width,
            code == UP,
            code == DEGRADED,
            code == DOWN,
            code == UNKNOWN,
            summary,
        )


def _summed_rows(
    batch: Pending, check_ids: array[int], summaries: list[bytes | None], width: int
) -> Iterator[tuple[int, int, int, int, int, int, bytes | None]]:
    """One row per (check, bucket) of the batch: its runs' counts and latencies added up."""
    sums: dict[tuple[int, int], list[int]] = {}
    latencies: dict[tuple[int, int], dict[int, int]] = {}
    for cid, code, started, summary in zip(
        check_ids, batch.codes, batch.started, summaries, strict=True
    ):
        second = int(started)
        key = (cid, second - second % width)
        counts = sums.get(key)
        if counts is None:
            sums[key] = counts = [0, 0, 0, 0]  # indexed by status code: UP .. UNKNOWN
        counts[code] += 1
        if summary is not None:
            latency.decode(summary, latencies.setdefault(key, {}))
    for key, (up, degraded, down, unknown) in sums.items():
        bins = latencies.get(key)
        yield (*key, up, degraded, down, unknown, latency.encode(bins) if bins else None)


def _track_incident(
    cid: int,
    code: int,
    started: float,
    reason: str,
    open_incidents: Mapping[int, Incident],
    working: dict[int, Incident | None],
    touched: dict[int, Incident],
) -> None:
    if code == UNKNOWN:
        return
    if cid in working:
        current = working[cid]  # this batch's own copy (or None: closed in this batch)
    else:
        kept = open_incidents.get(cid)
        # A private copy: the open incident in memory changes only once the batch commits.
        current = dataclasses.replace(kept) if kept is not None else None
    if code == UP:
        if current is not None:
            current.ended_at = started
            touched[id(current)] = current
        working[cid] = None
        return
    if current is None:
        current = Incident(None, cid, started, started, code, reason, reason)
    else:
        current.last_at = started
        current.last_reason = reason
        current.worst = max(current.worst, code)
    working[cid] = current
    touched[id(current)] = current


def _save_incident(db: sqlite3.Connection, incident: Incident) -> None:
    if incident.id is None:
        incident.id = db.execute(
            "INSERT INTO incidents (check_id, started_at, ended_at, last_at, worst, "
            "first_reason, last_reason) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                incident.check_id,
                incident.started_at,
                incident.ended_at,
                incident.last_at,
                WORST_NAME[incident.worst],
                incident.first_reason,
                incident.last_reason,
            ),
        ).fetchone()[0]
    else:
        db.execute(
            "UPDATE incidents SET ended_at = ?, last_at = ?, worst = ?, last_reason = ? "
            "WHERE id = ?",
            (
                incident.ended_at,
                incident.last_at,
                WORST_NAME[incident.worst],
                incident.last_reason,
                incident.id,
            ),
        )


def prune(
    db: sqlite3.Connection,
    now: float,
    keep: Mapping[str, float],
    incidents_keep: float,
    ids: Mapping[str, int],
    configured: frozenset[str],
) -> list[tuple[int, str]]:
    """Delete buckets and incidents older than their retention, then the names of removed
    checks with nothing left; returns those (id, name). One transaction."""
    db.execute("BEGIN IMMEDIATE")
    for table, seconds in keep.items():
        width = schema.RESOLUTIONS[table]
        # Keep one bucket beyond the retention so a window of that length is always whole.
        db.execute(
            f"DELETE FROM {table} WHERE bucket < ?", (int(now - seconds) // width * width - width,)
        )
    db.execute(
        "DELETE FROM incidents WHERE COALESCE(ended_at, last_at) < ?", (now - incidents_keep,)
    )
    gone = [
        (cid, name)
        for name, cid in ids.items()
        if name not in configured
        and db.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM day WHERE check_id = ?1) "
            "AND NOT EXISTS (SELECT 1 FROM hour WHERE check_id = ?1) "
            "AND NOT EXISTS (SELECT 1 FROM minute WHERE check_id = ?1) "
            "AND NOT EXISTS (SELECT 1 FROM incidents WHERE check_id = ?1)",
            (cid,),
        ).fetchone()[0]
    ]
    db.executemany("DELETE FROM checks WHERE id = ?", [(cid,) for cid, _ in gone])
    db.execute("COMMIT")
    return gone
