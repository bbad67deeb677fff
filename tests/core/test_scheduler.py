"""Scheduler behaviour in process: stable spreading, first runs, no overlap, per-type limits,
readiness."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from alivemcp.config import SchedulerConfig, load_config_text
from alivemcp.engine import scheduler as scheduler_module
from alivemcp.engine.checks import build_handle
from alivemcp.engine.grid import (
    FIRST_RUNS_PER_SECOND,
    MIN_START_WINDOW,
    ScheduledCheck,
    plan_first_runs,
    stable_offset,
    start_window,
)
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckResult
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.hygiene import collector as collector_module
from alivemcp.plumbing import Plumbing
from alivemcp.web.metrics import Metrics


def test_offsets_are_stable_and_spread() -> None:
    offsets = [stable_offset(f"check-{i}", 60.0) for i in range(1000)]
    assert offsets == [stable_offset(f"check-{i}", 60.0) for i in range(1000)]
    assert all(0 <= o <= 60 for o in offsets)
    buckets = [0] * 6
    for o in offsets:
        buckets[min(5, int(o // 10))] += 1
    assert min(buckets) > 120  # roughly even: ~167 per 10 s bucket


def entries(count: int, interval: float) -> list[ScheduledCheck]:
    """Scheduled checks as the scheduler plans them (planning reads names and intervals only,
    so they share one real handle)."""
    doc = {"checks": [{"name": "shared", "probe": "test_static", "interval": interval}]}
    handle = build_handle(load_config_text(yaml.safe_dump(doc), env={}).checks[0], Plumbing())
    names = [f"check-{i}" for i in range(count)]
    return [
        ScheduledCheck(name, handle, interval, stable_offset(name, interval), None)
        for name in names
    ]


def most_in_any_tenth_of_a_second(moments: list[float]) -> int:
    return max(Counter(int(m * 10) for m in moments).values())


def test_start_window_grows_with_the_number_of_checks() -> None:
    assert start_window(1) == start_window(2000) == MIN_START_WINDOW == 2.0
    assert start_window(10_000) == 10.0
    assert start_window(50_000) == 50_000 / FIRST_RUNS_PER_SECOND == 50.0


def test_first_runs_are_spread_over_the_start_window() -> None:
    for count, interval in ((20, 60.0), (2000, 60.0), (50_000, 60.0), (50_000, 30.0)):
        now = time.time()
        window = min(start_window(count), interval)
        plan = plan_first_runs(entries(count, interval), now)
        firsts = [first for first, _ in plan]
        assert firsts == sorted(firsts)
        assert now <= firsts[0] and firsts[-1] <= now + window, (count, interval)
        # ~FIRST_RUNS_PER_SECOND (or the steady rate where the window is the whole interval):
        # a tenth of a second holds about a hundred, never a herd.
        expected = max(FIRST_RUNS_PER_SECOND, count / interval) / 10
        assert most_in_any_tenth_of_a_second(firsts) <= max(10, 1.5 * expected), (count, interval)
        for first, entry in plan:
            if entry.first_run is None:  # its grid point falls inside the window: no extra run
                assert (
                    abs((first - entry.offset) % interval) < 1e-6
                    or abs((first - entry.offset) % interval - interval) < 1e-6
                )
            else:
                assert entry.first_run == first


def test_first_run_positions_are_stable() -> None:
    now = time.time()
    one = [
        (round(first - now, 6), entry.name)
        for first, entry in plan_first_runs(entries(200, 60.0), now)
    ]
    two = [
        (round(first - now, 6), entry.name)
        for first, entry in plan_first_runs(entries(200, 60.0), now)
    ]
    assert one == two


def test_after_an_extra_first_run_a_check_rejoins_its_grid_no_sooner_than_half_an_interval() -> (
    None
):
    for entry in entries(500, 10.0):
        now = 1_700_000_000.0 + entry.offset / 3
        first = entry.plan_first_run(now, 2.0)
        second = entry.next_after(first)
        third = entry.next_after(second)
        assert ((second - entry.offset) / 10.0) % 1 == pytest.approx(0, abs=1e-6) or (
            (second - entry.offset) / 10.0
        ) % 1 == pytest.approx(1, abs=1e-6)
        assert third - second == pytest.approx(10.0, abs=1e-6)
        if entry.first_run is None:  # it started on its grid
            assert second - first == pytest.approx(10.0, abs=1e-6)
        else:
            assert 5.0 <= second - first < 15.0
            # The planned time of each run (lateness is measured against it).
            assert entry.planned_before(first + 0.2) == first
            assert entry.planned_before(second + 0.2) == pytest.approx(second)


def test_a_check_scheduled_again_resumes_its_grid_and_runs_a_point_just_missed() -> None:
    for entry in entries(200, 10.0):
        point = entry.grid_at_or_after(1_700_000_000.0)
        # Handed straight back (its next planned run kept): before that point, that point;
        # just after it (the rebalance spanned it), that point, in the past, so it runs at once
        # and its lateness counts from the point; later than any run may be late (half an
        # interval), the next point.
        assert entry.resumed_at(point - 0.3, next_run=point) == point
        assert entry.resumed_at(point + 0.4, next_run=point) == point
        assert entry.resumed_at(point + 5.1, next_run=point) == point + 10.0
        # Its last run elsewhere, on its grid: the next point, while still to come; once
        # passed, planned as a new check (the run there may have been started and cancelled).
        assert entry.resumed_at(point - 0.3, last_run=point - 10.0) == point
        assert entry.resumed_at(point + 0.4, last_run=point - 10.0) is None
        # Its last run an off-grid first run: the point at least half an interval after it.
        assert entry.resumed_at(point - 3.9, last_run=point - 4.0) == point + 10.0
        # A last run from a clock ahead of this one's: as if it ran now.
        assert entry.resumed_at(point - 0.5, last_run=point + 30.0) == entry.next_after(point - 0.5)
        assert entry.resumed_at(point) is None


async def test_a_check_handed_back_whose_point_passed_while_unscheduled_runs_at_once() -> None:
    interval = 30.0
    now = time.time()

    def latest_point(name: str) -> float:
        offset = stable_offset(name, interval)
        return now - ((now - offset) % interval)

    # A check whose grid point passed 0.2 to 5 s ago (as if during a rebalance).
    name = next(f"kept-{i}" for i in range(1000) if 0.2 < now - latest_point(f"kept-{i}") < 5)
    passed = latest_point(name)
    doc = {"checks": [{"name": name, "probe": "test_static", "interval": interval}]}
    check = load_config_text(yaml.safe_dump(doc), env={}).checks[0]
    scheduler, metrics, results, plumbing = started_scheduler([])
    try:
        # Its next planned run, when it was unscheduled, was that point: it runs now (late),
        # not at the next one, 25-30 s on.
        scheduler.add(build_handle(check, plumbing), check.fingerprint(), next_run=passed)
        await until(lambda: results, 5, "the missed point's run")
        result = results[0]
        assert result.started_at - result.lateness_seconds == pytest.approx(passed, abs=1e-6)
        assert result.lateness_seconds >= now - passed
        assert skipped(metrics, "missed") == 0
    finally:
        await scheduler.stop(1)
        await plumbing.aclose()


async def run_scheduler(
    checks: list[dict],
    enough: Callable[[list[CheckResult]], bool],
    within: float,
    config: SchedulerConfig,
) -> tuple[StatusStore, list[CheckResult], tuple[float, float]]:
    """Run the checks until the results are ``enough`` (at most ``within`` seconds); returns
    the store, the results, and the wall times just before and after the scheduler planned
    its first runs (the start window opened in between)."""
    loaded = load_config_text(yaml.safe_dump({"checks": checks}), env={})
    store = StatusStore()
    metrics = Metrics(store)
    results: list[CheckResult] = []

    def on_result(result: CheckResult) -> None:
        results.append(result)
        store.record(result)

    scheduler = Scheduler(
        store.mark_in_flight, SchedulerMetrics(metrics.registry), on_result, config
    )
    plumbing = Plumbing()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    assert not store.ready()
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    before = time.time()
    scheduler.start()
    opened = (before, time.time())
    try:
        await until(lambda: enough(results), within, "enough results", lambda: len(results))
    finally:
        await scheduler.stop(2)
    return store, results, opened


async def test_per_type_limit_serialises_slow_probes(tmp_path: Path) -> None:
    log = tmp_path / "starts.txt"
    checks = [
        {
            "name": f"slow{i}",
            "probe": "test_static",
            "interval": 2,
            "timeout": 1.5,
            "params": {"delay": 0.4, "record_to": str(log)},
        }
        for i in range(3)
    ]
    # Two rounds of the three (interval 2 s): every check has run after another one.
    store, results, _ = await run_scheduler(
        checks,
        lambda results: len(results) >= 6,
        MIN_START_WINDOW + 10 * 2,
        SchedulerConfig(per_probe_type={"test_static": 1}),
    )
    # With one slot, runs never overlap: each starts after the previous finished. (0.01 s:
    # finished_at is the start's wall time plus a monotonic duration, not a wall time read.)
    spans = sorted((r.started_at, r.finished_at) for r in results)
    assert len(spans) >= 6
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01
    assert store.ready()


async def test_a_check_never_overlaps_itself(tmp_path: Path) -> None:
    checks = [
        {
            "name": "long",
            "probe": "test_static",
            "interval": 0.5,
            "timeout": 0.45,
            "params": {"delay": 0.3},
        }
    ]
    _, results, _ = await run_scheduler(
        checks, lambda results: len(results) >= 5, MIN_START_WINDOW + 20 * 0.5, SchedulerConfig()
    )
    spans = sorted((r.started_at, r.finished_at) for r in results)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01


async def test_every_check_has_a_first_result_within_the_start_window(tmp_path: Path) -> None:
    checks = [{"name": f"c{i}", "probe": "test_static", "interval": 60} for i in range(20)]
    store, results, (before, after) = await run_scheduler(
        checks, lambda results: len(results) >= 20, 10 * MIN_START_WINDOW, SchedulerConfig()
    )
    assert sorted(r.check.name for r in results) == sorted(f"c{i}" for i in range(20))
    assert store.ready()
    # Each run was planned inside the start window opened at start (when it actually ran
    # depends on the machine's load; its lateness says by how much). Lateness is measured
    # against that planned first run, not the grid point before it (up to 60 s earlier).
    planned = [r.started_at - r.lateness_seconds for r in results]
    assert min(planned) >= before - 1e-6 and max(planned) <= after + MIN_START_WINDOW + 1e-6


async def until(
    condition: Callable[[], bool],
    timeout: float,
    what: str = "the condition",
    seen: Callable[[], object] = lambda: "-",
) -> None:
    """Poll ``condition`` (the scheduler's own state: no I/O) until it holds; at the deadline
    fail saying what was waited for and ``seen()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s: {what}; {seen()}"
        await asyncio.sleep(0.01)


def skipped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "alivemcp_scheduler_skipped_runs_total", {"reason": reason}
    )
    assert value is not None
    return value


