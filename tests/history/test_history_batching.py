"""The writer's batching never shows in the database: the same runs, written one per batch,
all in one batch or in random slices (a check several times in one batch included), leave the
same bucket counts, latency summaries and incidents, equal to a run-by-run computation."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from alivemcp.history import latency, rollup, schema

T0 = 1_800_000_000.0


def _runs(rng: random.Random, count: int) -> list[rollup.Row]:
    names = [f"check-{i}" for i in range(3)]
    started = T0 - 30  # the first minute, hour and day boundaries fall inside the runs
    runs: list[rollup.Row] = []
    for _ in range(count):
        started += rng.choices([0.0, 0.3, 1.0, 7.0, 59.0, 600.0, 3000.0], [8, 8, 8, 8, 4, 1, 1])[0]
        code = rng.choices([rollup.UP, rollup.DEGRADED, rollup.DOWN, rollup.UNKNOWN], [5, 1, 2, 1])[
            0
        ]
        duration = rng.choices(
            [0.0, 1e-5, 0.02, 0.0211, 0.5, 3.0, rng.lognormvariate(-3, 1)], [1, 1, 8, 1, 1, 1, 1]
        )[0]
        runs.append((rng.choice(names), "http", code, started, duration, f"r{len(runs)}"))
    return runs


def _write(path: Path, runs: list[rollup.Row], cuts: list[int]) -> sqlite3.Connection:
    db = schema.connect(path)
    schema.create(db)
    ids: dict[str, int] = {}
    open_incidents: dict[int, rollup.Incident] = {}
    for start, end in zip([0, *cuts], [*cuts, len(runs)], strict=True):
        batch = rollup.Pending()
        for row in runs[start:end]:
            batch.append(*row)
        written = rollup.write_batch(db, batch, ids, open_incidents)
        ids = {**ids, **written.new_ids}
        for cid, state in written.incidents.items():
            if state is None:
                open_incidents.pop(cid, None)
            else:
                open_incidents[cid] = state
    return db


def _contents(db: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    out: dict[str, list[tuple[object, ...]]] = {}
    for table in schema.RESOLUTIONS:
        out[table] = [
            (name, bucket, up, degraded, down, unknown, blob)
            for name, bucket, up, degraded, down, unknown, blob in db.execute(
                f"SELECT c.name, t.bucket, t.up, t.degraded, t.down, t.unknown, t.latency "
                f"FROM {table} t JOIN checks c ON c.id = t.check_id ORDER BY c.name, t.bucket"
            )
        ]
    out["incidents"] = list(
        db.execute(
            "SELECT c.name, i.started_at, i.ended_at, i.last_at, i.worst, i.first_reason, "
            "i.last_reason FROM incidents i JOIN checks c ON c.id = i.check_id "
            "ORDER BY c.name, i.started_at"
        )
    )
    return out


def _expected(runs: list[rollup.Row]) -> dict[str, list[tuple[object, ...]]]:
    """Run by run, the plain way: what the database must hold."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for table, width in schema.RESOLUTIONS.items():
        counts: dict[tuple[str, int], list[int]] = {}
        bins: dict[tuple[str, int], dict[int, int]] = {}
        for name, _, code, started, duration, _ in runs:
            key = (name, int(started) // width * width)
            counts.setdefault(key, [0, 0, 0, 0])[code] += 1
            if code != rollup.UNKNOWN:
                one = bins.setdefault(key, {})
                one[latency.bin_of(duration)] = one.get(latency.bin_of(duration), 0) + 1
        out[table] = [
            (*key, *counts[key], latency.encode(bins[key]) if key in bins else None)
            for key in sorted(counts)
        ]
    incidents: list[tuple[object, ...]] = []
    current: dict[str, dict[str, object]] = {}
    for name, _, code, started, _, reason in runs:
        if code == rollup.UNKNOWN:
            continue  # neither opens nor closes
        if code == rollup.UP:
            if name in current:
                incident = current.pop(name)
                incident["ended"] = started
                incidents.append(tuple(incident.values()))
            continue
        if name not in current:
            current[name] = {
                "name": name,
                "started": started,
                "ended": None,
                "last": started,
                "worst": "degraded",
                "first": reason,
                "last_reason": reason,
            }
        incident = current[name]
        incident["last"] = started
        incident["last_reason"] = reason
        if code == rollup.DOWN:
            incident["worst"] = "down"
    incidents.extend(tuple(incident.values()) for incident in current.values())
    out["incidents"] = sorted(incidents)  # type: ignore[type-var]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_batching_changes_nothing_that_is_stored(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    runs = _runs(rng, 1500)
    expected = _expected(runs)
    one_each = _contents(_write(tmp_path / "one.sqlite", runs, list(range(1, len(runs)))))
    all_in_one = _contents(_write(tmp_path / "all.sqlite", runs, []))
    slices = _contents(
        _write(tmp_path / "slices.sqlite", runs, sorted(rng.sample(range(1, len(runs)), 100)))
    )
    for table in expected:
        assert one_each[table] == expected[table], table
        assert all_in_one[table] == expected[table], table
        assert slices[table] == expected[table], table
    # The cases that matter did occur: a check several times in one bucket of one batch, and
    # a bin count past 127 (a varint of two bytes).
    assert any(row[2] > 1 for row in expected["minute"])
    assert any(count > 127 for row in expected["day"] for count in latency.decode(row[-1]).values())  # type: ignore[arg-type]


def test_merging_a_run_into_any_summary_equals_adding_counts() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        counts = {
            rng.randrange(256): rng.choice([1, 2, 126, 127, 128, 300, 16384, 10**7])
            for _ in range(rng.randrange(0, 6))
        }
        index, add = rng.randrange(256), rng.randrange(1, 128)
        merged = latency.merge(latency.encode(counts) or None, bytes((index, add)))
        counts[index] = counts.get(index, 0) + add
        assert merged == latency.encode(counts)
    assert latency.merge(None, None) is None
