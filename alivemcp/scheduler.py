"""Fixed-rate scheduling of checks on APScheduler, with stable spreading and concurrency limits.

Each check is an APScheduler interval job anchored on its own stable offset within the
interval (a hash of its name), so checks that share an interval are spread evenly and stay on
their grid: APScheduler's ``jitter`` only ever delays and accumulates drift. ``max_instances=1``
means a check never overlaps itself; a global semaphore and per-probe-type semaphores keep slow
probe types from starving fast ones.

Shutdown: APScheduler's asyncio executor cancels every job task it still holds when it shuts
down, and cannot wait for them. So a job only launches the run in a task the scheduler owns and
waits for it through ``asyncio.shield``: stopping APScheduler then drops the runs that had not
begun probing, while runs already probing get the shutdown grace to finish and record their
result.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from alivemcp.config import SchedulerConfig
from alivemcp.metrics import Metrics
from alivemcp.results import CheckResult
from alivemcp.runner import ProbeHandle
from alivemcp.status import StatusStore

__all__ = ["ScheduledCheck", "Scheduler", "stable_offset"]

log = structlog.get_logger("alivemcp.scheduler")


def stable_offset(name: str, interval: float) -> float:
    """Where in its interval a check runs: the same for a name in every process."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * interval


@dataclass(slots=True)
class ScheduledCheck:
    handle: ProbeHandle
    interval: float
    offset: float
    fingerprint: object

    def planned_before(self, now: float) -> float:
        """The latest grid point at or before ``now``."""
        return now - ((now - self.offset) % self.interval)


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

    @property
    def checks(self) -> Mapping[str, ScheduledCheck]:
        return self._checks

    def start(self) -> None:
        self._aps.start()

    def alive(self) -> bool:
        return bool(self._aps.running) and not self._stopping

    def configure_limits(self, config: SchedulerConfig) -> None:
        """Apply new limits; semaphores are rebuilt, runs holding old ones finish normally."""
        self._global = asyncio.Semaphore(config.max_concurrency)
        self._type_limits = dict(config.per_probe_type)
        self._per_type.clear()

    def add(self, handle: ProbeHandle, fingerprint: object) -> None:
        name = handle.info.name
        interval = handle.context.interval
        offset = stable_offset(name, interval)
        entry = ScheduledCheck(handle, interval, offset, fingerprint)
        self._checks[name] = entry
        # Anchor the grid on a point in the past: APScheduler computes the first run as the next
        # grid point after the moment the job really enters its store (at start(), for jobs
        # added before), so a slow start never makes the first runs late.
        anchor = entry.planned_before(time.time())
        self._aps.add_job(
            self._launch,
            IntervalTrigger(
                seconds=interval, start_date=datetime.fromtimestamp(anchor, UTC), timezone=UTC
            ),
            args=[name],
            id=name,
            name=name,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval / 2)),
            replace_existing=True,
        )

    def remove(self, name: str) -> ScheduledCheck | None:
        entry = self._checks.pop(name, None)
        if entry is not None and self._aps.get_job(name) is not None:
            self._aps.remove_job(name)
        return entry

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
