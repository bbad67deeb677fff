"""Fixed-rate scheduling of checks on one timer heap, with stable spreading and concurrency
limits.

Steady state: each check runs on its own grid, ``offset + k * interval`` in Unix time, where the
offset is a hash of its name. Checks that share an interval are spread evenly, and a check runs
at the same moments in every process (restarts, replicas). A check never overlaps itself: a
planned run that comes while the previous one is still in flight (waiting for a slot or
probing) is skipped and counted (``alivemcp_scheduler_skipped_runs_total{reason="overlap"}``).
A global limit and per-probe-type limits keep slow probe types from starving fast ones; a run
takes its type's slot first, then a global one, so runs queued behind a slow type hold no
global slot.

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
is still probing when its new first run comes skips that first run (never two runs of a name
at once) and rejoins its grid as above; an old run still waiting for a slot is dropped.

Timing: every check's next planned run is one entry of a heap ordered by time, and one loop
timer is armed for the earliest. When the loop was held up past several of a check's points,
they are coalesced into the latest; one more than half an interval (at least 1 s) late is not
run at all (``reason="missed"``). A run is one task and one timer (:meth:`ProbeHandle.start`):
no job objects, no coroutine of the scheduler's own around it, no per-run dates.

Garbage collection: while a scheduler runs, it keeps a
:class:`~alivemcp.hygiene.collector.CollectorPolicy` started (full collections from a timer,
not from CPython's growth rule; young ones every few tens of milliseconds), and settles what a
batch of first runs made; the rules and their measurements are in that module.

Shutdown: runs still waiting for a slot are dropped, runs already probing get the shutdown grace
to finish and record their result, and whatever is left at the end of the grace is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping

import structlog

from alivemcp.config import SchedulerConfig
from alivemcp.engine.grid import (
    MIN_MISFIRE_GRACE,
    ScheduledCheck,
    plan_first_runs,
    stable_offset,
    start_window,
)
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckResult
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.slots import Slots
from alivemcp.hygiene.collector import CollectorPolicy, settle_young_objects

__all__ = ["Scheduler"]

log = structlog.get_logger("alivemcp.engine.scheduler")

#: Added to each timer: the loop's timers count whole milliseconds from a clock read in whole
#: milliseconds, so without it a wake-up can come up to a millisecond early (a run must never
#: start before its planned time: it would be off its grid).
TIMER_MARGIN_MS = 1
#: Runs started in one wake-up at most; the rest follow after the loop's other callbacks, so a
#: burst of due runs (after a stall) never holds the loop for long.
STARTS_PER_WAKE = 200
#: Seconds after a batch's last first run when what the first runs created is frozen.
SETTLE_AFTER_FIRST_RUNS = 2.0
#: First runs planned in one turn of the loop (about 10 ms of hashing).
PLAN_SLICE = 5000


class Scheduler:
    def __init__(
        self,
        on_start: Callable[[str], None],
        metrics: SchedulerMetrics,
        on_result: Callable[[CheckResult], None],
        config: SchedulerConfig,
    ) -> None:
        #: Told the name of each check whose run begins (the status store's in-flight mark).
        self._on_start = on_start
        self.metrics = metrics
        self._on_result = on_result
        self._checks: dict[str, ScheduledCheck] = {}
        #: (planned time, key): the next run of every check, earliest first; ``_keyed`` gives
        #: the check of a key. A removed or replanned check's old entry stays until it comes
        #: up, and is skipped. Two numbers and no reference to the check: the collector stops
        #: tracking such a tuple at its first pass, so the one pushed for each run never
        #: reaches the old generation (with the check in it, it was one more object a run for
        #: every collection to walk).
        self._heap: list[tuple[float, int]] = []
        self._keyed: dict[int, ScheduledCheck] = {}
        self._stale = 0  # heap entries known to be skipped when they come up
        self._sequence = itertools.count()
        self._collector: CollectorPolicy | None = None
        #: The pending freeze of what the last batch's first runs made (see
        #: settle_young_objects); cancelled when the scheduler stops, so a stopped scheduler
        #: never freezes the process's objects later.
        self._settle: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        #: name -> the check whose run is in flight (of a check since removed or replaced too:
        #: a name never has two runs at once).
        self._busy: dict[str, ScheduledCheck] = {}
        self._probing = 0  # runs past their slots, probing
        self._global = Slots(config.max_concurrency)
        self._per_type: dict[str, Slots | None] = {}
        #: Per (host, limit) (see ScheduledCheck.host): made on the host's first run and kept
        #: (a few dozen bytes a host). Keyed with the limit too, so a changed limit takes effect.
        self._per_host: dict[tuple[str, int], Slots] = {}
        self._type_limits: dict[str, int] = dict(config.per_probe_type)
        self._stopping = False
        self._started = False
        self._arrivals: list[ScheduledCheck] = []  # added, first run not planned yet
        #: Arrivals that ran before: (next_run, last_run) (see add()).
        self._resuming: dict[ScheduledCheck, tuple[float | None, float | None]] = {}
        self._planning_soon = False
        self._batching = 0  # batch() blocks open
        self._idle_waiters: list[tuple[set[str] | None, asyncio.Future[None]]] = []
        metrics.in_flight.set_function(lambda: self._probing)

    @property
    def unplanned(self) -> int:
        """Checks added whose first run is not planned yet (planning runs soon after an add,
        or when a batch ends, a slice per loop turn)."""
        return len(self._arrivals)

    @property
    def checks(self) -> Mapping[str, ScheduledCheck]:
        return self._checks

    def start(self) -> None:
        self._started = True
        if self._collector is None:
            self._collector = CollectorPolicy()
            self._collector.start(asyncio.get_running_loop())
        self._plan_arrivals()

    def alive(self) -> bool:
        return self._started and not self._stopping

    def configure_limits(self, config: SchedulerConfig) -> None:
        """Apply new limits; runs holding slots of the old ones finish normally."""
        self._global = Slots(config.max_concurrency)
        self._type_limits = dict(config.per_probe_type)
        self._per_type.clear()

    def add(
        self,
        handle: ProbeHandle,
        fingerprint: object,
        *,
        next_run: float | None = None,
        last_run: float | None = None,
        host: tuple[str, int] | None = None,
    ) -> None:
        """Schedule a check. Its first run is planned with the others added at the same time:
        at start(), or, once started, as soon as the caller yields to the event loop (a reload
        adds all its checks in one go, so they share one start window). ``next_run`` (where it
        was unscheduled a moment ago) or ``last_run`` (when its latest run started elsewhere):
        a check that ran before resumes on its grid, with no early first run (see
        :meth:`ScheduledCheck.resumed_at`). ``host``: (host,
        limit): at most ``limit`` runs at once of the checks that name this host (a discovered
        check's own, from its source's ``max_per_host``, when not given)."""
        name = handle.info.name
        interval = handle.context.interval
        if name in self._checks:  # replaced in place: the old schedule goes first
            self.remove(name)
        origin = handle.info.discovered
        if host is None and origin is not None and origin.max_per_host is not None:
            host = (origin.host, origin.max_per_host)
        entry = ScheduledCheck(
            name,
            handle,
            interval,
            stable_offset(name, interval),
            fingerprint,
            key=next(self._sequence),
            host=host,
        )
        self._checks[name] = entry
        self._arrivals.append(entry)
        if next_run is not None or last_run is not None:
            self._resuming[entry] = (next_run, last_run)
        if self._started and not self._planning_soon and not self._batching:
            self._planning_soon = True
            asyncio.get_running_loop().call_soon(self._plan_arrivals)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Checks added inside share one start window even if the caller yields to the event
        loop in between (a reload adds 100,000 checks in slices): their first runs are planned
        together when the batch ends."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching and self._arrivals and self._started and not self._planning_soon:
                self._planning_soon = True
                asyncio.get_running_loop().call_soon(self._plan_arrivals)

    def remove(self, name: str) -> ScheduledCheck | None:
        """Unschedule a check. A run of it already probing goes on; its result is dropped. A
        run still waiting for a slot is dropped: it would probe a target that is no longer
        checked (a discovered one gone from its source, or moved), and hold its name busy."""
        entry = self._checks.pop(name, None)
        if entry is not None:
            if entry.due > 0:
                self._stale += 1
            entry.due = -1.0
            self._keyed.pop(entry.key, None)
            if entry.waiter is not None:
                entry.waiter.cancel()
        return entry

    def _plan_arrivals(self) -> None:
        self._planning_soon = False
        # Arrivals removed (or replaced) since are skipped a slice at a time by _plan_slice:
        # filtered here in one go, 100,000 of them held the loop for 10 ms.
        batch, self._arrivals = self._arrivals, []
        resuming, self._resuming = self._resuming, {}
        if not batch or self._stopping:
            return
        heap = self._heap
        keyed = self._keyed
        if self._stale > max(1000, len(heap) // 2):
            # A reload replaced many checks: drop their entries now rather than one by one.
            # Rebuilt from the live entries (each has exactly one entry on the heap, its due):
            # as many as are still planned, not as many as the heap holds (after a reload
            # that replaced every check, none: filtering 100,000 stale ones took 30 ms).
            heap[:] = [(entry.due, key) for key, entry in keyed.items()]
            heapq.heapify(heap)
            self._stale = 0
        now = time.time()
        resumed: dict[ScheduledCheck, float] = {}
        for entry, (next_run, last_run) in resuming.items():
            if self._checks.get(entry.name) is not entry:
                continue  # removed (or replaced) since it arrived
            at = entry.resumed_at(now, next_run=next_run, last_run=last_run)
            if at is not None:
                resumed[entry] = at
        window = start_window(len(batch) - len(resumed))
        self._plan_slice(batch, resumed, now, window, 0, now)

    def _plan_slice(
        self,
        batch: list[ScheduledCheck],
        resumed: dict[ScheduledCheck, float],
        now: float,
        window: float,
        start: int,
        latest: float,
    ) -> None:
        """Plan the first runs of ``batch[start:start + PLAN_SLICE]``, then of the rest in
        later turns of the loop: at 100,000 checks planning them in one callback (a salted hash
        of each name) held the loop for a quarter of a second on every full reload. Each
        check's first run depends on itself and the batch's window alone; a check of a later
        slice whose first run falls in the few milliseconds before its slice is planned
        starts that much late (and its lateness says so)."""
        if self._stopping:
            return
        heap = self._heap
        keyed = self._keyed
        checks = self._checks
        live = [
            entry
            for entry in batch[start : start + PLAN_SLICE]
            # not removed (or replaced) since it arrived
            if checks.get(entry.name) is entry and entry.due >= 0
        ]
        plan = plan_first_runs([entry for entry in live if entry not in resumed], now, window)
        for entry in live:
            if (at := resumed.get(entry)) is not None:
                # Its own point, maybe just past (then it runs at once): a grid point, or the
                # extra first run it was given when first added (lateness counts from it).
                phase = (at - entry.offset) % entry.interval
                entry.first_run = None if min(phase, entry.interval - phase) < 1e-6 else at
                plan.append((at, entry))
        for first_run, entry in plan:
            entry.due = first_run
            keyed[entry.key] = entry
            heapq.heappush(heap, (first_run, entry.key))
            latest = max(latest, first_run)
        self._arm()
        loop = asyncio.get_running_loop()
        if start + PLAN_SLICE < len(batch):
            loop.call_soon(
                self._plan_slice, batch, resumed, now, window, start + PLAN_SLICE, latest
            )
        else:
            # One pending settle: a later batch's replaces it (it comes after both batches).
            if self._settle is not None:
                self._settle.cancel()
            self._settle = loop.call_later(
                latest - now + SETTLE_AFTER_FIRST_RUNS, settle_young_objects
            )

    def _arm(self) -> None:
        """Set the loop's timer for the earliest planned run."""
        if not self._heap or self._stopping:
            return
        due = self._heap[0][0]
        if self._timer is not None:
            if self._timer_due <= due:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_due = due
        loop.time()  # uvloop: refreshes the cached loop clock its timers count from
        delay_ms = math.ceil(max(0.0, due - time.time()) * 1000) + TIMER_MARGIN_MS
        self._timer = loop.call_later(delay_ms / 1000, self._wake)

    def _wake(self) -> None:
        """Start every run that is due (up to STARTS_PER_WAKE), plan each check's next."""
        self._timer = None
        if self._stopping:
            return
        heap = self._heap
        keyed = self._keyed
        now = time.time()
        started = 0
        while heap and heap[0][0] <= now:
            due, key = heapq.heappop(heap)
            entry = keyed.get(key)
            if entry is None or entry.due != due:  # removed, or replanned
                self._stale -= 1
                continue
            planned = entry.latest_due(due, now)
            entry.due = next_run = entry.next_after(planned)
            heapq.heappush(heap, (next_run, key))
            if now - planned > max(MIN_MISFIRE_GRACE, entry.interval / 2):
                self.metrics.skipped.labels(reason="missed").inc()
            elif entry.name in self._busy:
                self.metrics.skipped.labels(reason="overlap").inc()
            else:
                self._launch(entry, planned)
                started += 1
                if started >= STARTS_PER_WAKE:
                    loop = asyncio.get_running_loop()
                    self._timer_due = now
                    self._timer = loop.call_soon(self._wake)  # type: ignore[assignment]
                    return
        self._arm()

    def _launch(self, entry: ScheduledCheck, planned: float) -> None:
        self._busy[entry.name] = entry
        per_type = self._type_slots(entry)
        global_slots = self._global
        if entry.host is None:
            if (
                (per_type is None or per_type.free > 0)
                and global_slots.free > 0
                and not (global_slots.waiters or (per_type is not None and per_type.waiters))
            ):
                # The common case: slots free, taken at once, no task to wait in.
                if per_type is None:
                    global_slots.free -= 1
                    entry.slots = (global_slots,)
                else:
                    per_type.free -= 1
                    global_slots.free -= 1
                    entry.slots = (per_type, global_slots)
                self._begin(entry, planned)
                return
            limits: tuple[Slots, ...] = (
                (global_slots,) if per_type is None else (per_type, global_slots)
            )
        else:
            # The host's limit first: a run waiting for its host holds no global slot.
            host = self._host_slots(entry.host)
            limits = (host, global_slots) if per_type is None else (host, per_type, global_slots)
            if all(limit.free > 0 and not limit.waiters for limit in limits):
                for limit in limits:
                    limit.free -= 1
                entry.slots = limits
                self._begin(entry, planned)
                return
        entry.waiter = asyncio.get_running_loop().create_task(
            self._wait_for_slots(entry, planned, limits),
            name=f"alivemcp-slot:{entry.name}",
        )

    def _host_slots(self, host: tuple[str, int]) -> Slots:
        slots = self._per_host.get(host)
        if slots is None:
            slots = self._per_host[host] = Slots(host[1])
        return slots

    async def _wait_for_slots(
        self, entry: ScheduledCheck, planned: float, limits: tuple[Slots, ...]
    ) -> None:
        taken: list[Slots] = []
        try:
            for slots in limits:
                await slots.take()
                taken.append(slots)
        except asyncio.CancelledError:
            # Stopping (or cancel_runs): a run still waiting for a slot is dropped.
            for slots in taken:
                slots.release()
            entry.waiter = None
            self._idle(entry)
            raise
        entry.waiter = None
        entry.slots = tuple(taken)
        if self._stopping:  # got the slots while stopping: too late to begin
            self._finished(entry, None)
            return
        self._begin(entry, planned)

    def _begin(self, entry: ScheduledCheck, planned: float) -> None:
        name = entry.name
        try:
            self._on_start(name)
            self.metrics.lateness.observe(max(0.0, time.time() - planned))
            self._probing += 1
            # Bound per run, not kept on the entry: an entry holding a callable that holds the
            # entry is a reference cycle, and the daemon freezes its objects out of the
            # collector's reach, so every check a reload replaced stayed in memory for good.
            # (The run holds it only until the result is delivered.)
            entry.run = entry.handle.start(planned, functools.partial(self._finished, entry))
        except Exception:  # the engine itself failed: never let it stop the schedule
            log.exception("check run failed in the engine", check=name)
            self._probing -= 1
            for slots in entry.slots:
                slots.release()
            entry.slots = ()
            self._idle(entry)

    def _finished(self, entry: ScheduledCheck, result: CheckResult | None) -> None:
        """A run ended (``None``: cancelled, or dropped before it began)."""
        if entry.run is not None:
            entry.run = None
            self._probing -= 1
        for slots in entry.slots:
            slots.release()
        entry.slots = ()
        self._idle(entry)
        if result is not None and self._checks.get(entry.name) is entry:
            try:
                self._on_result(result)
            except Exception:  # the engine itself failed: never let it stop the schedule
                log.exception("check run failed in the engine", check=entry.name)

    def _idle(self, entry: ScheduledCheck) -> None:
        if self._busy.get(entry.name) is entry:
            del self._busy[entry.name]
        if self._idle_waiters:
            for names, waiter in self._idle_waiters:
                if names is not None:
                    names.discard(entry.name)
                if not waiter.done() and (not names if names is not None else not self._busy):
                    waiter.set_result(None)

    async def _until_idle(self, names: set[str] | None, timeout: float) -> None:
        """Wait up to ``timeout`` until no run of ``names`` (None: of any check) is in flight."""
        if (not names) if names is not None else not self._busy:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        record = (names, waiter)
        self._idle_waiters.append(record)
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            self._idle_waiters.remove(record)

    def _type_slots(self, entry: ScheduledCheck) -> Slots | None:
        probe_type = entry.handle.info.probe_type
        try:
            return self._per_type[probe_type]
        except KeyError:
            limit = self._type_limits.get(probe_type)
            if limit is None:
                limit = type(entry.handle.probe).max_concurrency
            slots = self._per_type[probe_type] = None if limit is None else Slots(limit)
            return slots

    async def cancel_runs(self, names: Collection[str], timeout: float = 2.0) -> int:
        """Cancel the runs in flight of ``names`` (already removed) and wait up to ``timeout``
        for them to unwind; their results are dropped. Cluster mode calls it when a shard is
        revoked, so that a check stops being probed here before another replica takes it.
        Returns how many runs were cancelled."""
        doomed = [entry for name, entry in self._busy.items() if name in names]
        for entry in doomed:
            self._cancel(entry)
        await self._until_idle({entry.name for entry in doomed}, timeout)
        return len(doomed)

    @staticmethod
    def _cancel(entry: ScheduledCheck) -> None:
        if entry.waiter is not None:
            entry.waiter.cancel()
        elif entry.run is not None:
            entry.run.cancel()

    async def stop(self, grace: float) -> None:
        """Stop scheduling; runs already probing get ``grace`` seconds to finish and record
        their result, runs still waiting for a concurrency slot are dropped, and whatever is
        left at the end of the grace is cancelled."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._settle is not None:
            self._settle.cancel()
            self._settle = None
        if self._collector is not None:
            self._collector.stop()
            self._collector = None
        for entry in list(self._busy.values()):
            if entry.waiter is not None:
                entry.waiter.cancel()
        await asyncio.sleep(0)  # the dropped runs unwind
        if self._busy:
            log.info("waiting for runs in flight", runs=len(self._busy), grace_seconds=grace)
            await self._until_idle(None, grace)
        if self._busy:
            log.warning(
                "runs cancelled at the end of the shutdown grace",
                checks=sorted(self._busy)[:20],
                count=len(self._busy),
            )
            for entry in list(self._busy.values()):
                self._cancel(entry)
            await self._until_idle(None, 2)
