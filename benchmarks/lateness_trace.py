"""Where steady-state lateness comes from: N no-op checks through the whole daemon (as
``benchmarks/engine.py`` runs them), with a timeline of what could hold a run back.

Run by hand (not a test):

  .venv/bin/python benchmarks/lateness_trace.py --checks 20000 --interval 12 --steady 30

Pinned to one core, uvloop. Records, during the steady window: each run's planned and actual
start; garbage collections (generation, wall and CPU time); history batches (writer thread:
wall and thread CPU time); alerting state-file writes; event-loop stalls over 5 ms (a 1 ms
sleeper); ``/metrics`` scrapes if ``--scrapes``. Each run later than ``--late`` ms is then
attributed to the events that overlap the span from its planned time to its start, and the
share of late runs each kind of event overlaps is printed, with the worst stalls and what
overlapped them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import HTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parent.parent

Span = tuple[float, float, str]  # (start, end, what), time.time()


async def trace(args: argparse.Namespace) -> None:
    from engine import Sink, config_text  # type: ignore[import-not-found]

    from alivemcp.alerting.persistence import LocalStateFile
    from alivemcp.app.daemon import Daemon
    from alivemcp.config import load_config
    from alivemcp.engine.scheduler import Scheduler
    from alivemcp.history.writer import HistoryWriter
    from alivemcp.hygiene.logging import configure_logging

    spans: list[Span] = []
    gc_start = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0], gc_start[1] = time.time(), time.thread_time()
        else:
            end = time.time()
            cpu = time.thread_time() - gc_start[1]
            if end - gc_start[0] > 0.002 or info["generation"] == 2:
                spans.append(
                    (
                        gc_start[0],
                        end,
                        f"gc{info['generation']} "
                        f"cpu={1000 * cpu:.0f}ms thr={threading.current_thread().name}",
                    )
                )

    def timed(owner: type, method: str, label: str) -> None:
        real: Callable[..., Any] = getattr(owner, method)

        def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            t, c = time.time(), time.thread_time()
            try:
                return real(self, *a, **k)
            finally:
                end = time.time()
                if end - t > 0.002:
                    spans.append((t, end, f"{label} cpu={1000 * (time.thread_time() - c):.0f}ms"))

        setattr(owner, method, wrapper)

    def timed_async(owner: type, method: str, label: str) -> None:
        real: Callable[..., Any] = getattr(owner, method)

        async def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            t = time.time()
            try:
                return await real(self, *a, **k)
            finally:
                end = time.time()
                if end - t > 0.002:
                    spans.append((t, end, label))

        setattr(owner, method, wrapper)

    timed(HistoryWriter, "_write_batch", "history-batch")
    timed(Scheduler, "_wake", "scheduler-wake")
    timed_async(LocalStateFile, "persist", "alert-persist")

    work = Path(tempfile.mkdtemp(prefix="alivemcp-lateness-"))
    sink = HTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    path = work / "alivemcp.yaml"
    path.write_text(config_text(args.checks, args.interval, work / "data", sink.server_port, None))
    configure_logging("info", "json")
    daemon = Daemon(load_config(path), path)
    runs: list[tuple[float, float]] = []  # (planned, started)
    real = daemon.scheduler.metrics.lateness

    class Recorder:
        def observe(self, value: float) -> None:
            now = time.time()
            runs.append((now - value, now))
            real.observe(value)

    daemon.scheduler.metrics.lateness = Recorder()  # type: ignore[assignment]
    await daemon._start()
    gc.callbacks.append(on_gc)
    if os.environ.get("GCPROBE"):
        sys.path.insert(0, "/tmp")
        import gcprobe  # type: ignore[import-not-found]

        gc_report: list[str] = []
        asyncio.get_running_loop().call_later(25, gcprobe.install, gc_report)

    async def watch() -> None:
        # Per stall: CPU of the loop thread and of the whole process meanwhile. Loop CPU near
        # the stall: the loop itself was busy; process CPU beyond it: another thread of ours
        # (history writer, a collection there) held the core or the GIL; neither: the process
        # was off the CPU (other processes on the machine).
        while True:
            before, loop0, proc0 = time.time(), time.thread_time(), time.process_time()
            await asyncio.sleep(0.001)
            stall = time.time() - before - 0.001
            if stall > 0.005:
                loop_ms = 1000 * (time.thread_time() - loop0)
                proc_ms = 1000 * (time.process_time() - proc0)
                spans.append(
                    (
                        before,
                        before + stall,
                        f"loop-stall loop={loop_ms:.0f}ms process={proc_ms:.0f}ms",
                    )
                )

    watcher = asyncio.create_task(watch())
    window = min(max(2.0, args.checks / 1000), args.interval)
    await asyncio.sleep(window + 10)
    since = time.time()
    del runs[:]
    del spans[:]
    cpu0 = time.process_time()
    if args.scrapes:
        for _ in range(args.scrapes):
            await asyncio.sleep(args.steady / (args.scrapes + 1))
            t = time.time()
            proc = await asyncio.create_subprocess_exec(
                "curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{daemon.server.port}/metrics"
            )
            await proc.wait()
            spans.append((t, time.time(), "scrape"))
        await asyncio.sleep(args.steady / (args.scrapes + 1))
    else:
        await asyncio.sleep(args.steady)
    until = time.time()
    cpu = time.process_time() - cpu0
    watcher.cancel()
    steady = [(p, s) for p, s in runs if since <= s <= until]
    late = sorted(s - p for p, s in steady)
    print(
        f"{len(steady)} runs in {until - since:.0f}s ({len(steady) / (until - since):.0f}/s), "
        f"CPU {1000 * cpu / max(1, len(steady)):.3f} ms/run; load {os.getloadavg()[0]:.2f}"
    )
    if late:

        def at(q: float) -> float:
            return 1000 * late[min(len(late) - 1, int(q * len(late)))]

        print(
            f"lateness p50 {at(0.5):.2f} p90 {at(0.9):.2f} p99 {at(0.99):.2f} "
            f"p99.9 {at(0.999):.2f} max {at(1):.1f} ms"
        )
    threshold = args.late / 1000
    kinds: Counter[str] = Counter()
    late_runs = [(p, s) for p, s in steady if s - p > threshold]
    for planned, started in late_runs:
        found = {what.split()[0] for a, b, what in spans if a < started and b > planned}
        kinds[" + ".join(sorted(found)) or "(nothing recorded)"] += 1
    print(f"\n{len(late_runs)} runs later than {args.late:g} ms; what overlapped them:")
    for what, count in kinds.most_common():
        print(f"  {count:6d}  {what}")
    by_kind: dict[str, list[float]] = {}
    for a, b, what in spans:
        by_kind.setdefault(what.split()[0], []).append(b - a)
    print("\nevents in the window (count, median ms, max ms):")
    for what, values in sorted(by_kind.items()):
        print(
            f"  {what:16s} {len(values):6d} {1000 * statistics.median(values):8.1f} "
            f"{1000 * max(values):8.1f}"
        )
    print("\nthe 15 longest loop stalls and what overlapped them:")
    all_stalls = [s for s in spans if s[2].startswith("loop-stall")]
    for a, b, what in sorted(sorted(all_stalls, key=lambda s: s[0] - s[1])[:15]):
        over = [
            f"{other} ({1000 * (y - x):.0f}ms)"
            for x, y, other in spans
            if not other.startswith("loop-stall") and x < b and y > a
        ]
        print(
            f"  t+{a - since:7.3f}s {1000 * (b - a):6.1f} ms [{what[11:]}]: "
            f"{'; '.join(over) or '-'}"
        )
    stalled = sum(b - a for a, b, _ in all_stalls)
    loop_cpu = sum(float(w.split("loop=")[1].split("ms")[0]) for _, _, w in all_stalls) / 1000
    proc_cpu = sum(float(w.split("process=")[1].split("ms")[0]) for _, _, w in all_stalls) / 1000
    print(
        f"\nstalls over 5 ms: {len(all_stalls)}, {stalled:.2f} s in all; meanwhile loop-thread "
        f"CPU {loop_cpu:.2f} s, other threads {proc_cpu - loop_cpu:.2f} s, off the CPU "
        f"{stalled - proc_cpu:.2f} s"
    )
    if os.environ.get("GCPROBE"):
        print("\n".join(gc_report))
    daemon._stopping = True
    await daemon.scheduler.stop(1)
    sink.shutdown()
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checks", type=int, default=20_000)
    parser.add_argument("--interval", type=float, default=12.0)
    parser.add_argument("--steady", type=float, default=30.0)
    parser.add_argument("--late", type=float, default=20.0, help="ms: a run later is 'late'")
    parser.add_argument("--scrapes", type=int, default=0)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "plugins"))
    sys.path.insert(0, str(REPO))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    factory = None
    if not args.no_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(trace(args))


if __name__ == "__main__":
    main()
