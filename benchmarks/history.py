"""History benchmark: the write path at 50,000 checks, reads over 90 days of rollups, and the
naive one-row-per-run design side by side.

Run by hand (not a test); each part prints its figures:

  .venv/bin/python benchmarks/history.py steady   # 50,000 checks at 60 s, history off then on
  .venv/bin/python benchmarks/history.py reads    # 90 days of rollups for 50,000 checks
  .venv/bin/python benchmarks/history.py naive    # one row per run, for comparison
  .venv/bin/python benchmarks/history.py all

Goals (issue #13): writer CPU <= 5 % of one core at steady state; scheduler lateness p99 with
history on equal to off within noise; database <= 2 GB for 90 days; /api/v1/checks for all
50,000 <= 1 s; one check's uptime or incidents <= 20 ms.

``steady`` runs the real scheduler, status store and history store in a child process per
variant (same core pinning, same duration), so the two lateness figures come from one run of
this script under the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "plugins"))  # the test plugin's no-op probe type

from alivemcp.history import latency, schema  # noqa: E402
from alivemcp.history.config import HistoryConfig  # noqa: E402

DAY = 86400


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def thread_cpu_seconds(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def db_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("history.sqlite*"))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- steady: the write path under the real scheduler ------------------------------------------


async def steady_child(checks: int, interval: float, seconds: float, history_on: bool) -> dict:
    from alivemcp.app.daemon import settle_heap
    from alivemcp.config import SchedulerConfig, load_config_text
    from alivemcp.engine.checks import build_handle
    from alivemcp.engine.instruments import SchedulerMetrics
    from alivemcp.engine.pipeline import ResultPipeline
    from alivemcp.engine.scheduler import Scheduler
    from alivemcp.engine.status import StatusStore
    from alivemcp.history.store import HistoryStore
    from alivemcp.plumbing import Plumbing
    from alivemcp.web.metrics import Metrics

    text = "checks:\n" + "".join(
        f"  - {{name: c{i}, probe: test_noop, interval: {interval}}}\n" for i in range(checks)
    )
    loaded = load_config_text(text, env={})
    store = StatusStore()
    metrics = Metrics(store)
    scheduler_metrics = SchedulerMetrics(metrics.registry)
    lateness: list[float] = []
    real_observe = scheduler_metrics.lateness.observe

    def observe(value: float) -> None:
        lateness.append((time.monotonic(), value))  # type: ignore[arg-type]
        real_observe(value)

    scheduler_metrics.lateness.observe = observe  # type: ignore[method-assign]
    tmp = tempfile.mkdtemp(prefix="alivemcp-bench-history-")
    history = HistoryStore(tmp, HistoryConfig(), metrics.registry) if history_on else None
    consumers: list = [store] + ([history] if history else [])
    pipeline = ResultPipeline(consumers, metrics.registry)
    scheduler = Scheduler(
        store.mark_in_flight, scheduler_metrics, pipeline, SchedulerConfig(max_concurrency=10_000)
    )
    plumbing = Plumbing()
    store.set_checks(build_handle(c, plumbing).info for c in loaded.checks)
    for check in loaded.checks:
        scheduler.add(build_handle(check, plumbing), check.fingerprint())
    del loaded, text
    if history is not None:
        history.start()
    settle_heap()
    scheduler.start()
    started = time.monotonic()
    # Steady state: skip the first interval (first runs are spread over it, and each check's
    # first result creates its row) plus 15 s, then measure the rest.
    warmup = min(interval + 15, seconds / 2)
    await asyncio.sleep(warmup)
    tid = history.writer._thread.native_id if history and history.writer._thread else None
    cpu_writer0 = thread_cpu_seconds(tid) if tid else 0.0
    cpu0 = time.process_time()
    t0 = time.monotonic()
    await asyncio.sleep(seconds - warmup)
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    writer_cpu = (thread_cpu_seconds(tid) - cpu_writer0) if tid else 0.0
    out = {
        "history": history_on,
        "lateness_p50_ms": 1000 * statistics.median(v for t, v in lateness if t - started > warmup),
        "lateness_p99_ms": 1000 * pct([v for t, v in lateness if t - started > warmup], 0.99),
        "lateness_max_ms": 1000 * max(v for t, v in lateness if t - started > warmup),
        "runs": len(lateness),
        "process_cpu_pct": 100 * cpu / wall,
        "writer_cpu_pct": 100 * writer_cpu / wall,
        "rss_mb": rss_mb(),
    }
    if history is not None:
        out["results_written"] = history.writer.stats.committed_results
        out["db_mb"] = db_bytes(Path(tmp)) / 1e6
        await history.stop()
    await scheduler.stop(1)
    return out


def steady(args: argparse.Namespace) -> None:
    print(
        f"== steady: {args.checks} checks every {args.interval:g}s, {args.seconds:g}s per "
        "variant, scheduler + history pinned to one core, uvloop"
    )
    rows = []
    for variant in ("off", "on", "off", "on") if args.repeat else ("off", "on"):
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "_steady_child",
                "--checks",
                str(args.checks),
                "--interval",
                str(args.interval),
                "--seconds",
                str(args.seconds),
                "--history",
                variant,
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"history {variant:3}: lateness p50 {row['lateness_p50_ms']:.2f} ms  "
            f"p99 {row['lateness_p99_ms']:.2f} ms  max {row['lateness_max_ms']:.1f} ms  "
            f"process CPU {row['process_cpu_pct']:.1f}%  writer thread CPU "
            f"{row['writer_cpu_pct']:.2f}% of one core  RSS {row['rss_mb']:.0f} MB"
            + (
                f"  written {row['results_written']}  db {row['db_mb']:.1f} MB"
                if row["history"]
                else ""
            )
        )


# -- reads: 90 days of rollups ------------------------------------------------------------


def generate(path: Path, checks: int, days: int, now: float) -> None:
    """Rollups as the writer would have left them after ``days`` of one run a minute per
    check, ~1 % of runs down in a few incidents per check."""
    db = schema.connect(path)
    schema.create(db)
    db.execute("PRAGMA synchronous = OFF")
    rng = random.Random(7)
    lat = latency.encode(
        {latency.bin_of(0.05): 50, latency.bin_of(0.08): 9, latency.bin_of(0.4): 1}
    )
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO checks (id, name, probe, first_seen) VALUES (?, ?, ?, ?)",
        (
            (i, f"team-{i % 50}/mcp-{i}", "mcp_endpoint", now - days * DAY)
            for i in range(1, checks + 1)
        ),
    )
    db.execute("COMMIT")
    retention = HistoryConfig().retention
    plan = (
        ("minute", 60, int(retention.minute // 60) + 1, (1, 0, 0, 0)),
        ("hour", 3600, int(retention.hour // 3600) + 1, (59, 0, 1, 0)),
        ("day", DAY, days + 1, (1420, 5, 14, 1)),
    )
    for table, width, count, (up, degraded, down, unknown) in plan:
        newest = int(now) // width * width
        sql = (
            f"INSERT INTO {table} (check_id, bucket, up, degraded, down, unknown, latency) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        for first in range(1, checks + 1, 5000):
            db.execute("BEGIN")
            db.executemany(
                sql,
                (
                    (cid, newest - k * width, up, degraded, down, unknown, lat)
                    for cid in range(first, min(first + 5000, checks + 1))
                    for k in range(count)
                ),
            )
            db.execute("COMMIT")
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO incidents (check_id, started_at, ended_at, last_at, worst, first_reason, "
        "last_reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            (
                cid,
                start,
                start + dur,
                start + dur - 60,
                "down",
                "connect to 127.0.0.1:8080: connection refused",
                "HTTP 503 from /mcp",
            )
            for cid in range(1, checks + 1)
            for start, dur in (
                (now - rng.uniform(0, days * DAY), rng.uniform(60, 3600)) for _ in range(10)
            )
        ),
    )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def reads(args: argparse.Namespace) -> None:
    from alivemcp.engine.results import CheckInfo
    from alivemcp.engine.status import StatusStore
    from alivemcp.history.store import HistoryStore

    now = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="alivemcp-bench-history-"))
    path = tmp / schema.FILE_NAME
    t0 = time.perf_counter()
    generate(path, args.checks, args.days, now)
    print(
        f"== reads: {args.checks} checks, {args.days} days of rollups (generated in "
        f"{time.perf_counter() - t0:.0f}s)"
    )
    db = sqlite3.connect(path)
    rows = {
        t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("minute", "hour", "day", "incidents")
    }
    db.close()
    size = sum(p.stat().st_size for p in tmp.glob("history.sqlite*"))
    print(f"database: {size / 1e9:.2f} GB  rows: {rows}")

    async def run() -> None:
        from alivemcp.web.metrics import Metrics
        from alivemcp.web.server import HttpServer

        store = StatusStore()
        infos = [
            CheckInfo(f"team-{i % 50}/mcp-{i}", "mcp_endpoint", {"team": f"t{i % 50}"})
            for i in range(1, args.checks + 1)
        ]
        store.set_checks(infos)
        history = HistoryStore(tmp, HistoryConfig())
        t0 = time.perf_counter()
        history.start()
        await asyncio.to_thread(history.writer.ready.wait, 600)
        print(
            f"history start (open + live windows from the file): "
            f"{time.perf_counter() - t0:.2f}s  RSS {rss_mb():.0f} MB"
        )
        history.set_checks(infos)
        server = HttpServer(store, Metrics(store), lambda: True, lambda: True, None, history)
        await server.start("127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.port}"

        def get(path: str) -> tuple[float, int]:
            t = time.perf_counter()
            with urllib.request.urlopen(base + path, timeout=60) as response:
                body = response.read()
            return time.perf_counter() - t, len(body)

        timings = []
        for _ in range(5):
            seconds, length = await asyncio.to_thread(get, "/api/v1/checks")
            timings.append(seconds)
        print(
            f"GET /api/v1/checks ({args.checks} checks, {length / 1e6:.1f} MB): "
            f"median {statistics.median(timings):.3f}s  max {max(timings):.3f}s"
        )
        rng = random.Random(1)
        picks = [infos[rng.randrange(len(infos))].name for _ in range(200)]
        for label, template in (
            ("uptime?window=24h", "/api/v1/checks/{}/uptime?window=24h"),
            ("uptime?window=30d", "/api/v1/checks/{}/uptime?window=30d"),
            ("uptime?window=90d", "/api/v1/checks/{}/uptime?window=90d"),
            ("incidents?since=90d", "/api/v1/checks/{}/incidents?since=90d"),
            ("history?window=30d", "/api/v1/checks/{}/history?window=30d"),
            ("badge uptime-30d", "/badge/{}/uptime-30d.svg"),
        ):
            quoted = [urllib.request.quote(name, safe="") for name in picks]
            values = [(await asyncio.to_thread(get, template.format(q)))[0] for q in quoted]
            print(
                f"GET one check's {label}: p50 {1000 * statistics.median(values):.1f} ms  "
                f"p99 {1000 * pct(values, 0.99):.1f} ms  ({len(values)} requests)"
            )
        await server.stop()
        await history.stop()

    asyncio.run(run())


# -- naive: one row per run -----------------------------------------------------------------


def naive(args: argparse.Namespace) -> None:
    """One row per run (what Uptime Kuma 1.x does): bytes per run, write cost per run, and a
    check's 24h/90d uptime, measured on a sample and scaled to 50,000 checks for 90 days."""
    checks, days = args.naive_checks, args.days
    tmp = Path(tempfile.mkdtemp(prefix="alivemcp-bench-naive-"))
    db = sqlite3.connect(tmp / "naive.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE runs (check_id INTEGER, t REAL, status INTEGER, duration REAL)")
    db.execute("CREATE INDEX runs_by_check ON runs (check_id, t)")
    now = time.time()
    per_check = days * 1440
    cpu0 = time.process_time()
    batch = []
    for minute in range(per_check):
        t = now - (per_check - minute) * 60
        batch.extend((cid, t, 0 if minute % 100 else 2, 0.05) for cid in range(checks))
        if len(batch) >= 50_000:
            db.execute("BEGIN")
            db.executemany("INSERT INTO runs VALUES (?, ?, ?, ?)", batch)
            db.execute("COMMIT")
            batch.clear()
    if batch:
        db.execute("BEGIN")
        db.executemany("INSERT INTO runs VALUES (?, ?, ?, ?)", batch)
        db.execute("COMMIT")
    write_cpu = time.process_time() - cpu0
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    runs = checks * per_check
    size = sum(p.stat().st_size for p in tmp.glob("naive.sqlite*"))
    per_run = size / runs
    print(f"== naive: one row per run, sample of {checks} checks x {days} days = {runs:,} rows")
    print(
        f"bytes per run: {per_run:.1f}  write CPU per run: {1e6 * write_cpu / runs:.2f} us "
        f"(batched 50,000 a transaction)"
    )
    full = 50_000 * 1440 * days
    print(
        f"scaled to 50,000 checks at 60 s for {days} days: {full / 1e9:.1f} G rows, "
        f"{full * per_run / 1e9:.0f} GB"
    )
    q = "SELECT status, count(*) FROM runs WHERE check_id = ? AND t >= ? GROUP BY status"
    for label, span in (("24h", DAY), (f"{days}d", days * DAY)):
        values = []
        for cid in range(min(checks, 20)):
            t = time.perf_counter()
            db.execute(q, (cid, now - span)).fetchall()
            values.append(time.perf_counter() - t)
        print(f"one check's {label} uptime: median {1000 * statistics.median(values):.1f} ms")
    all_t = time.perf_counter()
    db.execute(
        "SELECT check_id, sum(status = 0), count(*) FROM runs WHERE t >= ? GROUP BY check_id",
        (now - 30 * DAY,),
    ).fetchall()
    all_s = time.perf_counter() - all_t
    print(
        f"all {checks} checks' 30d uptime: {all_s:.2f}s -> scaled to 50,000 checks: "
        f"~{all_s * 50_000 / checks:.0f}s"
    )
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=["steady", "reads", "naive", "all", "_steady_child"])
    parser.add_argument("--checks", type=int, default=50_000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--naive-checks", type=int, default=50)
    parser.add_argument("--repeat", action="store_true", help="steady: off, on, off, on")
    parser.add_argument("--history", choices=["on", "off"], default="on")
    args = parser.parse_args()
    if args.part == "_steady_child":
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            row = runner.run(
                steady_child(args.checks, args.interval, args.seconds, args.history == "on")
            )
        print(json.dumps(row))
        return
    if args.part in ("steady", "all"):
        steady(args)
    if args.part in ("reads", "all"):
        reads(args)
    if args.part in ("naive", "all"):
        naive(args)


if __name__ == "__main__":
    main()
