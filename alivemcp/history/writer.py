"""The one writer of the history database: a thread that commits results in batches.

The event loop only appends a small tuple to a deque (:meth:`HistoryWriter.observe`); no probe
or alert ever waits on the database. Once a second (or when a reader asks for a flush) the
thread drains the deque and writes it in one transaction (:mod:`alivemcp.history.rollup`:
bucket counts, latency summaries, incidents, new check names). ``kill -9`` therefore loses at
most the results of the last second (:data:`BATCH_SECONDS`) plus the batch being committed;
WAL with synchronous=NORMAL keeps every committed batch across a process crash.

Faults never stop probing or alerting. A failed batch stays queued (up to
:data:`MAX_PENDING_RESULTS`, then the oldest are dropped and counted) and is retried with
backoff; the failure is logged once when it starts and once when a batch is written again. A
file that is not a usable database (corrupt, or from a newer version) is moved aside as
``history.sqlite.corrupt-<time>`` and a fresh one is started; nothing is deleted.

An incident still open when the daemon stops stays open in the file, and the first decided
run after a restart extends or closes it (an ``up`` run closes it at that run's start: the
time the daemon was away counts as part of the incident, since nothing showed it ended).
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from alivemcp.engine.results import CheckResult
from alivemcp.history import rollup, schema
from alivemcp.history.config import Retention
from alivemcp.history.live import LiveWindows
from alivemcp.history.rollup import Incident, Pending
from alivemcp.probe import Status

__all__ = ["BATCH_SECONDS", "MAX_PENDING_RESULTS", "HistoryWriter", "WriterStats"]

log = structlog.get_logger("alivemcp.history")

BATCH_SECONDS = 1.0
#: Results held while the database cannot be written (~100 bytes each).
MAX_PENDING_RESULTS = 500_000
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 600.0
MAX_ATTEMPTS_OF_A_BAD_BATCH = 3
REASON_CHARS = 500
#: Why a write can fail, as counted in alivemcp_history_write_errors{reason}.
FAULT_REASONS = ("disk_full", "unwritable", "corrupt", "locked", "io", "other")

_CODE = {
    Status.UP: rollup.UP,
    Status.DEGRADED: rollup.DEGRADED,
    Status.DOWN: rollup.DOWN,
    Status.UNKNOWN: rollup.UNKNOWN,
}
#: Faults of the connection or the file: close it and open again on the next attempt.
_REOPEN_ON = frozenset({"corrupt", "io", "unwritable"})


@dataclass(slots=True)
class WriterStats:
    """What the metrics collector reads (plain numbers). Each field has one writing thread:
    ``intake_dropped`` the event loop's, every other the writer thread's."""

    ok: bool = True
    committed_results: int = 0
    batches: int = 0
    dropped_results: int = 0
    intake_dropped: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_batch_seconds: float = 0.0
    set_aside: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_results + self.intake_dropped


def fault_reason(exc: BaseException) -> str:
    """The reason label of a failed open or write (one of :data:`FAULT_REASONS`)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if isinstance(exc, OSError) and not isinstance(exc, sqlite3.Error):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk_full"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "unwritable"
        return "io"
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return "disk_full"
    if (
        name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"))
        or "readonly" in text
        or "unable to open" in text
    ):
        return "unwritable"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or isinstance(exc, schema.SchemaError):
        return "corrupt"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "locked"
    if name.startswith("SQLITE_IOERR"):
        return "io"
    return "other"


def _storable(text: str) -> str:
    """``text`` as SQLite can take it: a lone surrogate (a target's undecodable bytes kept by
    ``surrogateescape``) cannot be encoded, and would fail the whole batch it is in."""
    if text.isascii():  # the common case, told without encoding (a flag of the string)
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        try:  # the bytes it stood for, shown as U+FFFD like any undecodable byte
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return text.encode("utf-8", "replace").decode()
    return text


