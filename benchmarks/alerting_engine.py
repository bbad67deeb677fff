"""Alerting engine benchmark: what a large fleet and a storm cost the alert manager.

Run by hand (not a test):  .venv/bin/python benchmarks/alerting_engine.py [--checks 50000]
  [--storm 10000]

Feeds results straight into a real AlertManager (log receiver, state in a temp data_dir) and
prints: cost of ``observe`` per healthy result (the steady state: every run of every check),
per result during a storm (``--storm`` checks failing twice, so each fires), the once-a-second
tick while they fire, and one state write (snapshot + atomic write + fsync) with the storm's
notifications queued.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from alivemcp.alerting.config import AlertingConfig  # noqa: E402
from alivemcp.alerting.manager import AlertManager  # noqa: E402
from alivemcp.engine.results import CheckInfo, CheckResult  # noqa: E402
from alivemcp.probe import Status  # noqa: E402


async def main(checks: int, storm: int) -> None:
    # The log receiver would print every alert; keep the figures readable.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    infos = [CheckInfo(f"check-{i}", "bench", {"team": f"t{i % 10}"}) for i in range(checks)]
    config = AlertingConfig.model_validate(
        {
            "receivers": [{"name": "log", "type": "log"}],
            "default_receivers": ["log"],
            "routes": [{"matchers": ["team=t1"], "receivers": ["log"]}],
        }
    )
    now = time.time()
    with tempfile.TemporaryDirectory() as data_dir:
        manager = AlertManager(
            config,
            [(i, None) for i in infos],
            Path(data_dir),
            CollectorRegistry(),
            tick_interval=3600,
        )
        await manager.start()
        ups = [CheckResult(i, Status.UP, "ok", 0.01, now, now) for i in infos]
        downs = [
            CheckResult(
                i,
                Status.DOWN,
                "connection refused",
                0.01,
                now,
                now,
                observations={"latency_seconds": 1.5},
            )
            for i in infos[:storm]
        ]
        started = time.perf_counter()
        for result in ups:
            manager.observe(result)
        healthy = (time.perf_counter() - started) / len(ups)
        started = time.perf_counter()
        for result in downs + downs:
            manager.observe(result)
        stormy = (time.perf_counter() - started) / (2 * len(downs))
        started = time.perf_counter()
        manager.tick()
        tick = time.perf_counter() - started
        queued = sum(manager.queue_depths().values())
        started = time.perf_counter()
        await manager.persist()
        write = time.perf_counter() - started
        size = (Path(data_dir) / "alerting-state.json").stat().st_size
        await manager.stop(grace=0.0)
    print(f"checks: {checks}, storm: {storm} firing, {queued} notifications queued")
    print(
        f"observe, healthy result:       {healthy * 1e6:7.1f} us "
        f"({healthy * checks / 60 * 100:.1f}% of a core at a 60 s interval)"
    )
    print(f"observe, storm result:         {stormy * 1e6:7.1f} us")
    print(f"tick with {storm} firing:       {tick * 1e3:7.1f} ms (once a second)")
    print(f"state write (first, all new):  {write * 1e3:7.1f} ms, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=50_000)
    parser.add_argument("--storm", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(main(args.checks, args.storm))
