"""The one writer of the history database: a thread that commits results in batches.

The event loop only appends a small tuple to a deque (:meth:`HistoryWriter.observe`); no probe
or alert ever waits on the database. Once a second (or when a reader asks for a flush) the
thread drains the deque and, in one transaction, adds each run to its minute, hour and day
bucket (upserts that add counts and merge latency summaries), opens, updates and closes
incidents, and records new check names. ``kill -9`` therefore loses at most the results of
the last second (:data:`BATCH_SECONDS`); WAL with synchronous=NORMAL keeps every committed
batch across a process crash.

Faults never stop probing or alerting. A failed batch stays queued (up to
:data:`MAX_PENDING_RESULTS`, then the oldest are dropped and counted) and is retried with
backoff; the failure is logged once when it starts and once when history recovers. A file
that is not a usable database (corrupt, or from a newer version) is moved aside as
``history.sqlite.<reason>-<time>`` and a fresh one is started; nothing is deleted.

Incidents: a stretch of ``down``/``degraded`` runs, from the first such run's start to the
start of the next ``up`` run. ``unknown`` runs (the prober could not decide) neither open nor
close an incident, and count in no uptime ratio.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from alivemcp.history import latency, schema
from alivemcp.history.config import Retention
from alivemcp.history.live import LiveWindows
from alivemcp.probe import Status
from alivemcp.results import CheckResult

__all__ = ["BATCH_SECONDS", "MAX_PENDING_RESULTS", "HistoryWriter", "WriterStats"]

log = structlog.get_logger("alivemcp.history")

BATCH_SECONDS = 1.0
#: Results held while the database cannot be written (~100 bytes each).
MAX_PENDING_RESULTS = 500_000
RETRY_MAX_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 600.0
MAX_ATTEMPTS_OF_A_BAD_BATCH = 3
REASON_CHARS = 500

_UP, _DEGRADED, _DOWN, _UNKNOWN = range(4)
_CODE = {Status.UP: _UP, Status.DEGRADED: _DEGRADED, Status.DOWN: _DOWN, Status.UNKNOWN: _UNKNOWN}
_NAME = {_DEGRADED: "degraded", _DOWN: "down"}

#: (check name, probe type, status code, started_at, duration, reason)
Row = tuple[str, str, int, float, float, str]

_UPSERT = """
INSERT INTO {table} (check_id, bucket, up, degraded, down, unknown, latency)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (check_id, bucket) DO UPDATE SET
    up = up + excluded.up, degraded = degraded + excluded.degraded,
    down = down + excluded.down, unknown = unknown + excluded.unknown,
    latency = latency_merge(latency, excluded.latency)
