"""Scheduler benchmark: N no-op checks through the real scheduler, status store and metrics.

Run by hand (not a test):  .venv/bin/python benchmarks/scheduler.py --checks 50000
Prints scheduling lateness p50/p99/max (against each run's planned start, first runs included),
how soon every check had a first result, the busiest 100 ms of run starts, the longest event
loop stall, RSS, and /metrics render time. Pinned to one core.
Goal: 50,000 checks at a 60 s interval with p99 lateness under 50 ms and RSS under 512 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "plugins"))  # the test plugin's no-op probe type

from prometheus_client import CollectorRegistry  # noqa: E402

from alivemcp.app.daemon import settle_heap  # noqa: E402
from alivemcp.config import SchedulerConfig, load_config_text  # noqa: E402
from alivemcp.engine.checks import build_handle  # noqa: E402
from alivemcp.engine.instruments import SchedulerMetrics  # noqa: E402
from alivemcp.engine.results import CheckResult  # noqa: E402
from alivemcp.engine.scheduler import Scheduler  # noqa: E402
from alivemcp.engine.status import StatusStore  # noqa: E402
from alivemcp.plumbing import Plumbing  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class RecordingHistogram:
    """Stands in for the lateness histogram to keep every raw value for percentiles."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.values: list[float] = []
        self.times: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)
        self.times.append(time.monotonic())
        self.real.observe(value)  # type: ignore[attr-defined]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace) -> None:
    rss_start = rss_mb()
    text = "checks:\n" + "".join(
        f"  - {{name: c{i}, probe: test_noop, interval: {args.interval}}}\n"
        for i in range(args.checks)
    )
    t0 = time.perf_counter()
    loaded = load_config_text(text, env={})
    t_config = time.perf_counter() - t0
    store = StatusStore()
    metrics = SchedulerMetrics(CollectorRegistry())
    recorder = RecordingHistogram(metrics.lateness)
    metrics.lateness = recorder  # type: ignore[assignment]
    results = 0

    def on_result(result: CheckResult) -> None:
        nonlocal results
        results += 1
        store.record(result)

    scheduler = Scheduler(
        store.mark_in_flight, metrics, on_result, SchedulerConfig(max_concurrency=10_000)
    )
    plumbing = Plumbing()
    t0 = time.perf_counter()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    t_add = time.perf_counter() - t0
    del loaded, text
    if not args.no_freeze:
        settle_heap()
    t0 = time.perf_counter()
    scheduler.start()
    t_start = time.perf_counter() - t0
    started = time.monotonic()
    first_results_after: float | None = None
    longest_stall = 0.0

    async def watch() -> None:
        """Notes when every check has a result and how long the loop ever stalled."""
        nonlocal first_results_after, longest_stall
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            longest_stall = max(longest_stall, time.monotonic() - before - 0.01)
            if first_results_after is None and store.ready():
                first_results_after = time.monotonic() - started

    watcher = asyncio.create_task(watch())
    renders: list[float] = []
    sizes: list[int] = []
    cpu0 = time.process_time()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        await asyncio.sleep(min(args.scrape_every, max(0.0, end - time.monotonic())))
        if time.monotonic() >= end:
            break
        t = time.perf_counter()
        body, _ = await metrics.render(None)
        renders.append(time.perf_counter() - t)
        sizes.append(len(body))
    cpu = time.process_time() - cpu0
    watcher.cancel()
    await scheduler.stop(1)
    lat = recorder.values
    print(
        f"checks: {args.checks}  interval: {args.interval}s  ran for: {args.seconds}s  "
        f"(loop: {type(asyncio.get_running_loop()).__module__})"
    )
    print(
        f"config load: {t_config:.2f}s  adding {args.checks} checks: {t_add:.2f}s  "
        f"start(): {t_start:.2f}s"
    )
    ready = (
        "not within the run"
        if first_results_after is None
        else f"{first_results_after:.1f}s after start"
    )
    busiest = max(Counter(int((t - started) * 10) for t in recorder.times).values(), default=0)
    print(
        f"every check had a result: {ready}  busiest 100 ms: {busiest} run starts  "
        f"longest loop stall: {1000 * longest_stall:.0f} ms"
    )
    print(
        f"runs: {results}  ({results / args.seconds:.0f}/s)  "
        f"CPU: {cpu:.1f}s = {100 * cpu / args.seconds:.0f}% of one core"
    )
    if lat:
        print(
            f"lateness: p50 {1000 * statistics.median(lat):.2f} ms  "
            f"p99 {1000 * pct(lat, 0.99):.2f} ms  max {1000 * max(lat):.2f} ms"
        )
        steady = [v for v, t in zip(lat, recorder.times, strict=True) if t - started > 5]
        if steady:
            print(
                f"lateness after the first 5 s: p50 {1000 * statistics.median(steady):.2f} ms  "
                f"p99 {1000 * pct(steady, 0.99):.2f} ms  max {1000 * max(steady):.2f} ms"
            )
    if renders:
        print(
            f"/metrics render: {len(renders)} scrapes, median {statistics.median(renders):.2f}s "
            f"max {max(renders):.2f}s, {sizes[-1] / 1e6:.1f} MB of text"
        )
    print(f"RSS: {rss_mb():.0f} MB (start {rss_start:.0f} MB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checks", type=int, default=50_000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=75.0)
    parser.add_argument("--scrape-every", type=float, default=15.0)
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="skip the daemon's gc.freeze() after loading checks",
    )
    parser.add_argument("--all-cores", action="store_true", help="do not pin to one core")
    args = parser.parse_args()
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    factory = None
    if not args.no_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(args))