def started_scheduler(
    checks: list[dict], config: SchedulerConfig | None = None
) -> tuple[Scheduler, Metrics, list[CheckResult], Plumbing]:
    """The checks scheduled and the scheduler started; results collected in the list."""
    loaded = load_config_text(yaml.safe_dump({"checks": checks}), env={})
    store = StatusStore()
    metrics = Metrics(store)
    results: list[CheckResult] = []
    scheduler = Scheduler(
        store.mark_in_flight,
        SchedulerMetrics(metrics.registry),
        results.append,
        config or SchedulerConfig(),
    )
    plumbing = Plumbing()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    scheduler.start()
    return scheduler, metrics, results, plumbing


async def test_runs_the_loop_was_too_late_for_are_counted_missed_not_run_late(
    tmp_path: Path,
) -> None:
    interval = 4.0  # a run may start up to half an interval (2 s) late
    scheduler, metrics, results, plumbing = started_scheduler(
        [{"name": "tick", "probe": "test_static", "interval": interval, "timeout": 1}]
    )
    await until(lambda: len(results) == 1, MIN_START_WINDOW + 5)
    due = scheduler.checks["tick"].due
    # The loop held up until 2.5 s past the next planned run (and before the one after): that
    # run is more than the grace late when the loop gets to it: counted, not run.
    time.sleep(max(0.0, due + 2.5 - time.time()))  # noqa: ASYNC251 - the stall is the point
    # The loop gets to the run's timer now: counted missed, not run.
    await until(lambda: skipped(metrics, "missed") >= 1, 5, "the missed run counted")
    assert skipped(metrics, "missed") == 1
    assert len(results) == 1
    # Back on its grid at the next point.
    await until(lambda: len(results) == 2, interval + 5, "the next run", lambda: results)
    await scheduler.stop(1)
    await plumbing.aclose()
    # Planned at that next grid point (however late a loaded machine started it), not the
    # missed run started late.
    assert results[1].started_at - results[1].lateness_seconds == pytest.approx(
        due + interval, abs=1e-6
    )


