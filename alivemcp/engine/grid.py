"""Where a check's runs fall in time: its grid, its first run, where it resumes.

A check runs on its own grid, ``offset + k * interval`` in Unix time, the offset a stable
hash of its name (the same moments in every process); a batch of checks added together gets
first runs spread over a start window; a check scheduled again (a reload that kept it, a
cluster shard handed back or gained) resumes where its runs were planned. The rules are told
whole in :mod:`alivemcp.engine.scheduler`, which keeps the timer heap these entries sit on.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from alivemcp.engine.runner import ProbeHandle, ProbeRun

if TYPE_CHECKING:
    from alivemcp.engine.slots import Slots

__all__ = [
    "FIRST_RUNS_PER_SECOND",
    "MIN_MISFIRE_GRACE",
    "MIN_START_WINDOW",
    "FirstRunPlan",
    "ScheduledCheck",
    "plan_first_runs",
    "stable_offset",
    "start_fraction",
    "start_window",
]

FIRST_RUNS_PER_SECOND = 1000.0  # how fast a batch of new checks gets its first runs
MIN_START_WINDOW = 2.0  # seconds: a few checks still spread a little
#: How late a planned run may start (beyond this it is counted as missed): half an interval,
#: at least this many seconds.
MIN_MISFIRE_GRACE = 1.0


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
class ScheduledCheck:
    """A check on the scheduler, with its place on the timer heap and its run in flight."""

    name: str
    handle: ProbeHandle
    interval: float
    offset: float
    fingerprint: object
    #: Its key on the timer heap (unique for the scheduler's life).
    key: int = 0
    first_run: float | None = None  # an extra first run off the grid, when one was planned
    #: The next planned run (its key on the heap); 0 before planning, -1 once removed.
    due: float = 0.0
    #: While a run is in flight: the probe's run once it probes, or the task waiting for slots.
    run: ProbeRun | None = field(default=None, repr=False)
    waiter: asyncio.Task[None] | None = field(default=None, repr=False)
    #: The limits whose slots the run in flight holds (released when it ends).
    slots: tuple[Slots, ...] = field(default=(), repr=False)
    #: The host this check's runs count against, and how many runs at once it allows (a
    #: discovered check: thousands of registry entries share a few hosting providers).
    host: tuple[str, int] | None = None

    def grid_at_or_after(self, moment: float) -> float:
        """The check's first grid point at or after ``moment``."""
        return moment + ((self.offset - moment) % self.interval)

    def next_after(self, previous_run: float) -> float:
        """The run after one planned at ``previous_run``: the first grid point at least half an
        interval later (the next grid point when the previous run was on the grid)."""
        return self.grid_at_or_after(previous_run + self.interval / 2)

    def resumed_at(
        self, now: float, *, next_run: float | None = None, last_run: float | None = None
    ) -> float | None:
        """The first planned run of a check scheduled again at ``now`` (None: planned like a
        new check).

        ``next_run``: its next planned run where it was unscheduled a moment ago (a cluster's
        shard handed straight back): kept, also when it passed meanwhile, as long as the
        scheduler would still start it that late (the misfire grace): it runs at once, as a
        run the loop was late for would; past the grace, its next grid point. Runs planned
        before it were started there, so none is started twice.
        ``last_run``: when its latest run started in another process (its previous owner):
        its first grid point at least half an interval after that run, if still to come;
        None if it passed (that owner may have started a run there that left no result)."""
        if next_run is not None:
            if now - next_run <= max(MIN_MISFIRE_GRACE, self.interval / 2):
                return next_run
            return self.grid_at_or_after(now)
        if last_run is not None:
            point = self.next_after(min(last_run, now))
            if point >= now:
                return point
        return None

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

    def latest_due(self, due: float, now: float) -> float:
        """The latest planned point at or before ``now``, from ``due`` on (points the loop was
        too late for are coalesced into it)."""
        if now - due < self.interval / 2:
            return due
        grid = now - ((now - self.offset) % self.interval)
        return max(grid, due)

    def planned_before(self, now: float) -> float:
        """The planned time of a run starting at ``now``: the latest scheduled point at or
        before ``now``, the extra first run included."""
        grid = now - ((now - self.offset) % self.interval)
        first = self.first_run
        if first is not None and first <= now and grid < first + self.interval / 2:
            return first
        return grid


FirstRunPlan = list[tuple[float, ScheduledCheck]]  # (first run, check), earliest first


def plan_first_runs(
    entries: list[ScheduledCheck], now: float, window: float | None = None
) -> FirstRunPlan:
    """First-run times of checks added together at ``now``, earliest first; ``window``: the
    start window of the whole batch, when ``entries`` are a slice of it."""
    if window is None:
        window = start_window(len(entries))
    plan = [(entry.plan_first_run(now, window), entry) for entry in entries]
    plan.sort(key=lambda item: item[0])
    return plan
