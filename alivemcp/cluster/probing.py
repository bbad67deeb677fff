"""Probing as a shard listener: the scheduler holds exactly the checks of the shards held.

``on_revoked`` takes the shards' checks off the scheduler and cancels their runs in flight
(waiting for them to unwind) before it returns, so the node tells Kafka it is done only once
nothing of those shards is probed here. Their results are dropped: the scheduler records a
result only for a check it still schedules.

The removed probe instances are parked rather than torn down: the group's rebalances are
eager (every shard is revoked from every replica, then assigned again, mostly to the same
replica), so an instance is usually wanted back a moment later, with its clients and set-up.
Parked instances the next assignment does not take back are retired (torn down: canary
clean-up) in the background, as a reload retires replaced checks.

A gained shard's checks are scheduled after ``before_probing`` (the daemon's: the view reads
the shard's results up to their end, bounded; skipped for a shard that comes straight back) so
that ``last_run`` knows the previous owner's last runs: a check that ran before resumes on its
grid (:meth:`Scheduler.add`). A check whose shard comes straight back resumes where it left off
(its next planned run then): a grid point that passed during the rebalance runs late rather
than not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from alivemcp.config import ResolvedCheck
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.scheduler import Scheduler

__all__ = ["ProbingListener"]

log = structlog.get_logger("alivemcp.cluster")

#: How long a revoke waits for cancelled runs to unwind (a probe gets 1 s after its cancel).
CANCEL_TIMEOUT_SECONDS = 2.0


class ProbingListener:
    """Schedules the configured checks of the shards held; a ShardListener."""

    name = "probing"

    def __init__(
        self,
        scheduler: Scheduler,
        shard_of: Callable[[str], int],
        checks: Callable[[], Sequence[ResolvedCheck]],
        build: Callable[[ResolvedCheck], ProbeHandle],
        retire: Callable[[list[ProbeHandle]], None],
        *,
        cancel_timeout: float = CANCEL_TIMEOUT_SECONDS,
        last_run: Callable[[str], float | None] = lambda name: None,
        before_probing: Callable[[frozenset[int]], Awaitable[object]] | None = None,
        probed_here: Callable[[ResolvedCheck], bool] = lambda check: True,
        returning: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        """``checks``: the configured checks (all of them; the current config after a
        reload). ``build``: a new probe instance for a check. ``retire``: tear instances
        down in the background. ``last_run``: when a check's latest known run started (unix
        time), None if none is known. ``before_probing``: awaited with the gained shards
        before their checks are scheduled (it must bound its own wait: it runs inside the
        group's rebalance); its failure is logged and the checks are scheduled anyway.
        ``probed_here``: whether this replica's location probes a check (its ``locations``).
        ``returning``: the shards being assigned that this replica held right up to the
        rebalance (the node's: nobody else probed them meanwhile)."""
        self._scheduler = scheduler
        self._shard_of = shard_of
        self._checks = checks
        self._build = build
        self._retire = retire
        self._cancel_timeout = cancel_timeout
        self._last_run = last_run
        self._before_probing = before_probing
        self._probed_here = probed_here
        self._returning = returning
        self.held: frozenset[int] = frozenset()
        #: Instances taken off the scheduler by a revoke, by check: (handle, fingerprint,
        #: its next planned run then, None if none was planned).
        self._parked: dict[str, tuple[ProbeHandle, object, float | None]] = {}

    def owns(self, name: str) -> bool:
        return self._shard_of(name) in self.held

    async def on_assigned(self, shards: frozenset[int]) -> None:
        if self._before_probing is not None:
            try:
                await self._before_probing(shards)
            except Exception as exc:  # the shards are probed all the same
                log.warning(
                    "before probing gained shards: failed",
                    error=f"{type(exc).__name__}: {exc}",
                    shards=len(shards),
                )
        self.held = self.held | shards
        returning = self._returning()
        added = 0
        for check in self._checks():
            name = check.name
            if (
                name in self._scheduler.checks
                or self._shard_of(name) not in shards
                or not self._probed_here(check)
            ):
                continue
            fingerprint = check.fingerprint()
            parked = self._parked.pop(name, None)
            next_run: float | None = None
            if parked is not None and parked[1] == fingerprint:
                handle = parked[0]
                if self._shard_of(name) in returning:
                    next_run = parked[2]
            else:
                if parked is not None:
                    self._retire([parked[0]])
                handle = self._build(check)
            # A check that ran before resumes on its grid, with no extra run for the rebalance.
            # Handed straight back, where it left off: a point that passed during the rebalance
            # runs late, not never. From another owner: after its last known run.
            if next_run is not None:
                self._scheduler.add(handle, fingerprint, next_run=next_run)
            else:
                self._scheduler.add(handle, fingerprint, last_run=self._last_run(name))
            added += 1
        self.retire_parked()
        log.info("probing shards", shards=len(shards), checks=added)

    async def on_revoked(self, shards: frozenset[int]) -> None:
        self.held = self.held - shards
        names = [name for name in self._scheduler.checks if self._shard_of(name) in shards]
        for name in names:
            planned = self._scheduler.checks[name].due  # -1 once removed
            entry = self._scheduler.remove(name)
            if entry is not None:
                next_run = planned if planned > 0 else None
                self._parked[name] = (entry.handle, entry.fingerprint, next_run)
        cancelled = await self._scheduler.cancel_runs(set(names), self._cancel_timeout)
        log.info(
            "stopped probing shards",
            shards=len(shards),
            checks=len(names),
            runs_cancelled=cancelled,
        )

    def retire_parked(self) -> None:
        """Tear down the parked instances (the shards did not come back)."""
        if self._parked:
            handles = [parked[0] for parked in self._parked.values()]
            self._parked.clear()
            self._retire(handles)

    def parked(self) -> list[ProbeHandle]:
        """Parked instances, for the daemon's shutdown teardown (emptied)."""
        handles = [parked[0] for parked in self._parked.values()]
        self._parked.clear()
        return handles
