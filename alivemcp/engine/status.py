"""The status store: the latest state of every check, shared by metrics and the status API.

Entries are replaced whole (never mutated in place) so a metrics render in another thread
always sees a consistent entry. A small ring of recent durations feeds the status page.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.probe import Status

__all__ = ["CheckState", "StatusChange", "StatusStore"]

log = structlog.get_logger("alivemcp.app.daemon")

HISTORY = 20
_STATUS_CODES = {Status.UP: 0, Status.DEGRADED: 1, Status.DOWN: 2, Status.UNKNOWN: 3}
_CODE_STATUS = {v: k for k, v in _STATUS_CODES.items()}
_NO_RUNS = (0, 0, 0, 0)
#: Read for every result (every location's, in cluster mode): a module's name is found faster
#: than an enum class's member.
_UP, _DEGRADED, _DOWN = Status.UP, Status.DEGRADED, Status.DOWN


@dataclass(slots=True)
class _History:
    """Recent runs as compact arrays: ~200 bytes a check instead of 20 tuples."""

    started: array[float] = field(default_factory=lambda: array("d"))
    durations: array[float] = field(default_factory=lambda: array("f"))
    statuses: bytearray = field(default_factory=bytearray)

    def push(self, result: CheckResult) -> None:
        if len(self.statuses) >= HISTORY:
            del self.started[0], self.durations[0], self.statuses[0]
        self.started.append(result.started_at)
        self.durations.append(result.duration_seconds)
        self.statuses.append(_STATUS_CODES[result.status])

    def rows(self) -> list[list[Any]]:
        return [
            [round(t, 3), round(d, 6), _CODE_STATUS[s].value]
            for t, d, s in zip(self.started, self.durations, self.statuses, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class CheckState:
    info: CheckInfo
    last: CheckResult | None
    since: float | None  # when the current status began
    runs: tuple[int, int, int, int]  # cumulative counts by status: up, degraded, down, unknown
    in_flight: bool = False

    @property
    def owner(self) -> str:
        """The replica that produced the last result ("" for this process, or none yet)."""
        return self.last.replica if self.last is not None else ""


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A result of this process whose status differs from the check's previous one."""

    result: CheckResult
    #: The previous status, as the store knew it (this process's runs and, in cluster mode,
    #: other replicas' through the view).
    before: Status


