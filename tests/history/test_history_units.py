"""The history write and read path on a real SQLite file, without a daemon: bucket edges,
windows, incidents across batches and reopenings, live windows against the database,
latency summaries, retention, and faults a single batch can carry."""

from __future__ import annotations

import asyncio
import math
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.history import latency, queries, schema
from alivemcp.history.config import HistoryConfig, Retention
from alivemcp.history.live import LiveWindows
from alivemcp.history.store import HistoryStore
from alivemcp.history.writer import HistoryWriter
from alivemcp.probe import Status

DAY = 86400
# "Now" for the windows: real time (retention prunes by the clock), fixed for the module.
NOW = int(time.time())


def result(
    name: str, status: str, started: float, duration: float = 0.05, reason: str | None = None
) -> CheckResult:
    return CheckResult(
        CheckInfo(name, "test_file"),
        Status(status),
        reason if reason is not None else f"{status} at {started}",
        duration,
        started,
        started + duration,
    )


def wait_written(writer: HistoryWriter, timeout: float = 20.0) -> None:
    marker = writer.marker()
    deadline = time.monotonic() + timeout
    while not writer.reached(marker):
        assert time.monotonic() < deadline, f"writer did not write within {timeout}s"
        writer.marker()
        time.sleep(0.01)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[HistoryWriter]:
    w = HistoryWriter(tmp_path / schema.FILE_NAME, Retention())
    w.set_configured([])
    w.start()
    try:
        yield w
    finally:
        w.stop(10)


def read(writer: HistoryWriter) -> sqlite3.Connection:
    return schema.connect(writer.path, readonly=True)


def feed(writer: HistoryWriter, *results: CheckResult) -> None:
    for r in results:
        writer.observe(r)
    wait_written(writer)


# -- buckets and windows ----------------------------------------------------------------------


def test_a_run_counts_in_the_bucket_its_start_falls_in(writer: HistoryWriter) -> None:
    minute = NOW // 60 * 60
    if minute % 3600 == 0:  # the minute before must fall in the same hour as this one
        minute -= 60
    feed(
        writer,
        result("a", "up", minute - 0.001),
        result("a", "down", minute),
        result("a", "degraded", minute + 59.999),
    )
    db = read(writer)
    rows = db.execute("SELECT bucket, up, degraded, down FROM minute ORDER BY bucket").fetchall()
    assert rows == [(minute - 60, 1, 0, 0), (minute, 0, 1, 1)]
    hour = minute // 3600 * 3600
    assert db.execute("SELECT bucket, up, degraded, down FROM hour").fetchall() == [(hour, 1, 1, 1)]


def test_windows_are_whole_buckets_current_plus_n_before(writer: HistoryWriter) -> None:
    minute, hour, day = NOW // 60 * 60, NOW // 3600 * 3600, NOW // DAY * DAY
    feed(
        writer,
        # 1h: the current minute and the 60 before; the 61st before is out.
        result("m", "up", minute - 3600),
        result("m", "down", minute - 3601),
        # 24h: the current hour and the 24 before.
        result("h", "up", hour - 24 * 3600),
        result("h", "down", hour - 24 * 3600 - 1),
        # 7d: the current day and the 7 before.
        result("d", "up", day - 7 * DAY),
        result("d", "down", day - 7 * DAY - 1),
    )
    db = read(writer)
    for name, window in (("m", "1h"), ("h", "24h"), ("d", "7d")):
        doc = queries.uptime(db, name, window, NOW)
        assert doc["runs"] == {"up": 1, "degraded": 0, "down": 0, "unknown": 0}, (name, doc)
        assert doc["up_ratio"] == 1.0
    assert queries.uptime(db, "d", "30d", NOW)["runs"]["down"] == 1
    series = queries.series(db, "m", "1h", NOW)
    assert len(series["buckets"]) == 61
    assert series["buckets"][0]["start"] == minute - 3600
    assert series["buckets"][0]["worst_status"] == "up"
    assert series["buckets"][-1]["start"] == minute
    assert len(queries.series(db, "h", "24h", NOW)["buckets"]) == 25
    assert len(queries.series(db, "d", "30d", NOW)["buckets"]) == 31


