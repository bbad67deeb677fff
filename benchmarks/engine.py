"""Engine benchmark: N no-op checks through the whole daemon (scheduler, runner, status store,
alerting with a receiver, history, the HTTP server), side by side with another revision.

Run by hand (not a test):

  .venv/bin/python benchmarks/engine.py --checks 100000 --anchor 9ffeec7
  .venv/bin/python benchmarks/engine.py --checks 100000 --anchor 9ffeec7 --abba  # A B B A

Each variant runs in a child process pinned to one core (``--cores``), one after the other:
this tree, and, with ``--anchor REV``, the engine of revision REV (``git archive`` of its
``alivemcp`` and test plugins into a temporary directory, imported instead of this tree's).
Both children run this file's own child code, so they measure the same things the same way.
The child:

1. starts a real :class:`~alivemcp.app.daemon.Daemon` on a config file of N ``test_noop`` checks
   (interval 60 s), alerting with a webhook receiver on a loopback stand-in, history on;
   start-up is ``load_config`` plus the daemon's start, until the scheduler runs;
2. waits out the first-run window, then measures a steady window: engine CPU per run (process
   CPU, every thread, over runs started), lateness p50/p99/max, longest event-loop stall;
3. scrapes ``/metrics`` with curl (another process) and notes the render time and the
   lateness of the runs that started during the scrapes;
4. reloads the same file (nothing changes), then a file that changes every check (a new
   label): time of each reload, longest loop stall during it, and lateness of runs started
   during it and in the window after;
5. prints RSS (now and peak).

Goals (issue #17): engine CPU <= 0.1 ms per run; at 100,000 checks lateness p99 <= 50 ms after
start-up, RSS <= 768 MB, /metrics <= 2 s without blocking the loop, start-up and a full reload
<= 10 s each without stalling running checks past their timeouts.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


# -- parent: one child per variant, figures side by side ---------------------------------------


def export_revision(rev: str, into: Path) -> Path:
    tree = into / f"anchor-{rev}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "alivemcp", "tests/plugins"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def run_child(tree: Path, args: argparse.Namespace, work: Path, label: str) -> dict[str, Any]:
    log = work / f"{label}.log"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(tree),
        "--checks",
        str(args.checks),
        "--interval",
        str(args.interval),
        "--steady",
        str(args.steady),
        "--scrapes",
        str(args.scrapes),
        "--cores",
        str(args.cores),
    ]
    if args.no_uvloop:
        cmd.append("--no-uvloop")
    print(f"[{label}] {tree} ...", file=sys.stderr, flush=True)
    with log.open("wb") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO)
    lines = proc.stdout.decode().strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"[{label}] child failed ({proc.returncode}):\n{tail}")
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("scrape "):  # each scrape's own figures, to tell one bad from all
            print(f"[{label}] {line}", file=sys.stderr, flush=True)
    return dict(json.loads(lines[-1]))


ROWS: list[tuple[str, str, str]] = [
    # (key, what, format)
    ("checks", "checks", "{:.0f}"),
    ("load_s", "start-up: load_config (s)", "{:.2f}"),
    ("start_s", "start-up: daemon start until scheduling (s)", "{:.2f}"),
    ("startup_s", "start-up total (s)", "{:.2f}"),
    ("startup_cpu_s", "start-up total, CPU (s)", "{:.2f}"),
    ("startup_stall_ms", "longest loop stall in the first-run window (ms)", "{:.0f}"),
    ("ready_s", "every check had a result after (s)", "{:.1f}"),
    ("steady_runs_per_s", "steady: runs a second", "{:.0f}"),
    ("cpu_per_run_ms", "steady: engine CPU per run, all threads (ms)", "{:.3f}"),
    ("loop_cpu_per_run_ms", "steady: of which the event-loop thread (ms)", "{:.3f}"),
    ("cpu_share", "steady: share of one core", "{:.0%}"),
    ("steady_p50_ms", "steady lateness p50 (ms)", "{:.2f}"),
    ("steady_p99_ms", "steady lateness p99 (ms)", "{:.2f}"),
    ("steady_max_ms", "steady lateness max (ms)", "{:.1f}"),
    ("steady_stall_ms", "steady: longest loop stall (ms)", "{:.0f}"),
    ("steady_full_gcs", "steady: full garbage collections", "{:.0f}"),
    ("steady_full_gc_ms", "steady: longest full collection, CPU (ms)", "{:.0f}"),
    ("render_s", "/metrics scrape, median (s)", "{:.2f}"),
    ("render_max_s", "/metrics scrape, max (s)", "{:.2f}"),
    ("render_cpu_s", "/metrics scrape, process CPU meanwhile, median (s)", "{:.2f}"),
    ("render_mb", "/metrics size (MB)", "{:.1f}"),
    ("render_p99_ms", "lateness p99 of runs during scrapes (ms)", "{:.1f}"),
    ("render_stall_ms", "longest loop stall during scrapes (ms)", "{:.0f}"),
    ("reload_same_s", "reload, nothing changed (s)", "{:.2f}"),
    ("reload_same_cpu_s", "  process CPU (s)", "{:.2f}"),
    ("reload_same_stall_ms", "  longest loop stall during it (ms)", "{:.0f}"),
    ("reload_all_s", "reload, every check changed (s)", "{:.2f}"),
    ("reload_all_cpu_s", "  process CPU (s)", "{:.2f}"),
    ("reload_all_stall_ms", "  longest loop stall during it (ms)", "{:.0f}"),
    ("reload_all_p99_ms", "  lateness p99 of runs during it and 20 s after (ms)", "{:.1f}"),
    ("reload_all_max_ms", "  lateness max of those (ms)", "{:.1f}"),
    ("rss_ready_mb", "RSS after the first-run window (MB)", "{:.0f}"),
    ("rss_scraped_mb", "RSS after the scrapes (MB)", "{:.0f}"),
    ("rss_reload_same_mb", "RSS after the reload with nothing changed (MB)", "{:.0f}"),
    ("rss_mb", "RSS at the end, after the reloads (MB)", "{:.0f}"),
    ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"),
]


def parent(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="alivemcp-bench-engine-"))
    try:
        variants = [("this tree", REPO)]
        if args.anchor:
            variants.insert(0, (f"anchor {args.anchor}", export_revision(args.anchor, work)))
        # Children run one after the other, and the later one reads slower: measured with
        # --anchor HEAD (the same code twice), 0.095 against 0.111 ms of CPU per run. With
        # --abba each variant runs twice, in the order A B B A, and the columns are the means.
        order = [*variants, *reversed(variants)] if args.abba else variants
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in variants}
        for n, (label, tree) in enumerate(order):
            runs[label].append(run_child(tree, args, work, f"{label.replace(' ', '-')}-{n}"))
        figures = [_mean_figures(runs[label]) for label, _ in variants]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(
        f"engine benchmark: {args.checks} test_noop checks at {args.interval:g}s, full engine "
        f"(status, alerting with a webhook receiver, history), "
        f"{'asyncio' if args.no_uvloop else 'uvloop'}, "
        f"{'one core' if args.cores == 1 else f'{args.cores} cores'} per child"
    )
    print(f"load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.abba:
        print("each column: the mean of two runs, in the order A B B A")
    width = max(len(what) for _, what, _ in ROWS)
    print(f"{'':{width}}  " + "  ".join(f"{label:>16}" for label, _ in variants))
    for key, what, fmt in ROWS:
        cells = []
        for fig in figures:
            value = fig.get(key)
            cells.append(f"{'-' if value is None else fmt.format(value):>16}")
        print(f"{what:{width}}  " + "  ".join(cells))


def _mean_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the mean over ``runs`` of those that have it."""
    keys = dict.fromkeys(key for run in runs for key in run)
    return {
        key: statistics.fmean(values)
        if (values := [run[key] for run in runs if isinstance(run.get(key), int | float)])
        else None
        for key in keys
    }