async def test_a_run_still_waiting_for_its_slot_is_counted_as_an_overlap(tmp_path: Path) -> None:
    # One slot for two checks that each hold it for most of their interval: each in turn finds
    # its previous run still queued behind the other one's.
    checks = [
        {
            "name": f"slow{i}",
            "probe": "test_static",
            "interval": 0.5,
            "timeout": 0.45,
            "params": {"delay": 0.4},
        }
        for i in range(2)
    ]
    scheduler, metrics, results, plumbing = started_scheduler(
        checks, SchedulerConfig(per_probe_type={"test_static": 1})
    )
    await until(
        lambda: skipped(metrics, "overlap") >= 1 and len(results) >= 4,
        MIN_START_WINDOW + 20 * 0.5,
        "an overlap counted, and runs of both checks",
        lambda: (skipped(metrics, "overlap"), len(results)),
    )
    await scheduler.stop(1)
    await plumbing.aclose()
    assert skipped(metrics, "overlap") >= 1
    for name in ("slow0", "slow1"):
        spans = sorted((r.started_at, r.finished_at) for r in results if r.check.name == name)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 0.01
    # One slot: no two runs of any check were ever probing at once.
    spans = sorted((r.started_at, r.finished_at) for r in results)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01


async def test_cancel_runs_stops_the_named_runs_and_drops_their_results(tmp_path: Path) -> None:
    checks = [
        {
            "name": name,
            "probe": "test_sleepy",
            "interval": 60,
            "timeout": 30,
            "params": {"seconds": 20, "markers": str(tmp_path / name)},
        }
        for name in ("revoked", "kept")
    ]
    scheduler, metrics, results, plumbing = started_scheduler(checks)
    deadline = time.monotonic() + MIN_START_WINDOW + 5
    while metrics.registry.get_sample_value("alivemcp_scheduler_runs_in_flight") != 2:
        assert time.monotonic() < deadline, "both runs never started"
        await asyncio.sleep(0.02)
    scheduler.remove("revoked")
    assert await scheduler.cancel_runs({"revoked"}, timeout=5) == 1
    assert (tmp_path / "revoked" / "cancelled").exists()
    assert not (tmp_path / "kept" / "cancelled").exists()
    assert metrics.registry.get_sample_value("alivemcp_scheduler_runs_in_flight") == 1
    await scheduler.stop(0.1)
    await plumbing.aclose()
    assert [r.check.name for r in results] == []  # kept was cut at the grace, revoked dropped


