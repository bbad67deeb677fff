"""The discovered checks the daemon runs, changed a few at a time while it runs.

A discovery source hands over its whole current set after every successful refresh
(:class:`~alivemcp.discovery.manager.DiscoveryManager`); :meth:`DiscoveredChecks.apply`
compares it with what runs and changes only the difference: checks added and removed, and
those whose definition changed (a server that moved to a new URL keeps its name, so its
status, alert state and history). Nothing goes through the reload path: no config is read,
no other check is touched, and a refresh that changes 1 % of 100,000 checks costs about a
thousand checks' work, in slices with the event loop let run in between.

A discovered check never takes the name of a hand-written one: the hand-written check runs,
and the discovered one is left out and said once in the log. A reload of the config keeps the
discovered checks (the daemon's apply reads :meth:`DiscoveredChecks.checks` beside the file's).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import structlog

from alivemcp.alerting.config import AlertPolicyOverride
from alivemcp.alerting.manager import AlertManager
from alivemcp.config import ResolvedCheck
from alivemcp.engine.checks import check_info
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.toolsurface.tracker import SurfaceTracker

__all__ = ["DiscoveredChecks", "DiscoveryParts"]

log = structlog.get_logger("alivemcp.app.discovered")

#: Checks changed between two turns of the event loop: building an mcp_endpoint check's probe
#: instance takes about 0.2 ms, so 500 held the loop ~100 ms on the first apply of 15,000
#: discovered checks (benchmarks/discovery.py); 200 keeps each turn near 40 ms.
APPLY_SLICE = 200
#: Why a removed discovered check's open incidents are resolved.
LEFT_ITS_SOURCE = "target left its discovery source"


@dataclass(frozen=True, slots=True)
class DiscoveryParts:
    """What the daemon lends: the engine's parts, and its rules of who probes what."""

    scheduler: Scheduler
    store: StatusStore
    alerts: AlertManager
    history: HistoryStore | None
    build_handle: Callable[[ResolvedCheck, CheckInfo], ProbeHandle]
    retire: Callable[[list[ProbeHandle]], None]
    #: Cluster mode: whether this replica probes the check (standalone: always).
    #: Whether this process probes a check (cluster mode: its shard held, its locations).
    probed: Callable[[ResolvedCheck], bool]
    #: The names of the hand-written checks (they win a name collision).
    configured: Callable[[], Collection[str]]
    #: Told the configured checks' counts by probe type, discovered ones included.
    counted: Callable[[Counter[str]], None]
    #: The tool-surface tracker (it forgets the checks removed).
    surfaces: SurfaceTracker | None = None


