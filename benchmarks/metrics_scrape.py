"""/metrics scrapes of N checks through the real HTTP server, with the loop busy meanwhile.

Hand-written for issue #17: a lighter stand-in for ``benchmarks/engine.py`` (minutes at
100,000 checks). The loop records ``--rate`` results a second into the status store (what
the daemon's runs cost the loop is not simulated, only its wake-ups and the store's churn)
and notes how late each 10 ms tick wakes; curl (another process) scrapes ``--scrapes``
times, 3 s apart. Run it pinned to one core to match the engine benchmark:

    taskset -c 0 .venv/bin/python benchmarks/metrics_scrape.py --checks 100000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from metrics_render import filled_store, result

from alivemcp.web.metrics import Metrics
from alivemcp.web.server import HttpServer

TICK = 0.01


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=1666.0)
    parser.add_argument("--scrapes", type=int, default=4)
    parser.add_argument("--gzip", action="store_true", help="scrape with Accept-Encoding: gzip")
    args = parser.parse_args()
    now = time.time()
    store, infos = filled_store(args.checks, now)
    metrics = Metrics(store)
    server = HttpServer(store, metrics, lambda: True, lambda: True)
    await server.start("127.0.0.1", 0)
    late: list[tuple[float, float]] = []

    async def churn() -> None:
        per_tick = max(1, int(args.rate * TICK))
        planned = time.monotonic()
        while True:
            planned += TICK
            await asyncio.sleep(max(0.0, planned - time.monotonic()))
            woke = time.monotonic()
            late.append((woke, woke - planned))
            if woke - planned > TICK:
                planned = woke
            stamp = time.time()
            for info in random.sample(infos, per_tick):
                store.record(result(info, stamp))

    task = asyncio.create_task(churn())
    walls, cpus, lates = [], [], []
    size = b""
    for _ in range(args.scrapes):
        await asyncio.sleep(3)
        t, cpu = time.monotonic(), time.process_time()
        curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}"]
        if args.gzip:
            curl.append("--compressed")
        proc = await asyncio.create_subprocess_exec(
            *curl, f"http://127.0.0.1:{server.port}/metrics", stdout=asyncio.subprocess.PIPE
        )
        size, _ = await proc.communicate()
        end = time.monotonic()
        walls.append(end - t)
        cpus.append(time.process_time() - cpu)
        during = sorted(d for w, d in late if t <= w <= end)
        lates.append(during[int(0.99 * (len(during) - 1))] if during else 0.0)
        print(
            f"scrape {end - t:.2f} s wall, {cpus[-1]:.2f} s CPU, lateness p99 "
            f"{lates[-1] * 1000:.0f} ms max {max(during, default=0) * 1000:.0f} ms, "
            f"{int(size or 0) / 1e6:.1f} MB",
            flush=True,
        )
    task.cancel()
    await server.stop()
    print(f"median {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} s CPU")


if __name__ == "__main__":
    asyncio.run(main())
