"""What applying a config builds before anything running changes.

Applying a config (start-up, a reload) has two parts. This module is the first: for each check
of the new config, in order, the running check it keeps (with that check's info) or the new
check's info, and a probe instance for each check this process will schedule that is not
scheduled as it is now. Nothing running changes here, so a reload refused or cancelled part-way
just drops the plan. The daemon's switch (:meth:`alivemcp.daemon.Daemon._apply`) then makes the
scheduler, the status store and history match it in one go.

The plan takes the checks a slice at a time, in the order of the config, as they become known:
a reload loaded in a child process (:mod:`alivemcp.configload`) hands it each frame of checks
as it is unpickled, so on two or more cores the daemon builds while the child is still
digesting and pickling the rest (at 100,000 changed checks the daemon's building took about
2 s after the last frame before). A load in a thread hands it every check at the end.

What is kept stays as it was in memory: the status entry, the alerting entry and the kept
/metrics lines follow the info, so a reload that changes a few of 100,000 checks rebuilds a few
of each, not 100,000 (whose replaced objects stayed in the heap as holes: 93 MB after a reload
of 100,000 checks that changed nothing). A config loaded in a child holds the running objects
already; one loaded in a thread is small, and its copies of kept checks are freed with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from alivemcp.checks import check_info
from alivemcp.config import ResolvedCheck
from alivemcp.results import CheckInfo
from alivemcp.runner import ProbeHandle
from alivemcp.scheduler import ScheduledCheck

__all__ = ["ApplyPlan"]


class ApplyPlan:
    """The new config's checks (kept ones replaced by the running objects), their infos, and
    the probe instances built for them (``fresh``: name -> handle and fingerprint).

    ``running`` and ``running_infos``: the config in use and its infos, position for position.
    ``scheduled``: the scheduler's live mapping, read as each check is added (in cluster mode a
    rebalance may change it meanwhile; the switch goes by what is scheduled at its own time and
    builds what is missing then). ``probed``: whether this process schedules a check (None:
    every check). ``build``: a check's probe instance, given its info."""

    __slots__ = ("_build", "_position", "_probed", "_running", "_running_infos", "_scheduled",
                 "_slice", "checks", "fresh", "infos")

    def __init__(self, running: Sequence[ResolvedCheck], running_infos: Sequence[CheckInfo],
                 scheduled: Mapping[str, ScheduledCheck],
                 probed: Callable[[str], bool] | None,
                 build: Callable[[ResolvedCheck, CheckInfo], ProbeHandle],
                 slice_size: int) -> None:
        if len(running) != len(running_infos):
            raise ValueError("running checks and their infos differ in number")
        self._running = running
        self._running_infos = running_infos
        self._scheduled = scheduled
        self._probed = probed
        self._build = build
        self._slice = slice_size
        self._position: dict[str, int] | None = None
        self.checks: list[ResolvedCheck] = []
        self.infos: list[CheckInfo] = []
        self.fresh: dict[str, tuple[ProbeHandle, bytes]] = {}

    async def add(self, checks: Sequence[ResolvedCheck]) -> None:
        """The next checks of the new config, in order; lets the loop run every slice."""
        running, infos = self._running, self._running_infos
        for check in checks:
            i = len(self.checks)
            # Most reloads keep the checks' order; the running check's position by name is
            # looked up only when it did not (built a slice at a time: in one go, a dict of
            # 100,000 names held the loop 80 ms).
            at: int | None = i
            if i >= len(running) or running[i].name != check.name:
                at = (await self._positions()).get(check.name)
            if at is not None and running[at].same_as(check):
                check, info = running[at], infos[at]
            else:
                info = check_info(check)
            self.checks.append(check)
            self.infos.append(info)
            name = check.name
            if self._probed is None or self._probed(name):
                entry = self._scheduled.get(name)
                if entry is None or entry.fingerprint != check.fingerprint():
                    self.fresh[name] = (self._build(check, info), check.fingerprint())
            if len(self.checks) % self._slice == 0:
                await asyncio.sleep(0)

    async def _positions(self) -> dict[str, int]:
        if self._position is None:
            position: dict[str, int] = {}
            for j, running in enumerate(self._running):
                position[running.name] = j
                if j % self._slice == self._slice - 1:
                    await asyncio.sleep(0)
            self._position = position
        return self._position
