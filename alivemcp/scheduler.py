"""Fixed-rate scheduling of checks on APScheduler, with stable spreading and concurrency limits.

Steady state: each check runs on its own grid, ``offset + k * interval`` in Unix time, where the
offset is a hash of its name. Checks that share an interval are spread evenly, and a check runs
at the same moments in every process (restarts, replicas). APScheduler's ``jitter`` would only
ever delay and accumulate drift. ``max_instances=1`` means a check never overlaps itself; a
global semaphore and per-probe-type semaphores keep slow probe types from starving fast ones.

First runs: a check added at start-up (or by a reload: new and changed checks alike; unchanged
checks keep their schedule) runs once soon, without waiting up to a whole interval for its first
grid point. The first runs of the checks added together are spread evenly over a start window of
``len(batch) / FIRST_RUNS_PER_SECOND`` seconds, at least ``MIN_START_WINDOW`` and at most the
check's interval: a handful of checks start within 2 s, 2,000 within 2 s, 50,000 at 60 s within
50 s, at about 1,000 first runs a second (or the steady rate, if that is higher), never all at
once. (Checks with an interval under 2 s simply start on their grid.) A check's place in the
window is a second stable hash of its name, independent of its grid offset, so the window fills
evenly. A check whose next grid point falls inside its window simply starts at that grid point.
After an extra first run, a check rejoins its grid at the first grid point at least half an
interval later: it never runs twice back to back, and the gap from its first run to its second
is between half an interval and one and a half. Lateness (the
``alivemcp_scheduler_lateness_seconds`` histogram and each result's lateness) is measured
against the planned time of the run, the first-run time included. A changed check whose old run
is still in flight when its new first run comes skips that first run (never two runs of a name
at once) and rejoins its grid as above.

Jobs enter APScheduler shortly (``FEED_AHEAD`` seconds) before their first run rather than all at
once: inserting 50,000 jobs takes seconds of CPU, which would block the event loop at start-up
and make the earliest first runs late.

Shutdown: APScheduler's asyncio executor cancels every job task it still holds when it shuts
down, and cannot wait for them. So a job only launches the run in a task the scheduler owns and
waits for it through ``asyncio.shield``: stopping APScheduler then drops the runs that had not
begun probing, while runs already probing get the shutdown grace to finish and record their
result.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import STATE_RUNNING
from apscheduler.triggers.base import BaseTrigger

from alivemcp.config import SchedulerConfig
from alivemcp.metrics import Metrics
from alivemcp.results import CheckResult
from alivemcp.runner import ProbeHandle
from alivemcp.status import StatusStore

__all__ = [
    "FIRST_RUNS_PER_SECOND",
    "MIN_START_WINDOW",
    "ScheduledCheck",
    "Scheduler",
    "plan_first_runs",
    "stable_offset",
    "start_window",
]

log = structlog.get_logger("alivemcp.scheduler")

FIRST_RUNS_PER_SECOND = 1000.0  # how fast a batch of new checks gets its first runs
MIN_START_WINDOW = 2.0  # seconds: a few checks still spread a little
FEED_AHEAD = 2.0  # seconds: a job enters APScheduler this long before its first run
FEED_STEP = 0.5  # seconds between two feeds of a batch into APScheduler


def stable_offset(name: str, interval: float) -> float:
    """Where in its interval a check runs: the same for a name in every process."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * interval