class HistoryWriter:
    def __init__(
        self, path: Path, retention: Retention, on_open: Callable[[int], None] | None = None
    ) -> None:
        self.path = path
        self.retention = retention
        self.live = LiveWindows()
        self.stats = WriterStats()
        #: Bumped whenever the file is (re)opened, so readers reopen too.
        self.generation = 0
        #: Set once the database has been opened; readers wait for it.
        self.ready = threading.Event()
        self._on_open = on_open
        self._queue = Pending()
        self._queue_lock = threading.Lock()  # observe appends, the writer swaps the queue
        self._retry = Pending()  # a batch that failed, retried before newer results
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._db: sqlite3.Connection | None = None
        self._ids: dict[str, int] = {}
        self._open: dict[int, Incident] = {}
        self._configured: frozenset[str] | None = None  # None: not told yet (prune waits)
        self._enqueued = 0  # results handed to observe (event-loop side only)
        self._done = 0  # results committed or dropped by the writer (writer side only)
        self._retry_at = 0.0
        self._backoff = RETRY_MIN_SECONDS
        self._failing: str | None = None
        self._next_prune = 0.0
        self._attempts = 0  # failed attempts of the batch being retried

    # -- event-loop side ----------------------------------------------------------------------

    def observe(self, result: CheckResult) -> None:
        name = _storable(result.check.name)
        reason = _storable(result.reason[:REASON_CHARS])
        with self._queue_lock:
            queue = self._queue
            queue.append(
                name,
                result.check.probe_type,
                _CODE[result.status],
                result.started_at,
                result.duration_seconds,
                reason,
            )
            self._enqueued += 1
            if len(queue) > MAX_PENDING_RESULTS:  # the database has been failing for long
                excess = len(queue) - MAX_PENDING_RESULTS + MAX_PENDING_RESULTS // 10
                queue.drop_oldest(excess)  # a tenth at once: dropping is a copy of each column
                self.stats.intake_dropped += excess

    def check_ids(self) -> dict[str, int]:
        """name → id of every check with history (replaced whole, never mutated in place)."""
        return self._ids

    def set_configured(self, names: Iterable[str]) -> None:
        self._configured = frozenset(names)

    def change_configured(self, added: Iterable[str], removed: Iterable[str]) -> None:
        # Replaced whole: the writer thread reads the set while pruning.
        configured = self._configured if self._configured is not None else frozenset()
        self._configured = configured.difference(removed).union(added)

    def set_retention(self, retention: Retention) -> None:
        """A changed retention is applied at the next batch, not in up to 10 minutes."""
        self.retention = retention
        self._next_prune = 0.0
        self._wake.set()

    def marker(self) -> int:
        """A position: :meth:`reached` tells when everything observed before it is written."""
        self._wake.set()
        return self._enqueued

    def reached(self, marker: int) -> bool:
        return self._done + self.stats.intake_dropped >= marker

    def failing(self) -> bool:
        """True while writes fail (results wait in memory): a flush would only wait."""
        return self._failing is not None

    def pending(self) -> int:
        return len(self._queue) + len(self._retry)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="alivemcp-history", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Write what is queued (one last attempt, within ``timeout``) and close."""
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
            if stopping:
                self._retry_at = 0.0  # the last chance: no backoff
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
        opening = self._db is None
        if opening and (time.monotonic() < self._retry_at or not self._try_open(now)):
            return
        if self.pending() and time.monotonic() >= self._retry_at:
            self._write_batch()
        if self._db is not None and now >= self._next_prune and self._configured is not None:
            self._next_prune = now + PRUNE_EVERY_SECONDS
            self._guarded(lambda: self._prune(now))

    # -- opening, faults ----------------------------------------------------------------------

    def _try_open(self, now: float) -> bool:
        for _ in range(2):  # a second time only after moving an unusable file aside
            try:
                self._open_database(now)
                return True
            except (sqlite3.Error, OSError) as exc:
                self._close()
                reason = fault_reason(exc)
                if reason != "corrupt" or not self._set_aside(exc):
                    self._failed(reason, exc)
                    return False
        return False

    def _open_database(self, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = db = schema.connect(self.path)
        schema.create(db)
        self._ids = {name: cid for cid, name in db.execute("SELECT id, name FROM checks")}
        self._open = rollup.load_open_incidents(db)
        live = LiveWindows()
        select = "SELECT check_id, bucket, up, degraded, down FROM {} WHERE bucket >= ?"
        live.load(
            db.execute(select.format("hour"), ((int(now) // 3600 - 24) * 3600,)),
            db.execute(select.format("day"), ((int(now) // 86400 - 30) * 86400,)),
            now,
        )
        self.live = live
        self.generation += 1
        if not self.pending():
            # Nothing waits to prove otherwise; with results waiting, only their batch does
            # (a file can open on a disk too full to take a batch).
            self._recovered()
        self.ready.set()
        if self._on_open is not None:
            self._on_open(self.generation)

    def _set_aside(self, exc: BaseException) -> bool:
        """Move an unusable file (and its WAL) aside; False when that is impossible too."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():  # a second bad file within the same second
            n += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
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
        self._retry_at = 0.0
        log.error(
            "history database unusable; moved aside, starting a fresh one",
            path=str(self.path),
            moved_to=str(target),
            error=str(exc),
        )
        return True

    def _guarded(self, work: Callable[[], None]) -> str | None:
        """Run ``work`` in the database; the fault's reason (said once, counted, retried
        later) when it fails, else None."""
        try:
            work()
        except Exception as exc:  # anything not sqlite's or the OS's is "other": said, counted
            reason = fault_reason(exc)
            with contextlib.suppress(sqlite3.Error):
                if self._db is not None and self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            if reason in _REOPEN_ON:
                self._close()  # reopen (and set aside when corrupt) on the next cycle
                if reason == "corrupt" and self._set_aside(exc):
                    return reason
            self._failed(reason, exc)
            return reason
        return None

    def _failed(self, reason: str, exc: BaseException) -> None:
        self.stats.ok = False
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, RETRY_MAX_SECONDS)
        if self._failing != reason:  # say it once, not every retry
            self._failing = reason
            log.error(
                "history cannot be written; probing and alerting go on, results wait "
                "in memory and are retried",
                reason=reason,
                path=str(self.path),
                error=str(exc),
                pending=self.pending(),
            )

    def _recovered(self) -> None:
        self._backoff = RETRY_MIN_SECONDS
        self.stats.ok = True
        if self._failing is not None:
            log.info(
                "history writable again",
                path=str(self.path),
                previous=self._failing,
                pending=self.pending(),
            )
            self._failing = None

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    # -- one batch ----------------------------------------------------------------------------

    def _write_batch(self) -> None:
        batch, self._retry = self._retry, Pending()
        with self._queue_lock:
            taken, self._queue = self._queue, Pending()
        if batch:
            batch.extend(taken)
        else:
            batch = taken
        started = time.perf_counter()
        written: list[rollup.Batch] = []
        reason = self._guarded(lambda: written.append(self._commit(batch)))
        if reason is None:
            self._follow(written[0], batch)
            self._attempts = 0
            self._done += len(batch)
            self.stats.committed_results += len(batch)
            self.stats.batches += 1
            self.stats.last_batch_seconds = time.perf_counter() - started
            self._recovered()
            return
        self._attempts += 1
        if reason == "other" and self._attempts >= MAX_ATTEMPTS_OF_A_BAD_BATCH:
            # Not a fault of the disk or the file: retrying the same batch would block every
            # later one. Drop it, say so, go on.
            log.error("history batch refused by the database; dropped", results=len(batch))
            self._drop(len(batch))
            self._attempts = 0
            return
        excess = len(batch) + len(self._queue) - MAX_PENDING_RESULTS
        if excess > 0:
            batch.drop_oldest(excess)
            self._drop(excess)
        self._retry = batch

    def _drop(self, count: int) -> None:
        self.stats.dropped_results += count
        self._done += count

    def _commit(self, batch: Pending) -> rollup.Batch:
        db = self._db
        if db is None:
            raise sqlite3.OperationalError("unable to open database file")
        return rollup.write_batch(db, batch, self._ids, self._open)

    def _follow(self, written: rollup.Batch, batch: Pending) -> None:
        """Memory follows the database once a batch has committed."""
        if written.new_ids:
            self._ids = {**self._ids, **written.new_ids}
        for cid, state in written.incidents.items():
            if state is None:
                self._open.pop(cid, None)
            else:
                self._open[cid] = state
        live = self.live
        for cid, code, started in zip(written.check_ids, batch.codes, batch.started, strict=True):
            if code == rollup.UNKNOWN:
                continue  # counts in no window
            second = int(started)
            up, degraded, down = code == rollup.UP, code == rollup.DEGRADED, code == rollup.DOWN
            live.add_hour(cid, second - second % 3600, up, degraded, down)
            live.add_day(cid, second - second % 86400, up, degraded, down)

    # -- retention ----------------------------------------------------------------------------

    def _prune(self, now: float) -> None:
        db = self._db
        if db is None:
            return
        r = self.retention
        gone = rollup.prune(
            db,
            now,
            {"minute": r.minute, "hour": r.hour, "day": r.day},
            r.incidents,
            self._ids,
            self._configured or frozenset(),
        )
        horizon = now - r.incidents
        for cid, incident in list(self._open.items()):
            if incident.last_at < horizon:  # its row was just deleted
                del self._open[cid]
        if gone:
            names = {name for _, name in gone}
            self._ids = {n: i for n, i in self._ids.items() if n not in names}
            for cid, _ in gone:
                self._open.pop(cid, None)
                self.live.forget(cid)  # SQLite may give the id to the next new check
