"""Fixed-rate scheduling of checks on APScheduler, with stable spreading and concurrency limits.

Each check is an APScheduler interval job anchored on its own stable offset within the
interval (a hash of its name), so checks that share an interval are spread evenly and stay on
their grid: APScheduler's ``jitter`` only ever delays and accumulates drift. ``max_instances=1``
means a check never overlaps itself; a global semaphore and per-probe-type semaphores keep slow
probe types from starving fast ones.
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
        self._running: set[asyncio.Task[None]] = set()
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
            self._run,
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

    async def _run(self, name: str) -> None:
        entry = self._checks.get(name)
        if entry is None or self._stopping:
            return
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)  # type: ignore[arg-type]
        try:
            planned = entry.planned_before(time.time())
            probe_type = entry.handle.info.probe_type
            async with self._global, self._type_semaphore(probe_type):
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
            # Shutting down past the grace period: the run is abandoned on purpose.
        except Exception:  # the engine itself failed: never let it kill the job
            log.exception("check run failed in the engine", check=name)
        finally:
            self._running.discard(task)  # type: ignore[arg-type]

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
        """Stop scheduling, give in-flight runs ``grace`` seconds, then cancel the rest."""
        self._stopping = True
        # Runs still queued in APScheduler's executor are cancelled when the loop closes; it
        # logs each as "Error running job": expected at shutdown, so not worth a traceback.
        logging.getLogger("apscheduler.executors").setLevel(logging.CRITICAL)
        if self._aps.running:
            self._aps.shutdown(wait=False)
        if self._running:
            _, pending = await asyncio.wait(set(self._running), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_LIMIT = _NoLimit()
