"""Scheduler behaviour in process: stable spreading, no overlap, per-type limits, readiness."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import yaml

from alivemcp.checks import build_handle
from alivemcp.config import SchedulerConfig, load_config_text
from alivemcp.metrics import Metrics
from alivemcp.plumbing import Plumbing
from alivemcp.results import CheckResult
from alivemcp.scheduler import Scheduler, stable_offset
from alivemcp.status import StatusStore


def test_offsets_are_stable_and_spread() -> None:
    offsets = [stable_offset(f"check-{i}", 60.0) for i in range(1000)]
    assert offsets == [stable_offset(f"check-{i}", 60.0) for i in range(1000)]
    assert all(0 <= o <= 60 for o in offsets)
    buckets = [0] * 6
    for o in offsets:
        buckets[min(5, int(o // 10))] += 1
    assert min(buckets) > 120  # roughly even: ~167 per 10 s bucket


async def run_scheduler(checks: list[dict], seconds: float, config: SchedulerConfig) -> tuple[
        StatusStore, list[CheckResult]]:
    loaded = load_config_text(yaml.safe_dump({"checks": checks}), env={})
    store = StatusStore()
    metrics = Metrics(store)
    results: list[CheckResult] = []

    def on_result(result: CheckResult) -> None:
        results.append(result)
        store.record(result)

    scheduler = Scheduler(store, metrics, on_result, config)
    plumbing = Plumbing()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    assert not store.ready()
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    scheduler.start()
    await asyncio.sleep(seconds)
    await scheduler.stop(2)
    return store, results


async def test_per_type_limit_serialises_slow_probes(tmp_path: Path) -> None:
    log = tmp_path / "starts.txt"
    checks = [
        {"name": f"slow{i}", "probe": "test_static", "interval": 2, "timeout": 1.5,
         "params": {"delay": 0.4, "record_to": str(log)}}
        for i in range(3)
    ]
    store, results = await run_scheduler(
        checks, 4.5, SchedulerConfig(per_probe_type={"test_static": 1})
    )
    # With one slot, runs never overlap: each starts after the previous finished.
    spans = sorted((r.started_at, r.finished_at) for r in results)
    assert len(spans) >= 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01
    assert store.ready()


async def test_a_check_never_overlaps_itself(tmp_path: Path) -> None:
    checks = [{"name": "long", "probe": "test_static", "interval": 0.5, "timeout": 0.45,
               "params": {"delay": 0.3}}]
    _, results = await run_scheduler(checks, 3, SchedulerConfig())
    spans = sorted((r.started_at, r.finished_at) for r in results)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.01