class StatusStore:
    """The latest state of every check. As the pipeline's status stage it also tells its
    watchers of each change of status (:meth:`watch`): they never read the store "before"."""

    #: As a consumer of the results pipeline.
    name = "status"

    def __init__(self, replica: str = "") -> None:
        #: This process's cluster replica id ("" standalone): rows then carry an ``owner``.
        self.replica = replica
        self._states: dict[str, CheckState] = {}
        self._history: dict[str, _History] = {}
        self._watchers: list[Callable[[StatusChange], None]] = []
        #: Cluster mode: whether this replica decides a check's verdict (it pages for it).
        self.decides: Callable[[str], bool] | None = None

    def watch(self, watcher: Callable[[StatusChange], None]) -> None:
        """Call ``watcher`` for every status change of a result taken by :meth:`consume` (the
        pipeline's results, not the cluster view's :meth:`record`). The first result of a
        check is no change: there is nothing to change from."""
        self._watchers.append(watcher)

    def set_checks(self, infos: Iterable[CheckInfo]) -> None:
        """Align the store with the configured checks, keeping state of checks that stay."""
        for _ in self.align(list(infos)):
            pass

    def align(self, infos: Sequence[CheckInfo]) -> Iterator[None]:
        """:meth:`set_checks` a check at a time, yielding after each: the caller may let other
        work run in between (at 100,000 checks the whole took a quarter of a second). A result
        recorded meanwhile lands on its check's state as it is at that moment."""
        wanted: set[str] = set()
        for info in infos:  # a step each too: in one go, 100,000 names held the loop
            wanted.add(info.name)
            yield
        for name in list(self._states):
            if name not in wanted:
                del self._states[name]
                self._history.pop(name, None)
            yield
        for info in infos:
            old = self._states.get(info.name)
            if old is None:
                self._states[info.name] = CheckState(info, None, None, _NO_RUNS)
            elif old.info is not info and old.info != info:
                self._states[info.name] = CheckState(info, old.last, old.since, old.runs)
            yield

    def change(self, added: Iterable[CheckInfo], removed: Iterable[str]) -> None:
        """Add (or replace the info of) some checks and drop others, leaving the rest alone:
        a discovery refresh that changes a few of 100,000 checks costs a few entries."""
        for name in removed:
            self._states.pop(name, None)
            self._history.pop(name, None)
        for info in added:
            old = self._states.get(info.name)
            if old is None:
                self._states[info.name] = CheckState(info, None, None, _NO_RUNS)
            elif old.info is not info and old.info != info:
                self._states[info.name] = CheckState(info, old.last, old.since, old.runs)

    def mark_in_flight(self, name: str) -> None:
        """Note that a check without a result yet has its first run in flight (readiness
        counts it); once a check has a result, its later runs change nothing here."""
        state = self._states.get(name)
        if state is not None and state.last is None and not state.in_flight:
            self._states[name] = CheckState(state.info, state.last, state.since, state.runs, True)

    def record(self, result: CheckResult) -> CheckState | None:
        return self._record(result, self._states.get(result.check.name))

    def _record(self, result: CheckResult, state: CheckState | None) -> CheckState | None:
        if state is None:  # removed by a reload while it ran
            return None
        if result.replica and state.last is not None and result.started_at < state.last.started_at:
            # Cluster mode: a result from the stream older than the one already shown (the
            # echo of a run of ours, or one delayed across a handover).
            return None
        since = state.since
        last = state.last
        if last is None or last.status is not result.status:
            since = result.finished_at
        up, degraded, down, unknown = state.runs
        status = result.status
        if status is _UP:
            up += 1
        elif status is _DOWN:
            down += 1
        elif status is _DEGRADED:
            degraded += 1
        else:
            unknown += 1
        new = CheckState(state.info, result, since, (up, degraded, down, unknown))
        name = result.check.name
        self._states[name] = new
        history = self._history.get(name)
        if history is None:  # made on the first result: a check never run needs none
            history = self._history[name] = _History()
        history.push(result)
        return new

    def consume(self, result: CheckResult) -> None:
        previous = self._states.get(result.check.name)
        before = previous.last.status if previous and previous.last else None
        if self._record(result, previous) is None or before is result.status:
            return
        log.info(
            "check status changed",
            check=result.check.name,
            probe=result.check.probe_type,
            status=result.status.value,
            previous=before.value if before else None,
            reason=result.reason,
        )
        if before is not None and self._watchers:
            change = StatusChange(result, before)
            for watcher in self._watchers:
                try:
                    watcher(change)
                except Exception:  # one watcher failing never keeps the change from the others
                    log.exception("status change watcher failed", check=result.check.name)

    def states(self) -> list[CheckState]:
        # list() of a dict's values is one C-level call: safe against concurrent replacement
        # from the event loop while a render thread iterates.
        return list(self._states.values())

    def get(self, name: str) -> CheckState | None:
        return self._states.get(name)

    def ready(self) -> bool:
        return all(s.last is not None or s.in_flight for s in self._states.values())

    def snapshot(self, *, brief: bool = False, only: Iterable[str] | None = None) -> dict[str, Any]:
        """The ``/status`` document. ``brief`` leaves out each row's observations, recent runs
        and details (a 50,000-check page paints from the brief list: the full document is
        ~50 MB); ``only`` keeps just the named checks (the page's rows on screen)."""
        summary = {"up": 0, "degraded": 0, "down": 0, "unknown": 0, "pending": 0}
        checks = []
        states = self.states()
        if only is not None:
            summary_of = states
            states = [s for s in (self._states.get(name) for name in only) if s is not None]
        else:
            summary_of = []
        for state in summary_of:
            last = state.last
            summary[last.status.value if last else "pending"] += 1
        for state in states:
            if only is None:
                last = state.last
                summary[last.status.value if last else "pending"] += 1
            checks.append(self._row(state, brief))
        document: dict[str, Any] = {"generated_at": time.time(), "summary": summary}
        if self.replica:
            document["replica"] = self.replica
        document["checks"] = checks
        return document

    def row(self, name: str) -> dict[str, Any] | None:
        """One check's full ``/status`` row (None: no such check), without the summary a
        snapshot counts over every check."""
        state = self._states.get(name)
        return None if state is None else self._row(state, False)

    def _row(self, state: CheckState, brief: bool) -> dict[str, Any]:
        last = state.last
        status = last.status.value if last else "pending"
        row: dict[str, Any] = {
            "check": state.info.name,
            "probe": state.info.probe_type,
            "labels": dict(state.info.labels),
            "status": status,
            "reason": last.reason if last else "not run yet",
            "since": state.since,
            "last_run": last.started_at if last else None,
            "duration_seconds": round(last.duration_seconds, 6) if last else None,
        }
        if self.replica:
            row["owner"] = (last.replica or self.replica) if last else None
        if self.decides is not None:
            row["decided_here"] = self.decides(state.info.name)
        if last is not None and last.locations is not None:
            row["locations"] = {k: v.as_json() for k, v in last.locations.items()}
        origin = state.info.discovered
        if origin is not None:
            row["discovered"] = origin.as_json()
        if brief:
            return row
        row["observations"] = dict(last.observations) if last else {}
        history = self._history.get(state.info.name)
        row["history"] = history.rows() if history is not None else []
        if last and last.labeled_observations:
            row["labeled_observations"] = [
                {"name": o.name, "labels": dict(o.labels), "value": o.value}
                for o in last.labeled_observations
            ]
        if last and last.details:
            row["details"] = last.details
        return row