"""


@dataclass(slots=True)
class _Incident:
    id: int | None
    check_id: int
    started_at: float
    last_at: float
    worst: int
    first_reason: str
    last_reason: str
    ended_at: float | None = None


@dataclass(slots=True)
class WriterStats:
    """What the metrics collector reads (plain numbers; written by the writer thread)."""

    ok: bool = True
    committed_results: int = 0
    batches: int = 0
    dropped_results: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    last_batch_seconds: float = 0.0
    set_aside: int = 0


def _error_reason(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL") or "disk is full" in str(exc):
        return "disk_full"
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or \
            "readonly" in str(exc) or "unable to open" in str(exc):
        return "unwritable"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or isinstance(exc, schema.SchemaError):
        return "corrupt"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "locked"
    if name.startswith("SQLITE_IOERR") or isinstance(exc, OSError):
        return "io"
    return "other"


class HistoryWriter:
    def __init__(self, path: Path, retention: Retention,
                 on_open: Callable[[int], None] | None = None) -> None:
        self.path = path
        self.retention = retention
        self.live = LiveWindows()
        self.stats = WriterStats()
        #: Bumped whenever the file is replaced, so readers reopen.
        self.generation = 0
        self._on_open = on_open
        self._queue: deque[Row] = deque()
        self._retry: list[Row] = []  # a batch that failed, retried before newer results
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._db: sqlite3.Connection | None = None
        self._ids: dict[str, int] = {}
        self._open: dict[int, _Incident] = {}
        self._configured: frozenset[str] = frozenset()
        self._enqueued = 0  # results handed to observe (event-loop side)
        self._done = 0  # results committed or dropped (writer side)
        self._retry_at = 0.0
        self._backoff = 0.5
        self._failing: str | None = None
        self._next_prune = 0.0
        self._attempts = 0  # failed attempts of the batch being retried
        self._last_reason = ""
        self.ready = threading.Event()

    # -- event-loop side ----------------------------------------------------------------------

    def observe(self, result: CheckResult) -> None:
        self._queue.append((
            result.check.name, result.check.probe_type, _CODE[result.status],
            result.started_at, result.duration_seconds, result.reason[:REASON_CHARS],
        ))
        self._enqueued += 1
        if len(self._queue) > MAX_PENDING_RESULTS:  # the database has been failing for long
            with contextlib.suppress(IndexError):
                self._queue.popleft()
                self.stats.dropped_results += 1
                self._done += 1

    def check_ids(self) -> dict[str, int]:
        """name → id of every check with history (replaced whole, never mutated in place)."""
        return self._ids

    def set_configured(self, names: Iterable[str]) -> None:
        self._configured = frozenset(names)

    def marker(self) -> int:
        """A position: :meth:`reached` tells when everything observed before it is written."""
        self._wake.set()
        return self._enqueued

    def reached(self, marker: int) -> bool:
        return self._done >= marker

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="alivemcp-history", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Write what is queued (within ``timeout``) and close."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- writer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(BATCH_SECONDS)
            self._wake.clear()
            stopping = self._stopping
            try:
                self._cycle()
            except Exception:  # a bug here must not end history for the process's life
                log.exception("history writer failed; retrying")
                self._close()
            if stopping:
                self._close()
                return

    def _cycle(self) -> None:
        now = time.time()
        if self._db is None:
            if time.monotonic() < self._retry_at:
                return
            if not self._try_open(now):
                return
        if self._queue or self._retry:
            self._write_batch()
        if self._db is not None and now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_SECONDS
            self._guarded(lambda: self._prune(now), recovers=False)

    def _try_open(self, now: float) -> bool:
        try:
            self._open_database(now)
        except (sqlite3.Error, OSError) as exc:
            reason = _error_reason(exc)
            self._close()
            if reason == "corrupt" and self._set_aside(exc):
                return self._try_open(now)
            self._failed(reason, exc)
            return False
        return True

    def _open_database(self, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = schema.connect(self.path)
        self._db = db
        schema.create(db)
        self._ids = {name: cid for cid, name in db.execute("SELECT id, name FROM checks")}
        self._open = {
            row[1]: _Incident(row[0], row[1], row[2], row[3], _DOWN if row[4] == "down"
                              else _DEGRADED, row[5], row[6])
            for row in db.execute(
                "SELECT id, check_id, started_at, last_at, worst, first_reason, last_reason "
                "FROM incidents WHERE ended_at IS NULL ORDER BY started_at")
        }
        live = LiveWindows()
        for table, since in (("hour", (int(now) // 3600 - 24) * 3600),
                             ("day", (int(now) // 86400 - 30) * 86400)):
            add = live.add_hour if table == "hour" else live.add_day
            for cid, bucket, up, degraded, down in db.execute(
                f"SELECT check_id, bucket, up, degraded, down FROM {table} "
                "WHERE bucket >= ? ORDER BY bucket", (since,)
            ):
                add(cid, bucket, up, degraded, down)
        self.live = live
        self.generation += 1
        self._recovered()
        self.ready.set()
        if self._on_open is not None:
            self._on_open(self.generation)

    def _set_aside(self, exc: BaseException) -> bool:
        """Move an unusable file (and its WAL) aside; False when that is impossible too."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        try:
            if self.path.exists():
                self.path.rename(target)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    side.rename(target.with_name(target.name + suffix))
        except OSError as move_error:
            self._failed("corrupt", move_error)
            return False
        self.stats.set_aside += 1
        self.stats.errors["corrupt"] = self.stats.errors.get("corrupt", 0) + 1
        log.error("history database unusable; moved aside, starting a fresh one",
                  path=str(self.path), moved_to=str(target), error=str(exc))
        return True

    def _guarded(self, work: Callable[[], None], *, recovers: bool = True) -> bool:
        """Run ``work`` in the database; False (said once, counted, retried later) when the
        database fails it. Only a batch or an open shows that history works again."""
        try:
            work()
        except (sqlite3.Error, OSError) as exc:
            reason = _error_reason(exc)
            self._last_reason = reason
            with contextlib.suppress(sqlite3.Error):
                if self._db is not None and self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            if reason in ("corrupt", "io", "unwritable"):
                self._close()  # reopen (and set aside when corrupt) on the next cycle
                if reason == "corrupt":
                    self._set_aside(exc)
                    self._retry_at = 0.0
                    return False
            self._failed(reason, exc)
            return False
        if recovers:
            self._recovered()
        return True

    def _failed(self, reason: str, exc: BaseException) -> None:
        self.stats.ok = False
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, RETRY_MAX_SECONDS)
        if self._failing != reason:  # say it once, not every retry
            self._failing = reason
            log.error("history cannot be written; probing and alerting go on, results wait "
                      "in memory and are retried", reason=reason, path=str(self.path),
                      error=str(exc), pending=self.pending())

    def _recovered(self) -> None:
        self._backoff = 0.5
        self.stats.ok = True
        if self._failing is not None:
            log.info("history writable again", path=str(self.path), previous=self._failing,
                     pending=self.pending())
            self._failing = None

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    # -- one batch ----------------------------------------------------------------------------

    def _write_batch(self) -> None:
        if time.monotonic() < self._retry_at:
            return
        batch, self._retry = self._retry, []
        queue = self._queue
        for _ in range(len(queue)):
            batch.append(queue.popleft())
        started = time.perf_counter()
        if self._guarded(lambda: self._commit(batch)):
            self._attempts = 0
            self._done += len(batch)
            self.stats.committed_results += len(batch)
            self.stats.batches += 1
            self.stats.last_batch_seconds = time.perf_counter() - started
            return
        self._attempts += 1
        if self._last_reason == "other" and self._attempts >= MAX_ATTEMPTS_OF_A_BAD_BATCH:
            # Not a fault of the disk or the file: retrying the same batch would block every
            # later one. Drop it, say so, go on.
            log.error("history batch refused by the database; dropped", results=len(batch))
            self.stats.dropped_results += len(batch)
            self._done += len(batch)
            self._attempts = 0
            return
        excess = len(batch) + len(queue) - MAX_PENDING_RESULTS
        if excess > 0:
            del batch[:excess]
            self.stats.dropped_results += excess
            self._done += excess
        self._retry = batch

    def pending(self) -> int:
        return len(self._queue) + len(self._retry)

    def _commit(self, batch: list[Row]) -> None:
        db = self._db
        assert db is not None
        new_ids: dict[str, int] = {}
        # (check_id, bucket) → [up, degraded, down, unknown, latency counts] per resolution
        buckets: dict[str, dict[tuple[int, int], list]] = {t: {} for t in schema.RESOLUTIONS}
        working: dict[int, _Incident | None] = {}
        touched: dict[int, _Incident] = {}  # id(incident) → incident, in first-touch order
        db.execute("BEGIN IMMEDIATE")
        for name, probe, code, started, duration, reason in batch:
            cid = self._ids.get(name) or new_ids.get(name)
            if cid is None:
                cid = db.execute("INSERT INTO checks (name, probe, first_seen) VALUES (?, ?, ?) "
                                 "ON CONFLICT (name) DO UPDATE SET probe = excluded.probe "
                                 "RETURNING id", (name, probe, started)).fetchone()[0]
                new_ids[name] = cid
            second = int(started)
            for table, width in schema.RESOLUTIONS.items():
                key = (cid, second - second % width)
                entry = buckets[table].get(key)
                if entry is None:
                    entry = buckets[table][key] = [0, 0, 0, 0, {}]
                entry[code] += 1
                if code != _UNKNOWN:
                    hist = entry[4]
                    index = latency.bin_of(duration)
                    hist[index] = hist.get(index, 0) + 1
            self._track_incident(cid, code, started, reason, working, touched)
        for table, rows in buckets.items():
            db.executemany(_UPSERT.format(table=table), [
                (cid, bucket, e[0], e[1], e[2], e[3], latency.encode(e[4]) or None)
                for (cid, bucket), e in rows.items()
            ])
        for incident in touched.values():
            self._save_incident(db, incident)
        db.execute("COMMIT")
        # Only now does memory follow the database (a failed batch is retried from scratch).
        if new_ids:
            self._ids = {**self._ids, **new_ids}
        for cid, state in working.items():
            if state is None:
                self._open.pop(cid, None)
            else:
                self._open[cid] = state
        for (cid, bucket), e in buckets["hour"].items():
            self.live.add_hour(cid, bucket, e[0], e[1], e[2])
        for (cid, bucket), e in buckets["day"].items():
            self.live.add_day(cid, bucket, e[0], e[1], e[2])

    def _track_incident(self, cid: int, code: int, started: float, reason: str,
                        working: dict[int, _Incident | None],
                        touched: dict[int, _Incident]) -> None:
        if code == _UNKNOWN:
            return
        if cid in working:
            current = working[cid]  # this batch's own copy (or None: closed in this batch)
        else:
            kept = self._open.get(cid)
            # A private copy: the open incident in memory changes only once the batch commits.
            current = dataclasses.replace(kept) if kept is not None else None
        if code == _UP:
            if current is not None:
                current.ended_at = started
                touched[id(current)] = current
            working[cid] = None
            return
        if current is None:
            current = _Incident(None, cid, started, started, code, reason, reason)
        else:
            current.last_at = started
            current.last_reason = reason
            current.worst = max(current.worst, code)
        working[cid] = current
        touched[id(current)] = current

    @staticmethod
    def _save_incident(db: sqlite3.Connection, incident: _Incident) -> None:
        if incident.id is None:
            incident.id = db.execute(
                "INSERT INTO incidents (check_id, started_at, ended_at, last_at, worst, "
                "first_reason, last_reason) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (incident.check_id, incident.started_at, incident.ended_at, incident.last_at,
                 _NAME[incident.worst], incident.first_reason, incident.last_reason),
            ).fetchone()[0]
        else:
            db.execute(
                "UPDATE incidents SET ended_at = ?, last_at = ?, worst = ?, last_reason = ? "
                "WHERE id = ?",
                (incident.ended_at, incident.last_at, _NAME[incident.worst],
                 incident.last_reason, incident.id),
            )

    # -- retention ----------------------------------------------------------------------------

    def _prune(self, now: float) -> None:
        db = self._db
        assert db is not None
        r = self.retention
        db.execute("BEGIN IMMEDIATE")
        for table, keep in (("minute", r.minute), ("hour", r.hour), ("day", r.day)):
            width = schema.RESOLUTIONS[table]
            # Keep one bucket beyond the retention so a window of that length is always whole.
            db.execute(f"DELETE FROM {table} WHERE bucket < ?",
                       (int(now - keep) // width * width - width,))
        horizon = now - r.incidents
        db.execute("DELETE FROM incidents WHERE COALESCE(ended_at, last_at) < ?", (horizon,))
        gone = [
            (cid, name) for name, cid in self._ids.items()
            if name not in self._configured
            and db.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM day WHERE check_id = ?1) "
                "AND NOT EXISTS (SELECT 1 FROM hour WHERE check_id = ?1) "
                "AND NOT EXISTS (SELECT 1 FROM minute WHERE check_id = ?1) "
                "AND NOT EXISTS (SELECT 1 FROM incidents WHERE check_id = ?1)", (cid,),
            ).fetchone()[0]
        ]
        db.executemany("DELETE FROM checks WHERE id = ?", [(cid,) for cid, _ in gone])
        db.execute("COMMIT")
        if gone:
            names = {name for _, name in gone}
            self._ids = {n: i for n, i in self._ids.items() if n not in names}
        for cid, _ in gone:
            self._open.pop(cid, None)
