"""The history database: one SQLite file in WAL mode, opened the same way by every reader.

Size is bounded by checks x buckets, never by runs: a run only adds to the counts of its
minute, hour and day bucket. Tables are keyed (check_id, bucket) WITHOUT ROWID so one check's
window is a single contiguous range read, which is what every query does.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alivemcp.history import latency

__all__ = ["FILE_NAME", "RESOLUTIONS", "SCHEMA_VERSION", "connect", "create"]

FILE_NAME = "history.sqlite"
SCHEMA_VERSION = 1
#: Bucket tables and their width in seconds.
RESOLUTIONS: dict[str, int] = {"minute": 60, "hour": 3600, "day": 86400}

_BUCKET_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    check_id INTEGER NOT NULL,
    bucket   INTEGER NOT NULL,   -- unix time of the bucket's start
    up       INTEGER NOT NULL DEFAULT 0,
    degraded INTEGER NOT NULL DEFAULT 0,
    down     INTEGER NOT NULL DEFAULT 0,
    unknown  INTEGER NOT NULL DEFAULT 0,
    latency  BLOB,               -- alivemcp.history.latency encoding
    PRIMARY KEY (check_id, bucket)
) WITHOUT ROWID
"""

_DDL = [
    """
    CREATE TABLE IF NOT EXISTS checks (
        id         INTEGER PRIMARY KEY,
        name       TEXT NOT NULL UNIQUE,
        probe      TEXT NOT NULL,
        first_seen REAL NOT NULL
    )
    """,
    *(_BUCKET_TABLE.format(name=name) for name in RESOLUTIONS),
    """
    CREATE TABLE IF NOT EXISTS incidents (
        id           INTEGER PRIMARY KEY,
        check_id     INTEGER NOT NULL,
        started_at   REAL NOT NULL,
        ended_at     REAL,            -- NULL while open
        last_at      REAL NOT NULL,   -- the last run that belonged to it
        worst        TEXT NOT NULL,   -- 'degraded' or 'down'
        first_reason TEXT NOT NULL,
        last_reason  TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS incidents_by_check ON incidents (check_id, started_at)",
    "CREATE INDEX IF NOT EXISTS incidents_open ON incidents (check_id) WHERE ended_at IS NULL",
]


class SchemaError(sqlite3.DatabaseError):
    """The file is a database, but not one this version can use."""


def connect(path: Path, *, readonly: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection with the project's settings. ``readonly`` opens an existing file only
    (reports and the API never create or change the database)."""
    if readonly:
        db = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout, check_same_thread=False
        )
        db.execute("PRAGMA query_only = ON")
    else:
        db = sqlite3.connect(
            path, timeout=timeout, check_same_thread=False, isolation_level=None
        )  # explicit BEGIN/COMMIT by the writer
        db.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL: a commit survives a process crash (kill -9); only an OS crash or power
        # loss can take the last transactions. Durability per batch, not per fsync.
        db.execute("PRAGMA synchronous = NORMAL")
    db.create_function("latency_merge", 2, latency.merge, deterministic=True)
    return db


def create(db: sqlite3.Connection) -> None:
    """Create the tables, or check an existing file is ours."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, SCHEMA_VERSION):
        raise SchemaError(
            f"history schema version {version} is newer than this alivemcp "
            f"understands ({SCHEMA_VERSION})"
        )
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
