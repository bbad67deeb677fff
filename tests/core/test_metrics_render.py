"""/metrics rendering of per-check series: each check's lines are kept between scrapes until its
state changes, and a render of many checks runs off the event loop."""

from __future__ import annotations

import asyncio
import random
import re
import sys
import threading
import time

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import Status
from alivemcp.web import metrics as metrics_module
from alivemcp.web.metrics import RENDER_CHUNK, Metrics


def result(
    info: CheckInfo, status: Status, started: float, duration: float, **observations: float
) -> CheckResult:
    return CheckResult(
        check=info,
        status=status,
        reason="r",
        duration_seconds=duration,
        started_at=started,
        finished_at=started + duration,
        observations=observations,
    )


def sample(body: str, family: str, check: str, extra: str = "") -> str | None:
    pattern = rf'^{family}\{{check="{re.escape(check)}",probe="p"[^}}]*{extra}[^}}]*\}} (\S+)$'
    match = re.search(pattern, body, re.M)
    return match.group(1) if match else None


async def render(metrics: Metrics) -> str:
    body, _ = await metrics.render(None)
    return body.decode()


async def test_a_scrape_shows_each_checks_latest_state_not_a_kept_one() -> None:
    store = StatusStore()
    metrics = Metrics(store)
    a, b = CheckInfo("a", "p", {"team": "x"}), CheckInfo("b", "p")
    store.set_checks([a, b])
    store.record(result(a, Status.UP, 1000.0, 0.5, widgets=3))
    body = await render(metrics)
    assert sample(body, "alivemcp_check_up", "a") == "1.0"
    assert sample(body, "alivemcp_probe_widgets", "a") == "3.0"
    assert sample(body, "alivemcp_check_up", "b") is None  # no result yet
    assert sample(body, "alivemcp_check_runs_total", "b") is None

    # A new result: every family of the check follows it, the other check's lines stay.
    store.record(result(a, Status.DOWN, 1060.0, 0.25, widgets=4))
    store.record(result(b, Status.UP, 1061.0, 0.1))
    body = await render(metrics)
    assert sample(body, "alivemcp_check_up", "a") == "0.0"
    assert sample(body, "alivemcp_check_status", "a", 'status="down"') == "1.0"
    assert sample(body, "alivemcp_check_status", "a", 'status="up"') == "0.0"
    assert sample(body, "alivemcp_check_duration_seconds", "a") == "0.25"
    assert sample(body, "alivemcp_check_last_run_timestamp_seconds", "a") == "1060.0"
    assert sample(body, "alivemcp_check_status_since_timestamp_seconds", "a") == "1060.25"
    assert sample(body, "alivemcp_check_runs_total", "a", 'result="up"') == "1.0"
    assert sample(body, "alivemcp_check_runs_total", "a", 'result="down"') == "1.0"
    assert sample(body, "alivemcp_probe_widgets", "a") == "4.0"
    assert sample(body, "alivemcp_check_up", "b") == "1.0"

    # A reload that changes a check's labels, and removes the other one.
    store.set_checks([CheckInfo("a", "p", {"team": "y"})])
    body = await render(metrics)
    assert 'team="y"' in body and 'team="x"' not in body
    assert sample(body, "alivemcp_check_up", "b") is None


async def test_a_large_render_runs_off_the_event_loop() -> None:
    store = StatusStore()
    metrics = Metrics(store)
    infos = [CheckInfo(f"c{i}", "p") for i in range(3 * RENDER_CHUNK)]
    store.set_checks(infos)
    for info in infos:
        store.record(result(info, Status.UP, 1000.0, 0.1))
    rendering = asyncio.ensure_future(render(metrics))
    ticks_during = 0
    await asyncio.sleep(0)  # the render has begun
    while not rendering.done():
        ticks_during += 1
        await asyncio.sleep(0)
    body = await rendering
    assert ticks_during >= 3  # the loop ran other work while the render went on
    assert body.count("alivemcp_check_up{") == 3 * RENDER_CHUNK
    # The per-scrape families, made in pieces too: every check's four status lines, once.
    assert body.count("alivemcp_check_status{") == 4 * 3 * RENDER_CHUNK
    assert body.count('status="up"} 1.0\n') == 3 * RENDER_CHUNK
    assert body.count('status="down"} 0.0\n') == 3 * RENDER_CHUNK


def test_the_render_thread_lets_another_thread_take_the_lock_while_it_works() -> None:
    # The loop thread waits for the interpreter's lock after each of its turns; a render left
    # to the switch interval handed it back only when that wait ran out. With the interval
    # made far longer than the render, another thread gets the lock during it only if the
    # render gives it away itself.
    store = StatusStore()
    metrics = Metrics(store)
    infos = [CheckInfo(f"c{i}", "p", {"team": "x"}) for i in range(20_000)]
    store.set_checks(infos)
    for info in infos:
        store.record(result(info, Status.UP, 1000.0, 0.1, widgets=1))
    metrics_module._observable_help()  # loaded once per process (its file reads free the lock)
    turns: list[float] = []
    rendering = threading.Event()
    done = threading.Event()

    def loop_thread() -> None:
        while not done.is_set():
            time.sleep(0.0005)  # a turn's wait for I/O: the lock is released, then wanted back
            if rendering.is_set():
                turns.append(time.perf_counter())

    interval = sys.getswitchinterval()
    other = threading.Thread(target=loop_thread)
    other.start()
    try:
        sys.setswitchinterval(30.0)
        rendering.set()
        started = time.perf_counter()
        parts = metrics.checks.render(False, store.states())
        ended = time.perf_counter()
        rendering.clear()
    finally:
        sys.setswitchinterval(interval)
        done.set()
        other.join()
    assert b"".join(parts).count(b"alivemcp_check_up{") == 20_000
    during = [t for t in turns if started <= t <= ended]
    # The render takes tenths of a second and breathes every millisecond: many turns, where
    # without its breaths the other thread waited the whole render (one turn at most).
    assert len(during) >= 20, (len(during), ended - started)


async def test_kept_lines_say_what_freshly_made_lines_say() -> None:
    # Of a check that ran, only the families its result changed are made again: after any
    # mix of results (status kept or changed), reloads and removals, a render from kept lines
    # must equal a render that made every line anew.
    rng = random.Random(7)
    store = StatusStore()
    kept = Metrics(store)
    infos = [CheckInfo(f"c{i}", "p", {"team": rng.choice(["a", "b"])}) for i in range(300)]
    store.set_checks(infos)
    clock = 1000.0
    for round_ in range(12):
        for info in rng.sample(infos, rng.randint(0, len(infos))):
            clock += 0.25
            current = store.get(info.name)
            assert current is not None
            store.record(
                result(
                    current.info,
                    rng.choice([Status.UP] * 3 + list(Status)),
                    clock,
                    rng.random(),
                    **{"lat": rng.random()},
                )
            )
        if round_ in (4, 8):
            infos = [
                CheckInfo(i.name, "p", {"team": "z"}) if rng.random() < 0.3 else i
                for i in infos[:250]
            ]
            store.set_checks(infos)
        states = store.states()
        assert kept.checks.render(False, states) == Metrics(store).checks.render(False, states)
