"""/metrics render of the per-check families, without the daemon: a StatusStore of N checks
with one result each, rendered cold, then again after a share of the checks ran once more.

Hand-written for issue #17 (the full engine benchmark takes minutes at 100,000 checks); it
reports CPU time (the machine is shared: wall time is noisy) of the worker-thread render and
of the parts' final join, and the body's size. ``--profile`` prints cProfile's top entries of
the warm render.

    .venv/bin/python benchmarks/metrics_render.py --checks 100000 --changed 0.05
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import Status
from alivemcp.web.metrics import CheckExposition


def result(info: CheckInfo, now: float, status: Status = Status.UP) -> CheckResult:
    duration = random.random() / 1000
    return CheckResult(info, status, "ok", duration, now, now + duration)


def render_once(exposition: CheckExposition, store: StatusStore) -> tuple[float, float, int]:
    cpu = time.process_time()
    parts = exposition.render(False, store.states())
    mid = time.process_time()
    body = b"".join(parts)
    return mid - cpu, time.process_time() - mid, len(body)


def filled_store(checks: int, now: float) -> tuple[StatusStore, list[CheckInfo]]:
    """A status store of ``checks`` checks, each with one up result started at ``now``."""
    store = StatusStore()
    infos = [CheckInfo(f"c{i}", "test_noop") for i in range(checks)]
    store.set_checks(infos)
    for info in infos:
        store.record(result(info, now))
    return store, infos


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checks", type=int, default=100_000)
    parser.add_argument(
        "--changed",
        type=float,
        default=0.05,
        help="share of the checks that run again between two renders",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    random.seed(1)
    now = time.time()
    store, infos = filled_store(args.checks, now)
    exposition = CheckExposition(store)
    render, join, size = render_once(exposition, store)
    print(f"cold: render {render:.3f} s CPU, join {join:.3f} s CPU, {size / 1e6:.1f} MB")
    for round_ in range(args.rounds):
        now += 5
        for info in random.sample(infos, int(args.checks * args.changed)):
            status = Status.DOWN if random.random() < 0.01 else Status.UP
            store.record(result(info, now, status))
        if args.profile and round_ == args.rounds - 1:
            profile = cProfile.Profile()
            profile.enable()
            render_once(exposition, store)
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
            continue
        gc.collect()
        render, join, size = render_once(exposition, store)
        print(f"warm: render {render:.3f} s CPU, join {join:.3f} s CPU, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