class DiscoveredChecks:
    def __init__(self, parts: DiscoveryParts) -> None:
        self._parts = parts
        self._by_source: dict[str, dict[str, ResolvedCheck]] = {}
        self._infos: dict[str, CheckInfo] = {}
        self._counts: Counter[str] = Counter()
        self._collisions: set[str] = set()  # names already said in the log
        #: Held while checks change: by :meth:`apply`, and by a reload of the config.
        self.lock = asyncio.Lock()

    # -- what runs ----------------------------------------------------------------------------

    def checks(self) -> list[ResolvedCheck]:
        return [check for checks in self._by_source.values() for check in checks.values()]

    def infos(self) -> list[CheckInfo]:
        return list(self._infos.values())

    def alert_entries(self) -> list[tuple[CheckInfo, AlertPolicyOverride | None]]:
        return [
            (self._infos[name], check.alert)
            for checks in self._by_source.values()
            for name, check in checks.items()
        ]

    def __contains__(self, name: object) -> bool:
        """Whether a discovered check has this name."""
        return name in self._infos

    def counts(self) -> Counter[str]:
        """Discovered checks by probe type."""
        return Counter(self._counts)

    # -- changing it --------------------------------------------------------------------------

    async def apply(self, source: str, wanted: Mapping[str, ResolvedCheck]) -> None:
        """Make ``source``'s running checks ``wanted`` (its whole current set)."""
        async with self.lock:
            await self._apply(source, wanted)

    async def _apply(self, source: str, wanted: Mapping[str, ResolvedCheck]) -> None:
        parts = self._parts
        running = self._by_source.setdefault(source, {})
        wanted = self._without_collisions(wanted)
        removed = [name for name in running if name not in wanted]
        changed = [
            check
            for name, check in wanted.items()
            if (old := running.get(name)) is None or not old.same_as(check)
        ]
        if not removed and not changed:
            return
        new = sum(1 for check in changed if check.name not in running)
        retired: list[ProbeHandle] = []
        for i, name in enumerate(removed):
            self._unschedule(name, retired)
            gone = running.pop(name)
            self._counts[gone.probe_type] -= 1
            del self._infos[name]
            if i % APPLY_SLICE == APPLY_SLICE - 1:
                await asyncio.sleep(0)
        fresh: list[tuple[ResolvedCheck, CheckInfo]] = []
        for check in changed:
            old = running.get(check.name)
            if old is not None:
                self._counts[old.probe_type] -= 1
            running[check.name] = check
            self._counts[check.probe_type] += 1
            info = self._infos[check.name] = check_info(check)
            fresh.append((check, info))
        # The status store, alerting and history learn of the change before any first run.
        added_infos = [info for _, info in fresh]
        parts.store.change(added_infos, removed)
        parts.alerts.change_checks(
            [(info, check.alert) for check, info in fresh], removed, LEFT_ITS_SOURCE
        )
        if parts.history is not None:
            parts.history.change_checks((info.name for info in added_infos), removed)
        if parts.surfaces is not None:
            parts.surfaces.forget(removed)
        with parts.scheduler.batch():  # one start window for the new first runs
            for i, (check, info) in enumerate(fresh):
                self._unschedule(check.name, retired)
                if parts.probed(check):
                    parts.scheduler.add(parts.build_handle(check, info), check.fingerprint())
                if i % APPLY_SLICE == APPLY_SLICE - 1:
                    await asyncio.sleep(0)
        parts.retire(retired)
        self._counts = +self._counts  # (drops the zeros)
        parts.counted(self._counts)
        log.info(
            "discovered checks changed",
            source=source,
            added=new,
            changed=len(changed) - new,
            removed=len(removed),
            running=len(running),
        )

    def _unschedule(self, name: str, retired: list[ProbeHandle]) -> None:
        """Take a discovered check off the schedule (never a hand-written one of that name)."""
        entry = self._parts.scheduler.checks.get(name)
        if entry is not None and entry.handle.info.discovered is not None:
            self._parts.scheduler.remove(name)
            if entry.handle.needs_teardown:
                retired.append(entry.handle)

    def _without_collisions(
        self, wanted: Mapping[str, ResolvedCheck]
    ) -> Mapping[str, ResolvedCheck]:
        configured = self._parts.configured()
        clashing = [name for name in wanted if name in configured]
        if not clashing:
            return wanted
        for name in clashing:
            self._say_collision(name)
        return {name: check for name, check in wanted.items() if name not in configured}

    def _say_collision(self, name: str) -> None:
        if name not in self._collisions:
            self._collisions.add(name)
            log.warning("discovered check left out: a hand-written check has its name", check=name)

    def yield_names(self, names: AbstractSet[str]) -> None:
        """A reload brought hand-written checks of these names: where a discovered check has
        one, it is forgotten here (the reload's apply replaces it everywhere else). Walks the
        smaller of the two (100,000 names against no discovered check cost milliseconds)."""
        smaller = self._infos if len(self._infos) < len(names) else names
        for name in [n for n in smaller if n in names and n in self._infos]:
            for checks in self._by_source.values():
                gone = checks.pop(name, None)
                if gone is not None:
                    self._counts[gone.probe_type] -= 1
            del self._infos[name]
            self._say_collision(name)
        self._counts = +self._counts