def start_fraction(name: str) -> float:
    """Where in a start window a check's first run goes, in [0, 1): stable, and independent of
    its grid offset (a salted hash), so the checks whose grid point falls inside the window do
    not leave a hole in it."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"alivemcp-start").digest()
    return int.from_bytes(digest, "big") / 2**64


def start_window(checks: int) -> float:
    """Seconds over which the first runs of ``checks`` checks added together are spread (each
    check's own window is also capped at its interval)."""
    return max(MIN_START_WINDOW, checks / FIRST_RUNS_PER_SECOND)


@dataclass(slots=True, eq=False)
class ScheduledCheck(BaseTrigger):
    """A check on the scheduler; also its APScheduler trigger (one object per check, not two:
    at 50,000 checks every object the collector has to scan counts)."""

    name: str
    handle: ProbeHandle
    interval: float
    offset: float
    fingerprint: object
    first_run: float | None = None  # an extra first run off the grid, when one was planned

    def grid_at_or_after(self, moment: float) -> float:
        """The check's first grid point at or after ``moment``."""
        return moment + ((self.offset - moment) % self.interval)

    def next_after(self, previous_run: float) -> float:
        """The run after one planned at ``previous_run``: the first grid point at least half an
        interval later (the next grid point when the previous run was on the grid)."""
        return self.grid_at_or_after(previous_run + self.interval / 2)

    def plan_first_run(self, now: float, window: float) -> float:
        """When the check first runs if added at ``now`` with a start window of ``window``:
        its next grid point if that falls inside its window, else a point in the window."""
        span = min(window, self.interval)
        grid = self.grid_at_or_after(now)
        if grid <= now + span:
            self.first_run = None
            return grid
        self.first_run = now + start_fraction(self.name) * span
        return self.first_run

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime:
        """APScheduler's question. The job is given its first run as ``next_run_time``."""
        if previous_fire_time is None:
            moment = self.grid_at_or_after(now.timestamp())
        else:
            moment = self.next_after(previous_fire_time.timestamp())
        return datetime.fromtimestamp(moment, UTC)

    def __str__(self) -> str:  # how APScheduler's warnings name the trigger
        return f"grid[interval={self.interval:g}s, offset={self.offset:.3f}s]"

    def planned_before(self, now: float) -> float:
        """The planned time of a run starting at ``now``: the latest scheduled point at or
        before ``now``, the extra first run included."""
        grid = now - ((now - self.offset) % self.interval)
        first = self.first_run
        if first is not None and first <= now and grid < first + self.interval / 2:
            return first
        return grid


FirstRunPlan = list[tuple[float, ScheduledCheck]]  # (first run, check), earliest first


def plan_first_runs(entries: list[ScheduledCheck], now: float) -> FirstRunPlan:
    """First-run times of checks added together at ``now``, earliest first."""
    window = start_window(len(entries))
    plan = [(entry.plan_first_run(now, window), entry) for entry in entries]
    plan.sort(key=lambda item: item[0])
    return plan


class Scheduler:
    def __init__(
        self,
        store: StatusStore,
        metrics: Metrics,
        on_result: Callable[[CheckResult], None],
        config: SchedulerConfig,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._on_result = on_result
        self._checks: dict[str, ScheduledCheck] = {}
        self._runs: set[asyncio.Task[None]] = set()  # every run task of ours not finished
        self._probing: set[asyncio.Task[None]] = set()  # those past the semaphores, probing
        self._aps = AsyncIOScheduler(timezone=UTC)
        self._aps.add_listener(self._on_skipped, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        self._global = asyncio.Semaphore(config.max_concurrency)
        self._per_type: dict[str, asyncio.Semaphore] = {}
        self._type_limits: dict[str, int] = dict(config.per_probe_type)
        self._stopping = False
        self._started = False
        self._arrivals: list[ScheduledCheck] = []  # added, first run not planned yet
        self._planning_soon = False
        self._feeders: set[asyncio.Task[None]] = set()
        self._launch_job = self._launch  # one bound method shared by every job

    @property
    def checks(self) -> Mapping[str, ScheduledCheck]:
        return self._checks

    def start(self) -> None:
        self._aps.start()
        self._started = True
        self._plan_arrivals()

    def alive(self) -> bool:
        return bool(self._aps.running) and not self._stopping

    def configure_limits(self, config: SchedulerConfig) -> None:
        """Apply new limits; semaphores are rebuilt, runs holding old ones finish normally."""
        self._global = asyncio.Semaphore(config.max_concurrency)
        self._type_limits = dict(config.per_probe_type)
        self._per_type.clear()

    def add(self, handle: ProbeHandle, fingerprint: object) -> None:
        """Schedule a check. Its first run is planned with the others added at the same time:
        at start(), or, once started, as soon as the caller yields to the event loop (a reload
        adds all its checks in one go, so they share one start window)."""
        name = handle.info.name
        interval = handle.context.interval
        if name in self._checks:  # replaced in place: the old schedule goes first
            self.remove(name)
        entry = ScheduledCheck(name, handle, interval, stable_offset(name, interval), fingerprint)
        self._checks[name] = entry
        self._arrivals.append(entry)
        if self._started and not self._planning_soon:
            self._planning_soon = True
            asyncio.get_running_loop().call_soon(self._plan_arrivals)

    def _plan_arrivals(self) -> None:
        self._planning_soon = False
        batch = [entry for entry in self._arrivals if self._checks.get(entry.name) is entry]
        self._arrivals = []
        if not batch or self._stopping:
            return
        plan = plan_first_runs(batch, time.time())
        fed = self._feed(plan, 0)
        if fed < len(plan):
            feeder = asyncio.create_task(self._feed_later(plan, fed), name="alivemcp-feed")
            self._feeders.add(feeder)
            feeder.add_done_callback(self._feeders.discard)

    async def _feed_later(self, plan: FirstRunPlan, fed: int) -> None:
        while fed < len(plan):
            due_in = plan[fed][0] - FEED_AHEAD - time.time()
            await asyncio.sleep(max(FEED_STEP, due_in))
            fed = self._feed(plan, fed)
        # These jobs were made after the daemon moved its long-lived objects out of the
        # collector's reach (gc.freeze): at 50,000 checks they would add a tenth of a second to
        # every full collection. Freeze them too, after clearing the young garbage; a full
        # collection first would pause the loop for most of a second, and leave frozen at most
        # the cycles already waiting for one.
        gc.collect(1)
        gc.freeze()

    def _feed(self, plan: FirstRunPlan, fed: int) -> int:
        """Hand APScheduler the planned checks whose first run is less than ``FEED_AHEAD``
        away; returns how many of ``plan`` it has now."""
        if self._stopping:
            return len(plan)
        horizon = time.time() + FEED_AHEAD
        # Paused while adding, APScheduler recomputes its next wake-up once for the lot
        # instead of once per job (each add would schedule a pass over the due jobs).
        pause = self._aps.state == STATE_RUNNING
        if pause:
            self._aps.pause()
        try:
            while fed < len(plan) and plan[fed][0] <= horizon:
                first_run, entry = plan[fed]
                fed += 1
                if self._checks.get(entry.name) is entry:
                    self._add_job(entry, first_run)
        finally:
            if pause:
                self._aps.resume()
        return fed

    def _add_job(self, entry: ScheduledCheck, first_run: float) -> None:
        self._aps.add_job(
            self._launch_job,
            entry,
            args=[entry.name],
            id=entry.name,
            name=entry.name,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(entry.interval / 2)),
            replace_existing=True,
            next_run_time=datetime.fromtimestamp(first_run, UTC),
        )

    def remove(self, name: str) -> ScheduledCheck | None:
        entry = self._checks.pop(name, None)
        if entry is not None and self._aps.get_job(name) is not None:
            self._aps.remove_job(name)
        return entry

    async def cancel_runs(self, names: Collection[str], timeout: float = 2.0) -> int:
        """Cancel the runs in flight of ``names`` (already removed) and wait up to ``timeout``
        for them to unwind; their results are dropped. Cluster mode calls it when a shard is
        revoked, so that a check stops being probed here before another replica takes it.
        Returns how many runs were cancelled."""
        doomed = {run for run in self._runs if _check_name(run) in names}
        for run in doomed:
            run.cancel()
        if doomed:
            await asyncio.wait(doomed, timeout=timeout)
        return len(doomed)

    async def _launch(self, name: str) -> None:
        """APScheduler's job: run the check in a task of our own and wait for it.

        While the job waits, APScheduler counts the check as running (``max_instances=1``: no
        overlap). The shield keeps APScheduler's shutdown from cancelling the run itself.
        """
        if self._stopping:
            return
        run = asyncio.create_task(self._run(name), name=f"alivemcp-run:{name}")
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        try:
            await asyncio.shield(run)
        except asyncio.CancelledError:
            if not self._stopping:
                run.cancel()
                raise
            # APScheduler is shutting down: the run goes on under stop()'s grace period.

    async def _run(self, name: str) -> None:
        entry = self._checks.get(name)
        if entry is None or self._stopping:
            return
        task = asyncio.current_task()
        assert task is not None
        try:
            planned = entry.planned_before(time.time())
            probe_type = entry.handle.info.probe_type
            async with self._global, self._type_semaphore(probe_type):
                if self._stopping:  # got the slot while stopping: too late to begin
                    return
                self._probing.add(task)  # type: ignore[arg-type]
                self._store.mark_in_flight(name)
                self._metrics.lateness.observe(max(0.0, time.time() - planned))
                self._metrics.in_flight.inc()
                try:
                    result = await entry.handle.run(planned)
                finally:
                    self._metrics.in_flight.dec()
            if self._checks.get(name) is entry:
                self._on_result(result)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # Stopping: a run still waiting for a slot is dropped, one past the grace abandoned.
        except Exception:  # the engine itself failed: never let it kill the job
            log.exception("check run failed in the engine", check=name)
        finally:
            self._probing.discard(task)  # type: ignore[arg-type]

    def _type_semaphore(self, probe_type: str) -> asyncio.Semaphore | _NoLimit:
        sem = self._per_type.get(probe_type)
        if sem is None:
            limit = self._type_limits.get(probe_type)
            if limit is None:
                handle_limit = self._class_limit(probe_type)
                if handle_limit is None:
                    return _NO_LIMIT
                limit = handle_limit
            sem = self._per_type[probe_type] = asyncio.Semaphore(limit)
        return sem

    def _class_limit(self, probe_type: str) -> int | None:
        for entry in self._checks.values():
            if entry.handle.info.probe_type == probe_type:
                return type(entry.handle.probe).max_concurrency
        return None

    def _on_skipped(self, event: JobExecutionEvent) -> None:
        reason = "overlap" if event.code == EVENT_JOB_MAX_INSTANCES else "missed"
        self._metrics.skipped.labels(reason=reason).inc()

    async def stop(self, grace: float) -> None:
        """Stop scheduling; runs already probing get ``grace`` seconds to finish and record
        their result, runs still waiting for a concurrency slot are dropped, and whatever is
        left at the end of the grace is cancelled."""
        self._stopping = True
        for feeder in self._feeders:
            feeder.cancel()
        # Job tasks APScheduler queued but never started are cancelled by its shutdown and it
        # logs each as "Error running job": expected at shutdown, not worth a traceback.
        logging.getLogger("apscheduler.executors").setLevel(logging.CRITICAL)
        if self._aps.running:
            self._aps.shutdown(wait=False)
        for run in self._runs - self._probing:
            run.cancel()
        if self._probing:
            log.info("waiting for runs in flight", runs=len(self._probing),
                     grace_seconds=grace)
            await asyncio.wait(set(self._probing), timeout=grace)
        if self._probing:
            log.warning("runs cancelled at the end of the shutdown grace",
                        checks=sorted(_check_name(t) for t in self._probing)[:20],
                        count=len(self._probing))
        leftover = set(self._runs)
        for run in leftover:
            run.cancel()
        if leftover:
            await asyncio.wait(leftover, timeout=2)


def _check_name(task: asyncio.Task[None]) -> str:
    return task.get_name().removeprefix("alivemcp-run:")


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_LIMIT = _NoLimit()
