"""ProbingListener on the real scheduler: a revoked shard's checks are off the scheduler and
none of their runs is still going when ``on_revoked`` returns; a shard that comes back gets
its probe instances back; instances of shards gone elsewhere are retired."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from alivemcp.cluster.probing import ProbingListener
from alivemcp.cluster.shards import ShardMap
from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckResult
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.plumbing import Plumbing
from tests.support.cluster import first_runs_planned

SHARDS = 4


def _started_within(runs: Path, names: set[str], seconds: float) -> set[str]:
    """Checks whose last run started less than ``seconds`` ago (each run takes 0.4 s)."""
    now = time.time()
    return {
        n
        for n in names
        if (runs / n).exists() and now - float((runs / n).read_text().split()[-1]) < seconds
    }


async def test_a_revoked_shard_is_not_probed_once_on_revoked_returns(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    checks = [
        {
            "name": f"c{i:02d}",
            "probe": "test_static",
            "interval": 0.5,
            "params": {"delay": 0.4, "record_to": str(runs / f"c{i:02d}")},
        }
        for i in range(40)
    ]
    loaded = load_config_text(yaml.safe_dump({"checks": checks}))
    store = StatusStore()
    store.set_checks([])
    results: list[CheckResult] = []
    scheduler = Scheduler(
        store.mark_in_flight,
        SchedulerMetrics(CollectorRegistry()),
        results.append,
        loaded.config.scheduler,
    )
    shard_of = ShardMap(SHARDS)
    plumbing = Plumbing()
    retired: list[ProbeHandle] = []
    probing = ProbingListener(
        scheduler,
        shard_of,
        lambda: loaded.checks,
        lambda c: build_handle(c, plumbing),
        retired.extend,
    )
    names = {c.name for c in loaded.checks}
    lost = {n for n in names if shard_of(n) == 0}
    assert 3 <= len(lost) < len(names)
    scheduler.start()
    try:
        await probing.on_assigned(frozenset(range(SHARDS)))
        assert set(scheduler.checks) == names
        for _ in range(500):  # within 10 s
            if _started_within(runs, lost, 0.15):
                break
            await asyncio.sleep(0.01)
        assert _started_within(runs, lost, 0.15), "no run of shard 0 in flight to cancel"
        handles = {n: scheduler.checks[n].handle for n in lost}

        await probing.on_revoked(frozenset({0}))
        returned_at = time.time()
        # Off the scheduler, and nothing of shard 0 is running any more (nothing to cancel).
        assert not lost & set(scheduler.checks)
        assert await scheduler.cancel_runs(lost, 0) == 0
        assert not probing.owns(next(iter(lost)))
        # Every other check has since run a whole run (same interval, 0.5 s): a check of
        # shard 0 still scheduled would have started one meanwhile too.
        others = names - lost
        deadline = time.monotonic() + 20 * 0.5
        while not others <= {r.check.name for r in results if r.started_at >= returned_at}:
            assert time.monotonic() < deadline, "the other shards' checks did not run again"
            await asyncio.sleep(0.01)
        started_later = [
            n
            for n in lost
            if (runs / n).exists()
            and any(float(t) >= returned_at for t in (runs / n).read_text().split())
        ]
        assert not started_later
        assert not [r for r in results if r.check.name in lost and r.finished_at >= returned_at]
        # The other shards go on.
        assert any(r.check.name not in lost and r.finished_at >= returned_at for r in results)

        # Shard 0 back (an eager rebalance gives most shards straight back): same instances.
        await probing.on_assigned(frozenset({0}))
        assert all(scheduler.checks[n].handle is handles[n] for n in lost)
        assert not retired
        # Revoked again and not given back: its instances are retired at the next assignment.
        await probing.on_revoked(frozenset(range(SHARDS)))
        assert not scheduler.checks
        await probing.on_assigned(frozenset({1, 2, 3}))
        assert set(retired) == set(handles.values())
        assert set(scheduler.checks) == names - lost
    finally:
        await scheduler.stop(1)
        await plumbing.aclose()


@contextlib.asynccontextmanager
async def listener_of(
    prefix: str, **options: Any
) -> AsyncIterator[tuple[ProbingListener, Scheduler]]:
    """A started scheduler with 20 checks every 60 s, and the probing listener over it
    (``options``: the listener's keyword arguments)."""
    checks = [
        {"name": f"{prefix}{i:02d}", "probe": "test_static", "interval": 60} for i in range(20)
    ]
    loaded = load_config_text(yaml.safe_dump({"checks": checks}))
    store = StatusStore()
    store.set_checks([])
    scheduler = Scheduler(
        store.mark_in_flight,
        SchedulerMetrics(CollectorRegistry()),
        lambda result: None,
        loaded.config.scheduler,
    )
    plumbing = Plumbing()
    probing = ProbingListener(
        scheduler,
        ShardMap(SHARDS),
        lambda: loaded.checks,
        lambda c: build_handle(c, plumbing),
        lambda handles: None,
        **options,
    )
    scheduler.start()
    try:
        yield probing, scheduler
    finally:
        await scheduler.stop(1)
        await plumbing.aclose()


async def test_a_check_that_ran_within_its_interval_gets_no_early_run_on_assignment() -> None:
    now = time.time()
    # Half the checks ran 5 s ago (their last owner ran them), the rest long ago or never.
    names = [f"r{i:02d}" for i in range(20)]
    recent = set(names[::2])
    last_runs = {name: now - 5 for name in recent} | {names[1]: now - 600}
    async with listener_of("r", last_run=last_runs.get) as (probing, scheduler):
        await probing.on_assigned(frozenset(range(SHARDS)))
        await first_runs_planned(scheduler)
        entries = scheduler.checks
        # The recent ones wait for their grid point (no extra run; at least half an interval
        # after the last run, as after any off-grid run), the others run soon.
        for name in recent:
            entry = entries[name]
            assert entry.first_run is None
            assert entry.due == entry.next_after(now - 5), name
        assert any(entries[name].due > now + 10 for name in recent)
        for name in set(entries) - recent:
            assert entries[name].due <= now + 3, name


async def test_a_shard_handed_straight_back_resumes_where_it_left_off() -> None:
    """Its checks keep their next planned runs (a point passed during the rebalance runs at
    once); handed back after a fence (others may have had it), they go by the last runs known."""
    returning: frozenset[int] = frozenset()
    every = frozenset(range(SHARDS))
    handed_back = listener_of("k", last_run=lambda name: None, returning=lambda: returning)
    async with handed_back as (probing, scheduler):
        await probing.on_assigned(every)
        await first_runs_planned(scheduler)
        planned = {name: entry.due for name, entry in scheduler.checks.items()}
        assert len(planned) == 20
        await probing.on_revoked(every)
        assert not scheduler.checks
        returning = every
        await probing.on_assigned(every)
        await first_runs_planned(scheduler)
        assert {name: entry.due for name, entry in scheduler.checks.items()} == planned
        # After a fence nothing is returning: no run known (last_run None), planned as new.
        await probing.on_revoked(every)
        returning = frozenset()
        await probing.on_assigned(every)
        await first_runs_planned(scheduler)
        assert all(
            entry.first_run is not None or entry.due <= time.time() + 3
            for entry in scheduler.checks.values()
        )