# -- child: one variant --------------------------------------------------------------------------


def rss_mb(field: str = "VmRSS:") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def thread_cpu(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float | None) -> float | None:
    return None if value is None else 1000 * value


class Sink(BaseHTTPRequestHandler):
    """The webhook receiver's stand-in: takes any POST."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def config_text(
    checks: int, interval: float, data_dir: Path, hook_port: int, revision: str | None
) -> str:
    labels = f", labels: {{rev: '{revision}'}}" if revision else ""
    return (
        f"data_dir: {data_dir}\n"
        "server: {listen: '127.0.0.1:0'}\n"
        "scheduler: {max_concurrency: 10000}\n"
        "logging: {level: info, format: json}\n"
        "history: {enabled: true}\n"
        "alerting:\n"
        f"  receivers: [{{name: hook, type: webhook, url: 'http://127.0.0.1:{hook_port}/'}}]\n"
        "  default_receivers: [hook]\n"
        "checks:\n"
        + "".join(
            f"  - {{name: c{i}, probe: test_noop, interval: {interval:g}{labels}}}\n"
            for i in range(checks)
        )
    )


async def child(args: argparse.Namespace) -> dict[str, Any]:
    from alivemcp.app.daemon import Daemon
    from alivemcp.config import load_config
    from alivemcp.hygiene.logging import configure_logging

    work = Path(tempfile.mkdtemp(prefix="alivemcp-bench-engine-child-"))
    sink = HTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    path = work / "alivemcp.yaml"
    path.write_text(config_text(args.checks, args.interval, work / "data", sink.server_port, None))
    configure_logging("info", "json")
    out: dict[str, Any] = {"checks": args.checks}

    collections: list[tuple[float, int, float]] = []  # (when, generation, seconds)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        # CPU time of the collecting thread: on a busy machine wall time says more about the
        # neighbours than about the collection.
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            collections.append(
                (time.monotonic(), info["generation"], time.thread_time() - gc_started[0])
            )

    gc.callbacks.append(on_gc)
    starts: list[float] = []  # monotonic time of each run's start
    late: list[float] = []  # its lateness
    stalls: list[tuple[float, float]] = []  # (when, how long) of loop stalls over 20 ms

    t0 = time.perf_counter()
    cpu_start = time.process_time()
    loaded = load_config(path)
    out["load_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    daemon = Daemon(loaded, path)
    real = daemon.scheduler.metrics.lateness

    class Recorder:
        def observe(self, value: float) -> None:
            starts.append(time.monotonic())
            late.append(value)
            real.observe(value)

    daemon.scheduler.metrics.lateness = Recorder()  # type: ignore[assignment]
    del loaded
    await daemon._start()
    out["start_s"] = time.perf_counter() - t1
    out["startup_s"] = time.perf_counter() - t0
    out["startup_cpu_s"] = time.process_time() - cpu_start
    started = time.monotonic()
    port = daemon.server.port

    async def watch() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.005)
            stall = time.monotonic() - before - 0.005
            if stall > 0.02:
                stalls.append((before, stall))

    watcher = asyncio.create_task(watch())

    def longest_stall(since: float, until: float) -> float:
        return max((s for t, s in stalls if since <= t <= until), default=0.0)

    def lateness_between(since: float, until: float) -> list[float]:
        return [v for t, v in zip(starts, late, strict=False) if since <= t <= until]

    # 1. The first-run window: every check's first run, spread over min(N / 1000 s, interval).
    window = min(max(2.0, args.checks / 1000), args.interval)
    ready_at = None
    while time.monotonic() < started + window + 10:
        await asyncio.sleep(0.2)
        if ready_at is None and daemon.store.ready():
            ready_at = time.monotonic() - started
    out["ready_s"] = ready_at
    out["startup_stall_ms"] = ms(longest_stall(started, time.monotonic()))
    out["rss_ready_mb"] = rss_mb()

    # 2. Steady state.
    loop_tid = threading.get_native_id()
    cpu0, loop0, since = time.process_time(), thread_cpu(loop_tid), time.monotonic()
    await asyncio.sleep(args.steady)
    cpu, loop_cpu = time.process_time() - cpu0, thread_cpu(loop_tid) - loop0
    until = time.monotonic()
    steady = lateness_between(since, until)
    out["steady_runs_per_s"] = len(steady) / (until - since)
    out["cpu_per_run_ms"] = 1000 * cpu / max(1, len(steady))
    out["loop_cpu_per_run_ms"] = 1000 * loop_cpu / max(1, len(steady))
    out["cpu_share"] = cpu / (until - since)
    out["steady_p50_ms"] = ms(statistics.median(steady)) if steady else None
    out["steady_p99_ms"] = ms(pct(steady, 0.99))
    out["steady_max_ms"] = ms(max(steady, default=None))  # type: ignore[type-var]
    out["steady_stall_ms"] = ms(longest_stall(since, until))
    full = [seconds for when, gen, seconds in collections if gen == 2 and since <= when <= until]
    out["steady_full_gcs"] = len(full)
    out["steady_full_gc_ms"] = ms(max(full, default=0.0))

    # 3. Scrapes, from another process.
    renders: list[float] = []
    render_cpu: list[float] = []
    during: list[float] = []
    render_stall = 0.0
    size = 0
    for _ in range(args.scrapes):
        await asyncio.sleep(3)
        t, cpu0 = time.monotonic(), time.process_time()
        # Popen (vfork), not the loop's own spawn: uvloop forks this whole process first,
        # and copying the page tables of 100,000 checks held the loop as long as a render.
        proc = subprocess.Popen(  # noqa: ASYNC220
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{size_download}",
                f"http://127.0.0.1:{port}/metrics",
            ],
            stdout=subprocess.PIPE,
        )
        stdout, _ = await asyncio.to_thread(proc.communicate)
        end = time.monotonic()
        renders.append(end - t)
        render_cpu.append(time.process_time() - cpu0)
        size = int(stdout or b"0")
        this = lateness_between(t, end)
        during += this
        render_stall = max(render_stall, longest_stall(t, end))
        print(
            f"scrape {end - t:.2f} s: lateness p99 {ms(pct(this, 0.99)) or 0:.0f} ms, "
            f"max {ms(max(this, default=0)):.0f} ms, longest stall "
            f"{ms(longest_stall(t, end)):.0f} ms",
            file=sys.stderr,
            flush=True,
        )
    out["render_s"] = statistics.median(renders) if renders else None
    out["render_cpu_s"] = statistics.median(render_cpu) if render_cpu else None
    out["render_max_s"] = max(renders, default=None)  # type: ignore[type-var]
    out["render_mb"] = size / 1e6
    out["render_p99_ms"] = ms(pct(during, 0.99))
    out["render_stall_ms"] = ms(render_stall)
    out["rss_scraped_mb"] = rss_mb()

    # 4. Reloads: the same file, then every check changed.
    await asyncio.sleep(3)
    t, cpu0 = time.monotonic(), time.process_time()
    assert await daemon.reload()
    end = time.monotonic()
    out["reload_same_s"] = end - t
    out["reload_same_cpu_s"] = time.process_time() - cpu0
    out["reload_same_stall_ms"] = ms(longest_stall(t, end))
    await asyncio.sleep(3)
    out["rss_reload_same_mb"] = rss_mb()
    path.write_text(config_text(args.checks, args.interval, work / "data", sink.server_port, "2"))
    t, cpu0 = time.monotonic(), time.process_time()
    assert await daemon.reload()
    end = time.monotonic()
    out["reload_all_s"] = end - t
    out["reload_all_cpu_s"] = time.process_time() - cpu0
    out["reload_all_stall_ms"] = ms(longest_stall(t, end))
    await asyncio.sleep(20)
    after = lateness_between(t, time.monotonic())
    out["reload_all_p99_ms"] = ms(pct(after, 0.99))
    out["reload_all_max_ms"] = ms(max(after, default=None))  # type: ignore[type-var]

    out["rss_mb"] = rss_mb()
    out["peak_rss_mb"] = rss_mb("VmHWM:")
    watcher.cancel()
    daemon._stopping = True
    await daemon.scheduler.stop(1)
    sink.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checks", type=int, default=100_000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--anchor", help="a git revision to measure side by side (e.g. main)")
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument(
        "--cores",
        type=int,
        default=1,
        help="cores each child is pinned to (its config-loader child inherits "
        "them: with 2, a reload's load runs beside the daemon)",
    )
    parser.add_argument(
        "--abba",
        action="store_true",
        help="run each variant twice, A B B A, and print the means (the later "
        "child reads slower: see parent())",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:
        parent(args)
        return
    tree = Path(args.child)
    sys.path.insert(0, str(tree / "tests" / "plugins"))  # the test plugin's no-op probe type
    sys.path.insert(0, str(tree))
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    factory = None
    if not args.no_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        figures = runner.run(child(args))
    import alivemcp

    figures["tree"] = str(Path(alivemcp.__file__).parent)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