async def test_full_collections_come_from_the_scheduler_timer_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collections: list[int] = []

    def noted(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            collections.append(info["generation"])

    monkeypatch.setattr(collector_module, "FULL_COLLECTION_SECONDS", 0.2)
    before = gc.get_threshold()
    gc.callbacks.append(noted)
    try:
        first, _, _, _ = started_scheduler(
            [{"name": "a", "probe": "test_static", "interval": 60, "timeout": 1}]
        )
        second, _, _, _ = started_scheduler(
            [{"name": "b", "probe": "test_static", "interval": 60, "timeout": 1}]
        )
        young, middle, old = gc.get_threshold()
        assert (young, middle) == before[:2] and old > 10**9  # no full collection by itself
        await until(lambda: len(collections) >= 2, 5)  # but the timer's, again and again
        await first.stop(1)
        assert gc.get_threshold()[2] > 10**9  # the other scheduler still runs
        await second.stop(1)
        assert gc.get_threshold() == before
        collections.clear()
        # why: an absence (the timers went with the schedulers): over two and a half of the
        # timer's periods (FULL_COLLECTION_SECONDS, patched above) none comes.
        await asyncio.sleep(2.5 * collector_module.FULL_COLLECTION_SECONDS)
        assert not collections  # the timers went with the schedulers
    finally:
        gc.callbacks.remove(noted)
        gc.set_threshold(*before)


def young(obj: object) -> bool:
    return any(o is obj for gen in (0, 1) for o in gc.get_objects(gen))


def replaced_one_for_one(old: list[list[int]]) -> list[list[int]]:
    """New tracked objects, each made as an old one is freed: CPython's own rule, which counts
    allocations less deallocations, sees nothing to collect (as with results replacing the
    last ones, or a scrape's new exposition entries replacing its kept ones)."""
    new: list[list[int]] = []
    while old:
        new.append([])
        old.pop()
    return new


async def test_young_objects_are_collected_on_a_timer_when_frees_hide_their_allocations() -> None:
    assert collector_module.CollectorPolicy._users == 0
    # CPython's own rule counts allocations less deallocations of every thread: another
    # test's thread still allocating would start collections of its own and move the objects
    # on. With its threshold out of reach only an explicit collection moves them.
    saved = gc.get_threshold()
    gc.set_threshold(1 << 30, saved[1], saved[2])
    try:
        old = [[] for _ in range(20_000)]
        gc.collect()  # the old objects in the old generation, the young ones empty
        without = replaced_one_for_one(old)
        # What is under test is an absence: over ten of the scheduler's young-collection
        # periods, without a scheduler, nothing collects them.
        await asyncio.sleep(10 * collector_module.YOUNG_COLLECTION_SECONDS)
        assert young(without[-1])
        scheduler, _, _, plumbing = started_scheduler(
            [{"name": "a", "probe": "test_static", "interval": 60, "timeout": 1}]
        )
        try:
            old = [[] for _ in range(20_000)]
            gc.collect()
            made = replaced_one_for_one(old)
            assert young(made[-1])
            await until(lambda: not young(made[-1]), 2)  # the scheduler's young collections
        finally:
            await scheduler.stop(1)
            await plumbing.aclose()
    finally:
        gc.set_threshold(*saved)


def assert_in_one_window(
    firsts: list[float], ended: float, planned_by: float, window: float
) -> None:
    """Every first run (sorted) falls in the one start window opened when the batch ended:
    its planning ran after ``ended`` was read and before ``planned_by`` was (however long a
    loaded machine made that turn of the loop). A slice planned in a window of its own would
    be a whole window late."""
    assert firsts[0] >= ended and firsts[-1] <= planned_by + window, (ended, planned_by, firsts)


async def test_checks_added_in_one_batch_across_loop_turns_share_one_start_window() -> None:
    scheduler, _, _, plumbing = started_scheduler(
        [{"name": "old", "probe": "test_noop", "interval": 60}]
    )
    checks = load_config_text(
        yaml.safe_dump(
            {
                "checks": [
                    {"name": f"c{i}", "probe": "test_noop", "interval": 60} for i in range(3000)
                ]
            }
        ),
        env={},
    ).checks
    with scheduler.batch():
        for start in range(0, 3000, 1000):
            for check in checks[start : start + 1000]:
                scheduler.add(build_handle(check, plumbing), check.fingerprint())
            # why: not a wait for an event: time passes between the slices (each would open a
            # window of its own, this much later, if it were planned alone).
            await asyncio.sleep(0.3)
            # Nothing of the batch is planned while it is open (a slice planned alone would
            # get a start window of its own: 1,000 first runs in 2 s instead of 3,000 in 3 s).
            assert all(scheduler.checks[c.name].due == 0 for c in checks[: start + 1000])
    ended = time.time()
    await asyncio.sleep(0)  # the batch's planning, called soon when it closed
    planned_by = time.time()
    firsts = sorted(scheduler.checks[c.name].due for c in checks)
    window = start_window(3000)
    assert_in_one_window(firsts, ended, planned_by, window)
    # Spread over the whole window, not bunched at its start: each third holds about a third.
    thirds = [
        sum(1 for t in firsts if ended + k * window / 3 <= t < ended + (k + 1) * window / 3)
        for k in range(3)
    ]
    assert min(thirds) > 700, thirds
    await scheduler.stop(1)
    await plumbing.aclose()


async def test_a_large_batch_is_planned_over_several_loop_turns_in_one_start_window() -> None:
    # Planning 100,000 first runs in one callback held the loop for a quarter of a second:
    # the scheduler plans PLAN_SLICE a turn. The slices share the batch's one start window,
    # and a check removed between two slices is not planned (no run of a removed check).
    scheduler, _, _, plumbing = started_scheduler(
        [{"name": "old", "probe": "test_noop", "interval": 600}]
    )
    count = 2 * scheduler_module.PLAN_SLICE + 100
    checks = load_config_text(
        yaml.safe_dump(
            {
                "checks": [
                    {"name": f"c{i}", "probe": "test_noop", "interval": 600} for i in range(count)
                ]
            }
        ),
        env={},
    ).checks
    with scheduler.batch():
        for check in checks:
            scheduler.add(build_handle(check, plumbing), check.fingerprint())
    ended = time.time()
    await asyncio.sleep(0)  # the batch's planning (its first slice), called soon when it closed
    planned_by = time.time()
    planned = [c.name for c in checks if scheduler.checks[c.name].due > 0]
    assert len(planned) == scheduler_module.PLAN_SLICE  # the first slice only, so far
    gone = checks[-1].name
    removed = scheduler.remove(gone)
    for _ in range(3):
        await asyncio.sleep(0)
    assert removed is not None and removed.due == -1.0 and gone not in scheduler.checks
    window = start_window(count)

    # Each check's first run: a check whose first run came within these few turns (a loaded
    # machine makes them long) has run, and its next is on the grid half an interval on; an
    # off-grid first run is kept on the entry, an on-grid one is an interval before the next.
    def first_run(entry: ScheduledCheck) -> float:
        if entry.first_run is not None:
            return entry.first_run
        return entry.due if entry.due < ended + 300 else entry.due - entry.interval

    firsts = sorted(first_run(scheduler.checks[c.name]) for c in checks[:-1])
    assert_in_one_window(firsts, ended, planned_by, window)
    # The last slice's checks are spread over the whole window too, not a window of their own.
    last = sorted(scheduler.checks[c.name].due for c in checks[-101:-1])
    assert last[-1] - last[0] > window / 2
    await scheduler.stop(1)
    await plumbing.aclose()