def test_ratios_exclude_unknown_and_are_null_without_decided_runs(writer: HistoryWriter) -> None:
    t = NOW - 100
    feed(
        writer,
        *(
            result("r", s, t + i)
            for i, s in enumerate(["up"] * 6 + ["degraded"] * 2 + ["down"] * 2 + ["unknown"] * 5)
        ),
        result("u", "unknown", t),
    )
    db = read(writer)
    doc = queries.uptime(db, "r", "1h", NOW)
    assert doc["up_ratio"] == 0.6 and doc["available_ratio"] == 0.8
    assert doc["runs"] == {"up": 6, "degraded": 2, "down": 2, "unknown": 5}
    only_unknown = queries.uptime(db, "u", "1h", NOW)
    assert only_unknown["up_ratio"] is None and only_unknown["available_ratio"] is None
    # Worst status of a bar: down over degraded over unknown over up.
    # The bar holding a down run (t + 8) is down, whatever else shares its minute.
    bars = queries.series(db, "r", "1h", NOW)["buckets"]
    bar = next(b for b in bars if b["start"] == int(t + 8) // 60 * 60)
    assert bar["worst_status"] == "down"


# -- incidents ----------------------------------------------------------------------------------

_STORY = [
    ("up", "fine"),
    ("down", "refused"),
    ("unknown", "prober"),
    ("degraded", "slow"),
    ("down", "timeout"),
    ("up", "back"),
    ("unknown", "prober"),
    ("degraded", "slow2"),
    ("unknown", "prober"),
    ("up", "back2"),
    ("down", "again"),
]


def _incidents(writer: HistoryWriter, name: str) -> list[dict]:
    return queries.incidents(read(writer), name, 0, NOW + 1000)


@pytest.mark.parametrize("per_batch", [len(_STORY), 1, 2])
def test_incidents_follow_the_runs_whatever_the_batches(
    writer: HistoryWriter, per_batch: int
) -> None:
    t0 = NOW - 600
    results = [result("i", s, t0 + 10 * n, reason=r) for n, (s, r) in enumerate(_STORY)]
    for k in range(0, len(results), per_batch):
        feed(writer, *results[k : k + per_batch])
    got = _incidents(writer, "i")
    assert [
        (i["started_at"], i["ended_at"], i["worst_status"], i["first_reason"], i["last_reason"])
        for i in got
    ] == [
        (t0 + 100, None, "down", "again", "again"),
        (t0 + 70, t0 + 90, "degraded", "slow2", "slow2"),
        (t0 + 10, t0 + 50, "down", "refused", "timeout"),
    ]
    assert got[1]["duration_seconds"] == 20


def test_an_open_incident_survives_a_new_writer_and_closes_once(tmp_path: Path) -> None:
    path = tmp_path / schema.FILE_NAME
    first = HistoryWriter(path, Retention())
    first.start()
    t0 = NOW - 300
    feed(first, result("k", "down", t0), result("k", "down", t0 + 10))
    first.stop(10)
    second = HistoryWriter(path, Retention())
    second.start()
    try:
        feed(
            second,
            result("k", "degraded", t0 + 100),
            result("k", "up", t0 + 110),
            result("k", "up", t0 + 120),
        )
        got = _incidents(second, "k")
        assert [(i["started_at"], i["ended_at"], i["worst_status"]) for i in got] == [
            (t0, t0 + 110, "down")
        ]
        assert read(second).execute("SELECT count(*) FROM incidents").fetchone()[0] == 1
    finally:
        second.stop(10)


# -- live windows against the database ------------------------------------------------------


def test_live_windows_equal_the_database_and_survive_a_restart(tmp_path: Path) -> None:
    rng = random.Random(13)
    path = tmp_path / schema.FILE_NAME
    w = HistoryWriter(path, Retention())
    w.start()
    statuses = ["up", "up", "up", "degraded", "down", "unknown"]
    names = [f"check/{n}" for n in range(5)]
    now = time.time()
    # 40 days back: some buckets fall outside every ring, some at its very edge.
    runs = [
        result(rng.choice(names), rng.choice(statuses), now - rng.uniform(0, 40 * DAY))
        for _ in range(3000)
    ]
    runs += [result(n, "down", (now // 3600 - 24) * 3600) for n in names]  # 24h's edge
    runs += [result(n, "up", (now // DAY - 30) * DAY) for n in names]  # 30d's edge
    for chunk in range(0, len(runs), 500):
        feed(w, *runs[chunk : chunk + 500])
    w.stop(10)

    def compare(writer: HistoryWriter) -> None:
        db = read(writer)
        at = time.time()
        for name in names:
            cid = writer.check_ids()[name]
            for window in ("24h", "7d", "30d"):
                table = queries.WINDOWS[window][0]
                counts, _ = queries.counts_between(db, cid, table, queries.window_start(window, at))
                assert writer.live.window(cid, window, at) == counts[:3], (name, window)

    compare(w)
    again = HistoryWriter(path, Retention())
    again.start()
    try:
        deadline = time.monotonic() + 20
        while not again.ready.is_set():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        compare(again)
    finally:
        again.stop(10)


# -- latency summaries -------------------------------------------------------------------------


def test_latency_percentiles_are_within_the_documented_bound() -> None:
    rng = random.Random(7)
    durations = [rng.lognormvariate(-3, 1.5) for _ in range(20000)] + [0.00005, 3600.0]
    half = len(durations) // 2
    a: dict[int, int] = {}
    b: dict[int, int] = {}
    for i, d in enumerate(durations):
        target = a if i < half else b
        target[latency.bin_of(d)] = target.get(latency.bin_of(d), 0) + 1
    merged = latency.decode(latency.merge(latency.encode(a), latency.encode(b)))
    whole: dict[int, int] = {}
    for d in durations:
        whole[latency.bin_of(d)] = whole.get(latency.bin_of(d), 0) + 1
    assert merged == whole
    ordered = sorted(durations)
    qs = (0.01, 0.5, 0.9, 0.95, 0.99, 0.999)
    for q, got in zip(qs, latency.percentiles(merged, qs), strict=True):
        true = ordered[max(1, math.ceil(q * len(ordered))) - 1]
        assert got is not None and abs(got - true) / true <= 0.045, (q, got, true)
    assert latency.percentiles({}) == [None, None, None]
    # Large counts survive the varint encoding.
    assert latency.decode(latency.encode({3: 2**40, 200: 1})) == {3: 2**40, 200: 1}


# -- retention ---------------------------------------------------------------------------------


def test_prune_keeps_removed_checks_for_their_retention_then_forgets_them(tmp_path: Path) -> None:
    path = tmp_path / schema.FILE_NAME
    # Below the config's minimum for days (30d), so that data inside the live 30d window can
    # be pruned: the in-memory counts must forget what the file no longer holds.
    retention = Retention.model_construct(minute=3600, hour=DAY, day=7 * DAY, incidents=7 * DAY)
    w = HistoryWriter(path, retention)
    w.start()
    now = time.time()
    try:
        feed(
            w,
            result("old", "down", now - 10 * DAY),
            result("old", "up", now - 10 * DAY + 5),
            result("recent", "down", now - 2 * DAY),
            result("kept", "up", now - 10 * DAY),
            result("kept", "up", now - 60),
        )
        assert w.live.window(w.check_ids()["old"], "30d", now) == (1, 0, 1)
        old_id = w.check_ids()["old"]
        w.set_configured(["kept"])  # "old" and "recent" were removed by a reload
        w.set_retention(retention)  # a reload: the prune comes with the next batch
        deadline = time.monotonic() + 20
        while "old" in w.check_ids():
            assert time.monotonic() < deadline, "the removed check was not pruned"
            time.sleep(0.01)
        db = read(w)
        assert set(queries.known_checks(db)) == {"recent", "kept"}
        assert db.execute("SELECT count(*) FROM incidents").fetchone()[0] == 1  # recent's
        assert queries.uptime(db, "kept", "7d", now)["runs"]["up"] == 1
        # The freed id's live counts are gone: a new check given that id starts empty.
        assert w.live.window(old_id, "30d", now) == (0, 0, 0)
    finally:
        w.stop(10)


# -- what a batch can carry ----------------------------------------------------------------------


def test_a_reason_sqlite_cannot_encode_costs_neither_its_run_nor_its_batch(
    writer: HistoryWriter,
) -> None:
    bad = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # a target's undecodable bytes
    feed(
        writer,
        result("s", "up", NOW - 30),
        result("s", "down", NOW - 20, reason=bad),
        result("t", "up", NOW - 10),
    )
    db = read(writer)
    assert queries.uptime(db, "s", "1h", NOW)["runs"]["down"] == 1
    assert queries.uptime(db, "t", "1h", NOW)["runs"]["up"] == 1
    assert _incidents(writer, "s")[0]["first_reason"] == "caf\ufffd \ufffd"
    assert writer.stats.dropped == 0 and writer.stats.ok


def test_a_store_query_does_not_wait_for_a_flush_while_writes_fail(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where data_dir should be")
    store = HistoryStore(blocker, HistoryConfig())
    store.start()

    async def go() -> None:
        store.consume(result("q", "up", time.time()))
        deadline = time.monotonic() + 20
        while not store.writer.failing():
            assert time.monotonic() < deadline, "the writer never reported the fault"
            await asyncio.sleep(0.01)
        started = time.monotonic()
        assert await store.flush(timeout=10) is False
        assert time.monotonic() - started < 5  # answered at once, not after the 10 s wait
        with pytest.raises(Exception, match="not open yet"):
            await store.uptime("q", "24h")
        await store.stop(5)

    asyncio.run(go())
    assert store.writer.stats.errors.get("io", 0) >= 1
    assert store.writer.pending() == 1  # still held, not dropped


def test_a_file_from_a_newer_version_is_kept_aside_not_written_over(tmp_path: Path) -> None:
    path = tmp_path / schema.FILE_NAME
    newer = sqlite3.connect(path)
    newer.execute("CREATE TABLE future (x)")
    newer.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    newer.commit()
    newer.close()
    w = HistoryWriter(path, Retention())
    w.start()
    try:
        feed(w, result("n", "up", NOW - 5))
        assert w.stats.set_aside == 1
        aside = list(tmp_path.glob(f"{schema.FILE_NAME}.corrupt-*"))
        assert len(aside) == 1
        kept = sqlite3.connect(aside[0])
        assert kept.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION + 1
        kept.close()
        assert queries.uptime(read(w), "n", "1h", NOW)["runs"]["up"] == 1
    finally:
        w.stop(10)


def test_live_running_totals_equal_summing_the_slots() -> None:
    """windows() reads running totals; window() sums slots: equal for any history, including
    late and very old results, reads after the newest bucket, and forgotten checks."""
    rnd = random.Random(7)
    for trial in range(300):
        live = LiveWindows()
        t = 1_796_000_000 + rnd.randint(0, 86400 * 3)
        for step in range(rnd.randint(1, 200)):
            cid = rnd.randint(0, 3)
            if rnd.random() < 0.02:
                live.forget(cid)
                continue
            t += rnd.choice([0, 1, 30, 600, 3600, 5000, 86400, 86400 * 3, -3600, -86400 * 2])
            run = t - rnd.choice([0, 0, 0, 3600, 86400 * 8, 86400 * 40])
            counts = (rnd.randint(0, 3), rnd.randint(0, 2), rnd.randint(0, 2))
            live.add_hour(cid, run // 3600 * 3600, *counts)
            live.add_day(cid, run // 86400 * 86400, *counts)
            for q in (t, t + 3600, t + 86400 * 2, t - 3600):
                for k in range(4):
                    summed = tuple(c for w in ("24h", "7d", "30d") for c in live.window(k, w, q))
                    assert live.windows(k, q) == summed, (trial, step, k, q - t)


def test_loading_at_start_equals_adding_run_by_run() -> None:
    """The bulk load at start (rows in any order) gives the same windows and the same running
    totals as adding each bucket as the writer does."""
    rnd = random.Random(11)
    now = 1_796_000_000 + 1234
    rows_h, rows_d = [], []
    added = LiveWindows()
    for cid in range(6):
        for _ in range(rnd.randint(0, 60)):
            t = now - rnd.randint(0, 45 * 86400)
            counts = (rnd.randint(0, 5), rnd.randint(0, 2), rnd.randint(0, 2))
            rows_h.append((cid, t // 3600 * 3600, *counts))
            rows_d.append((cid, t // 86400 * 86400, *counts))
    for row in sorted(rows_h, key=lambda r: r[1]):
        added.add_hour(*row)
    for row in sorted(rows_d, key=lambda r: r[1]):
        added.add_day(*row)
    loaded = LiveWindows()
    rnd.shuffle(rows_h)
    rnd.shuffle(rows_d)
    loaded.load(rows_h, rows_d, now)
    for cid in range(7):
        for q in (now, now + 3600, now + 86400):
            assert loaded.windows(cid, q) == added.windows(cid, q), (cid, q - now)
            for w in ("24h", "7d", "30d"):
                assert loaded.window(cid, w, q) == added.window(cid, w, q)
