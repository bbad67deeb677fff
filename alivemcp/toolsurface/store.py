"""Where surfaces are kept: every version of every check's surface, the approvals and the
changelog, in ``data_dir/surfaces.sqlite``: a database of its own beside the history database,
because history can be turned off (``history.enabled``) and its file set aside when damaged,
and neither may cost an approval.

The daemon writes here when a surface changes or an approval is made, and the CLI
(``alivemcp tools approve``) writes approvals here while the daemon runs; the daemon picks
them up by polling :meth:`SurfaceStore.approvals_after`. SQLite in WAL mode serialises the
writers; every method opens (once per thread) its own connection, so the store can be used
from worker threads, the CLI and the tests alike.

Bounds: a version is stored once per (check, digest), whatever how often it is seen; each
check keeps at most ``max_versions`` versions, the oldest (by last seen) pruned first, never
the approved one, and the number pruned is counted per check.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alivemcp.surface import Surface

__all__ = [
    "DEFAULT_MAX_VERSIONS",
    "FILE_NAME",
    "Approval",
    "ChangeRow",
    "SurfaceStore",
    "VersionRow",
]

FILE_NAME = "surfaces.sqlite"
DEFAULT_MAX_VERSIONS = 50
#: Bytes of one stored surface kept at most (documents beyond are dropped, digests kept).
MAX_STORED_BYTES = 4 * 1024 * 1024

_DDL = (
    """
    CREATE TABLE IF NOT EXISTS surface_versions (
        check_name TEXT NOT NULL,
        digest     TEXT NOT NULL,
        first_seen REAL NOT NULL,
        last_seen  REAL NOT NULL,
        items      INTEGER NOT NULL,
        surface    TEXT NOT NULL,     -- Surface.to_json(), canonical JSON
        findings   TEXT NOT NULL,     -- JSON list of findings
        PRIMARY KEY (check_name, digest)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS surface_approvals (
        id          INTEGER PRIMARY KEY,
        check_name  TEXT NOT NULL,
        digest      TEXT NOT NULL,
        approved_at REAL NOT NULL,
        approved_by TEXT NOT NULL,    -- 'first seen', 'cli:<user>'
        origin      TEXT NOT NULL DEFAULT 'local'  -- 'remote': another replica's, via Kafka
    )
    """,
    "CREATE INDEX IF NOT EXISTS surface_approvals_by_check ON surface_approvals (check_name, id)",
    """
    CREATE TABLE IF NOT EXISTS surface_changes (
        id          INTEGER PRIMARY KEY,
        check_name  TEXT NOT NULL,
        at          REAL NOT NULL,
        from_digest TEXT,             -- NULL: the first surface seen
        to_digest   TEXT NOT NULL,
        summary     TEXT NOT NULL     -- JSON: the diff and findings, bounded
    )
    """,
    "CREATE INDEX IF NOT EXISTS surface_changes_by_time ON surface_changes (at)",
    """
    CREATE TABLE IF NOT EXISTS surface_pruned (
        check_name TEXT PRIMARY KEY,
        versions   INTEGER NOT NULL
    )
    """,
)
#: Changes kept per check in the changelog (the oldest go first).
_MAX_CHANGES_PER_CHECK = 500


@dataclass(frozen=True, slots=True)
class VersionRow:
    digest: str
    first_seen: float
    last_seen: float
    items: int
    findings: int


@dataclass(frozen=True, slots=True)
class Approval:
    id: int
    check: str
    digest: str
    approved_at: float
    approved_by: str
    origin: str = "local"


@dataclass(frozen=True, slots=True)
class ChangeRow:
    id: int
    check: str
    at: float
    from_digest: str | None
    to_digest: str
    summary: dict[str, Any]


def stored_text(surface: Surface) -> str:
    """The JSON text stored for ``surface``: documents are dropped from the end when the whole
    would exceed MAX_STORED_BYTES (digests stay, so changes are still seen)."""
    data = surface.to_json()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    items = data["items"]
    index = len(items)
    while len(text) > MAX_STORED_BYTES and index > 0:
        # Halve what is kept until it fits: a flood is cut in a few passes, not one per item.
        index //= 2
        for item in items[index:]:
            if item["document"] is not None:
                item["document"] = None
                data["dropped"] += 1
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return text


class SurfaceStore:
    def __init__(self, data_dir: str | Path, *, max_versions: int = DEFAULT_MAX_VERSIONS) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.max_versions = max(2, max_versions)
        self._local = threading.local()
        self._created = False
        self._create_lock = threading.Lock()

    # -- connections -------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the database file exists (every method but this one creates it)."""
        return self.path.exists()

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            with self._create_lock:
                # WAL is a property of the file, set once: setting it again from every new
                # connection needs a lock the busy timeout does not wait for ("database is
                # locked" while another thread writes).
                if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
                if not self._created:
                    for statement in _DDL:
                        db.execute(statement)
                    self._created = True
            self._local.db = db
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- versions -----------------------------------------------------------------------------

    def record(
        self, check: str, surface: Surface, findings: Sequence[dict[str, Any]], seen_at: float
    ) -> tuple[bool, int]:
        """Note that ``check`` offered ``surface`` at ``seen_at``. Returns (whether this digest
        is new for the check, how many old versions were pruned to make room)."""
        with self._write() as db:
            updated = db.execute(
                "UPDATE surface_versions SET last_seen = MAX(last_seen, ?) "
                "WHERE check_name = ? AND digest = ?",
                (seen_at, check, surface.digest),
            ).rowcount
            if updated:
                return False, 0
            db.execute(
                "INSERT INTO surface_versions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    check,
                    surface.digest,
                    seen_at,
                    seen_at,
                    len(surface.items),
                    stored_text(surface),
                    json.dumps(list(findings), separators=(",", ":")),
                ),
            )
            return True, self._prune(db, check)

    def _prune(self, db: sqlite3.Connection, check: str) -> int:
        approved = self._approved_digest(db, check)
        rows = db.execute(
            "SELECT digest FROM surface_versions WHERE check_name = ? ORDER BY last_seen DESC",
            (check,),
        ).fetchall()
        doomed = [d for (d,) in rows[self.max_versions :] if d != approved]
        if not doomed:
            return 0
        db.executemany(
            "DELETE FROM surface_versions WHERE check_name = ? AND digest = ?",
            [(check, d) for d in doomed],
        )
        db.execute(
            "INSERT INTO surface_pruned VALUES (?, ?) ON CONFLICT (check_name) "
            "DO UPDATE SET versions = versions + excluded.versions",
            (check, len(doomed)),
        )
        return len(doomed)

    def touch(self, seen: Sequence[tuple[str, str, float]]) -> None:
        """Move the last-seen time of (check, digest, at) versions forward, in one go."""
        if not seen:
            return
        with self._write() as db:
            db.executemany(
                "UPDATE surface_versions SET last_seen = MAX(last_seen, ?) "
                "WHERE check_name = ? AND digest = ?",
                [(at, check, digest) for check, digest, at in seen],
            )

    def versions(self, check: str) -> list[VersionRow]:
        """The check's versions, newest (by first seen) first."""
        rows = (
            self._db()
            .execute(
                "SELECT digest, first_seen, last_seen, items, findings FROM surface_versions "
                "WHERE check_name = ? ORDER BY first_seen DESC, last_seen DESC",
                (check,),
            )
            .fetchall()
        )
        return [VersionRow(d, f, la, n, len(json.loads(fs))) for d, f, la, n, fs in rows]

    def latest(self, check: str) -> str | None:
        """The digest seen last."""
        row = (
            self._db()
            .execute(
                "SELECT digest FROM surface_versions WHERE check_name = ? "
                "ORDER BY last_seen DESC LIMIT 1",
                (check,),
            )
            .fetchone()
        )
        return str(row[0]) if row else None

    def surface(self, check: str, digest: str) -> Surface | None:
        row = (
            self._db()
            .execute(
                "SELECT surface FROM surface_versions WHERE check_name = ? AND digest = ?",
                (check, digest),
            )
            .fetchone()
        )
        return Surface.from_json(json.loads(row[0])) if row else None

    def findings(self, check: str, digest: str) -> list[dict[str, Any]]:
        row = (
            self._db()
            .execute(
                "SELECT findings FROM surface_versions WHERE check_name = ? AND digest = ?",
                (check, digest),
            )
            .fetchone()
        )
        found = json.loads(row[0]) if row else []
        return found if isinstance(found, list) else []

    def resolve_digest(self, check: str, prefix: str) -> str | None:
        """The one stored digest of ``check`` starting with ``prefix`` (at least 4 hex digits;
        None: none or several)."""
        if len(prefix) < 4 or any(c not in "0123456789abcdef" for c in prefix):
            return None
        rows = (
            self._db()
            .execute(
                "SELECT digest FROM surface_versions WHERE check_name = ? AND digest LIKE ?",
                (check, prefix + "%"),
            )
            .fetchall()
        )
        return str(rows[0][0]) if len(rows) == 1 else None

    def pruned(self, check: str) -> int:
        row = (
            self._db()
            .execute("SELECT versions FROM surface_pruned WHERE check_name = ?", (check,))
            .fetchone()
        )
        return int(row[0]) if row else 0

    def checks(self) -> list[str]:
        rows = self._db().execute("SELECT DISTINCT check_name FROM surface_versions").fetchall()
        return sorted(str(r[0]) for r in rows)

    # -- approvals -----------------------------------------------------------------------------

    def approve(
        self, check: str, digest: str, at: float, by: str, origin: str = "local"
    ) -> Approval:
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO surface_approvals "
                "(check_name, digest, approved_at, approved_by, origin) VALUES (?, ?, ?, ?, ?)",
                (check, digest, at, by, origin),
            )
            return Approval(int(cursor.lastrowid or 0), check, digest, at, by, origin)

    def approve_remote(self, check: str, digest: str, at: float, by: str) -> Approval | None:
        """Another replica's approval, unless it is the check's latest here already (each
        result record repeats it). Returns the new approval, or None."""
        latest = self.approval(check)
        if latest is not None and (latest.digest, latest.approved_at, latest.approved_by) == (
            digest,
            at,
            by,
        ):
            return None
        if latest is not None and latest.approved_at > at:
            return None  # an older approval than the one kept here
        return self.approve(check, digest, at, by, origin="remote")

    def approval(self, check: str) -> Approval | None:
        """The check's latest approval."""
        row = (
            self._db()
            .execute(
                "SELECT id, check_name, digest, approved_at, approved_by, origin "
                "FROM surface_approvals WHERE check_name = ? ORDER BY id DESC LIMIT 1",
                (check,),
            )
            .fetchone()
        )
        return Approval(*row) if row else None

    @staticmethod
    def _approved_digest(db: sqlite3.Connection, check: str) -> str | None:
        row = db.execute(
            "SELECT digest FROM surface_approvals WHERE check_name = ? ORDER BY id DESC LIMIT 1",
            (check,),
        ).fetchone()
        return str(row[0]) if row else None

    def approvals_after(self, last_id: int) -> list[Approval]:
        """Approvals made since ``last_id`` (by the daemon or the CLI), oldest first."""
        rows = (
            self._db()
            .execute(
                "SELECT id, check_name, digest, approved_at, approved_by, origin "
                "FROM surface_approvals WHERE id > ? ORDER BY id LIMIT 1000",
                (last_id,),
            )
            .fetchall()
        )
        return [Approval(*r) for r in rows]

    def last_approval_id(self, before: float | None = None) -> int:
        """The id of the latest approval (made before ``before``, if given)."""
        if before is None:
            row = self._db().execute("SELECT MAX(id) FROM surface_approvals").fetchone()
        else:
            row = (
                self._db()
                .execute("SELECT MAX(id) FROM surface_approvals WHERE approved_at < ?", (before,))
                .fetchone()
            )
        return int(row[0] or 0)

    # -- the changelog -------------------------------------------------------------------------

    def add_change(
        self,
        check: str,
        at: float,
        from_digest: str | None,
        to_digest: str,
        summary: dict[str, Any],
    ) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO surface_changes (check_name, at, from_digest, to_digest, summary) "
                "VALUES (?, ?, ?, ?, ?)",
                (check, at, from_digest, to_digest, json.dumps(summary, separators=(",", ":"))),
            )
            db.execute(
                "DELETE FROM surface_changes WHERE check_name = ? AND id NOT IN (SELECT id FROM "
                "surface_changes WHERE check_name = ? ORDER BY id DESC LIMIT ?)",
                (check, check, _MAX_CHANGES_PER_CHECK),
            )

    def changes(
        self, since: float = 0.0, *, check: str | None = None, limit: int = 100
    ) -> list[ChangeRow]:
        """Surface changes at or after ``since``, newest first."""
        query = (
            "SELECT id, check_name, at, from_digest, to_digest, summary FROM surface_changes "
            "WHERE at >= ?"
        )
        args: list[Any] = [since]
        if check is not None:
            query += " AND check_name = ?"
            args.append(check)
        query += " ORDER BY at DESC, id DESC LIMIT ?"
        args.append(max(1, min(limit, 1000)))
        rows = self._db().execute(query, args).fetchall()
        return [ChangeRow(i, c, a, f, t, json.loads(s)) for i, c, a, f, t, s in rows]
