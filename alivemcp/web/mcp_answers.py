"""What the MCP face's tools answer, read from the daemon's stores.

:class:`FaceReader` builds each tool's result (the models of :mod:`alivemcp.web.mcp_schema`)
from what the web layer reads anyway: the status store (latest results), history (uptime,
incidents), the alerting state (firing alerts) and the tool-surface store. It never runs a
check.

Every answer is bounded: at most a few hundred rows and a character budget per answer, with
``truncated`` and where to continue. Times are ISO-8601 UTC. Text a monitored server wrote
(reasons, details, labels and names of discovered checks, tool-surface summaries) leaves
through :func:`~alivemcp.hygiene.untrusted.inert_text` and ``inert_json`` (the same module):
nothing invisible, nothing unbounded.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from alivemcp.durations import parse_instant
from alivemcp.engine.status import CheckState, StatusStore
from alivemcp.history import queries
from alivemcp.history.live import LIVE_WINDOWS
from alivemcp.history.store import HistoryStore, HistoryUnavailable
from alivemcp.hygiene.untrusted import inert_json, inert_text
from alivemcp.toolsurface.tracker import SurfaceTracker
from alivemcp.web.mcp_schema import (
    STATUSES,
    CheckArgs,
    CheckDetail,
    CheckRow,
    ChecksList,
    Dependency,
    Explanation,
    Finding,
    FiringAlert,
    Incident,
    Incidents,
    IncidentsArgs,
    Latency,
    ListChecksArgs,
    Origin,
    Ratios,
    Run,
    RunCounts,
    StatusCounts,
    SurfaceChange,
    SurfaceChanges,
    SurfaceChangesArgs,
    SurfaceNote,
    Uptime,
    UptimeArgs,
)
from alivemcp.web.tools import surface_state

__all__ = ["CHECKS_URI", "FaceError", "FaceReader", "check_uri", "list_checks"]

CHECKS_URI = "alivemcp://checks/"
#: Characters of rows in one list_checks answer: past it the answer is cut (``truncated``).
CHECKS_TEXT_BUDGET = 200_000
REASON_CHARS = 500
ROW_REASON_CHARS = 300
MAX_LABELS = 20
DETAILS_BUDGET = 8_000
SURFACE_SUMMARY_CHARS = 2_000
MAX_FINDINGS = 20
MAX_OBSERVATIONS = 50
MAX_DEPENDENCIES = 50
EXPLAIN_INCIDENTS_SINCE = 7 * 86400.0


class FaceError(Exception):
    """A question the monitor cannot answer as asked; the message says why and what to do."""


def check_uri(name: str) -> str:
    """The resource URI of check ``name`` (percent-encoded: a name may hold ``/``)."""
    return CHECKS_URI + quote(name, safe="")


def _moment(t: float) -> datetime:
    return datetime.fromtimestamp(int(t) if math.isfinite(t) else 0, UTC)


def _when(t: float | None) -> datetime | None:
    return None if t is None or not math.isfinite(t) else _moment(t)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _for_seconds(since: float | None, now: float) -> float | None:
    return None if since is None else round(max(0.0, now - since), 1)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            rest = seconds % size
            smaller = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            tail = rest // smaller[1]
            return f"{seconds // size}{unit}" + (f" {tail}{smaller[0]}" if tail else "")
    return f"{seconds}s"


def _status_of(state: CheckState) -> str:
    return state.last.status.value if state.last is not None else "pending"


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in list(labels.items())[:MAX_LABELS]:
        out[inert_text(str(key), 64)] = inert_text(str(value), 128)
    return out


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


# -- reading -----------------------------------------------------------------------------------


def _matcher(args: ListChecksArgs) -> Callable[[CheckState, str], bool]:
    wanted = set(args.status) if args.status else None
    labels: list[tuple[str, str | None]] = []
    for spec in args.label or ():
        key, sep, value = spec.partition("=")
        if not key.strip():
            raise FaceError(f'label {spec!r}: write "key=value" or "key"')
        labels.append((key.strip(), value.strip() if sep else None))
    source = args.source
    text = args.text.casefold() if args.text else None

    def matches(state: CheckState, status: str) -> bool:
        if wanted is not None and status not in wanted:
            return False
        info = state.info
        for key, value in labels:
            have = info.labels.get(key)
            if have is None or (value is not None and have != value):
                return False
        if source is not None and (info.discovered is None or info.discovered.source != source):
            return False
        if text is not None:
            reason = state.last.reason if state.last is not None else ""
            haystack = (info.name, info.probe_type, reason, *info.labels.values())
            if not any(text in part.casefold() for part in haystack):
                return False
        return True

    return matches


def _row(state: CheckState, status: str) -> CheckRow:
    info, last = state.info, state.last
    return CheckRow(
        check=inert_text(info.name, 1000),
        probe=info.probe_type,
        status=status,
        reason=inert_text(last.reason, ROW_REASON_CHARS) if last else "not run yet",
        since=_when(state.since),
        last_run=_when(last.started_at) if last else None,
        labels=_labels(info.labels),
        source=inert_text(info.discovered.source, 200) if info.discovered else None,
    )


def list_checks(states: Sequence[CheckState], args: ListChecksArgs) -> ChecksList:
    """The list_checks answer over ``states`` (a snapshot: run it in a worker thread)."""
    matches = _matcher(args)
    counts = dict.fromkeys(STATUSES, 0)
    rows: list[CheckRow] = []
    matched = 0
    budget = CHECKS_TEXT_BUDGET
    end = args.offset + args.limit
    for state in states:
        status = _status_of(state)
        counts[status] += 1
        if not matches(state, status):
            continue
        matched += 1
        if args.offset < matched <= end and budget > 0:
            row = _row(state, status)
            budget -= 120 + len(row.check) + len(row.reason) + sum(map(len, row.labels.values()))
            rows.append(row)
    shown_to = args.offset + len(rows)
    truncated = matched > shown_to
    return ChecksList(
        total_checks=len(states),
        summary=StatusCounts(**counts),
        matched=matched,
        offset=args.offset,
        returned=len(rows),
        truncated=truncated,
        next_offset=shown_to if truncated else None,
        checks=rows,
    )


def _incident(doc: Mapping[str, Any]) -> Incident:
    ended = doc.get("ended_at")
    return Incident(
        started_at=_moment(float(doc["started_at"])),
        ended_at=_when(ended),
        open=ended is None,
        duration_seconds=float(doc["duration_seconds"]),
        worst_status=str(doc["worst_status"]),
        first_reason=inert_text(str(doc["first_reason"]), REASON_CHARS),
        last_reason=inert_text(str(doc["last_reason"]), REASON_CHARS),
    )


def _finding(raw: Any) -> Finding | None:
    if not isinstance(raw, Mapping):
        return None
    return Finding(
        rule=inert_text(str(raw.get("rule", "")), 60),
        severity=inert_text(str(raw.get("severity", "")), 20),
        item=inert_text(str(raw.get("item", "")), 200),
        message=inert_text(str(raw.get("message", "")), 300),
    )


def _observations(values: Mapping[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in list(values.items())[:MAX_OBSERVATIONS]:
        number = float(value)
        out[inert_text(str(key), 100)] = number if math.isfinite(number) else None
    return out


def _explain_text(doc: Explanation) -> str:
    name = doc.check
    if doc.status == "pending":
        return f"{name} ({doc.probe}) has not run yet: there is no result to explain."
    since = f" since {_iso(doc.since)}" if doc.since is not None else ""
    lasting = (
        f" ({_duration(doc.status_for_seconds)})" if doc.status_for_seconds is not None else ""
    )
    words = inert_text(doc.reason, 300)
    parts = [f"{name} ({doc.probe}) is {doc.status}{since}{lasting}."]
    if doc.status == "up":
        parts.append(f"Its last run said: {words}.")
    else:
        parts.append(f"The probe's words about its last run: {words}.")
    counts = doc.recent_counts
    total = counts.up + counts.degraded + counts.down + counts.unknown
    if total and (total != counts.up or doc.status != "up"):
        shown = ", ".join(
            f"{n} {s}"
            for s, n in (
                ("down", counts.down),
                ("degraded", counts.degraded),
                ("unknown", counts.unknown),
                ("up", counts.up),
            )
            if n
        )
        parts.append(f"Of its last {total} run{'s' if total > 1 else ''}: {shown}.")
    failing = [d for d in doc.dependencies if d.status not in ("up", "pending")]
    if failing:
        parts.append(
            "It depends on "
            + ", ".join(f"{d.check} ({d.status}: {inert_text(d.reason, 120)})" for d in failing)
            + ", which may be the cause."
        )
    if doc.firing_alerts:
        parts.append(
            "Alerts firing: "
            + ", ".join(f"{a.alert} ({a.severity})" for a in doc.firing_alerts)
            + "."
        )
    if doc.tool_surface is not None and doc.tool_surface.state == "changed":
        parts.append("Its tool surface changed and the change is not approved.")
    if doc.status == "unknown":
        parts.append("unknown means the probe could not decide (often its own setup failed).")
    return " ".join(parts)


class FaceReader:
    """Builds each tool's answer from the daemon's stores."""

    def __init__(
        self,
        store: StatusStore,
        history: HistoryStore | None = None,
        surfaces: SurfaceTracker | None = None,
        firing_alerts: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.store = store
        self.history = history
        self.surfaces = surfaces
        self._firing_alerts = firing_alerts

    # -- checks ---------------------------------------------------------------------------------

    async def list_checks(self, args: ListChecksArgs) -> ChecksList:
        # 50,000 states take tens of milliseconds to filter: off the event loop (the list
        # is a copy and states are replaced whole, never changed in place).
        return await asyncio.to_thread(list_checks, self.store.states(), args)

    def _state(self, name: str) -> CheckState:
        state = self.store.get(name)
        if state is None:
            raise _no_check(name)
        return state

    def _row_of(self, name: str, *, brief: bool) -> dict[str, Any]:
        # The /status row itself: what it carries (owner, several locations' votes) is what
        # this says too.
        rows = self.store.snapshot(brief=brief, only=[name])["checks"]
        return rows[0] if rows else {}

    def check_detail(self, name: str, now: float | None = None) -> CheckDetail:
        now = time.time() if now is None else now
        state = self._state(name)
        info, last = state.info, state.last
        row = self._row_of(name, brief=True)
        origin = info.discovered
        uptime = None
        if self.history is not None:
            uptime = {}
            for window in LIVE_WINDOWS:
                up_ratio, available = self.history.live_uptime(name, window, now)
                uptime[window] = Ratios(up_ratio=up_ratio, available_ratio=available)
        up, degraded, down, unknown = state.runs
        detail = CheckDetail(
            check=inert_text(info.name, 1000),
            probe=info.probe_type,
            status=_status_of(state),
            reason=inert_text(last.reason, REASON_CHARS) if last else "not run yet",
            since=_when(state.since),
            status_for_seconds=_for_seconds(state.since, now),
            last_run=_when(last.started_at) if last else None,
            duration_seconds=round(last.duration_seconds, 6) if last else None,
            labels=_labels(info.labels),
            owner=row.get("owner"),
            discovered=None
            if origin is None
            else Origin(
                source=inert_text(origin.source, 200),
                target=inert_text(origin.target, 500),
                server=inert_text(origin.server, 300) if origin.server else None,
                version=inert_text(origin.version, 100) if origin.version else None,
                transport=origin.transport,
            ),
            depends_on=[inert_text(d, 300) for d in info.depends_on[:MAX_DEPENDENCIES]],
            runs_since_start=RunCounts(up=up, degraded=degraded, down=down, unknown=unknown),
            uptime=uptime,
            resource=check_uri(info.name),
        )
        if isinstance(row.get("locations"), Mapping):
            detail.locations = inert_json(row["locations"], [DETAILS_BUDGET], 500)
        return detail

    async def get_check(self, args: CheckArgs) -> CheckDetail:
        return self.check_detail(args.check)

    # -- history --------------------------------------------------------------------------------

    async def _history_for(self, name: str, what: str) -> HistoryStore:
        if self.history is None:
            raise FaceError(
                f"this alivemcp keeps no history (history.enabled is false in its config), so "
                f"it has no {what}; get_check and explain_check show the current status"
            )
        if self.store.get(name) is None and not await self.history.known(name):
            raise _no_check(name)
        return self.history

    async def get_uptime(self, args: UptimeArgs) -> Uptime:
        history = await self._history_for(args.check, "uptime")
        doc = await history.uptime(args.check, args.window)
        runs = doc["runs"]
        latency = doc["latency_seconds"]
        start = queries.window_start(args.window, time.time())
        return Uptime(
            check=inert_text(args.check, 1000),
            window=args.window,
            window_start=_moment(start),
            up_ratio=doc["up_ratio"],
            available_ratio=doc["available_ratio"],
            runs=RunCounts(**{s: int(runs[s]) for s in ("up", "degraded", "down", "unknown")}),
            latency_seconds=Latency(p50=latency["p50"], p95=latency["p95"], p99=latency["p99"]),
        )

    async def list_incidents(self, args: IncidentsArgs) -> Incidents:
        since = _since(args.since)
        history = await self._history_for(args.check, "incidents")
        docs = await history.incidents(args.check, since, args.limit + 1)
        return Incidents(
            check=inert_text(args.check, 1000),
            since=_moment(since),
            returned=min(len(docs), args.limit),
            truncated=len(docs) > args.limit,
            incidents=[_incident(d) for d in docs[: args.limit]],
        )

    # -- tool surfaces --------------------------------------------------------------------------

    async def list_tool_surface_changes(self, args: SurfaceChangesArgs) -> SurfaceChanges:
        since = _since(args.since)
        if self.surfaces is None:
            raise FaceError("this alivemcp does not track tool surfaces")
        store = self.surfaces.store
        rows = await asyncio.to_thread(store.changes, since, check=args.check, limit=args.limit + 1)
        changes = []
        for row in rows[: args.limit]:
            summary = row.summary
            text = summary.get("summary")
            raw_findings = summary.get("findings")
            raw_findings = raw_findings if isinstance(raw_findings, list) else []
            findings = [f for f in map(_finding, raw_findings[:MAX_FINDINGS]) if f is not None]
            mode = summary.get("mode")
            changes.append(
                SurfaceChange(
                    id=row.id,
                    check=inert_text(row.check, 1000),
                    at=_moment(row.at),
                    from_digest=row.from_digest,
                    to_digest=row.to_digest,
                    mode=mode if isinstance(mode, str) else None,
                    summary=inert_text(text, SURFACE_SUMMARY_CHARS, one_line=False)
                    if isinstance(text, str)
                    else "",
                    findings=findings,
                    findings_left_out=max(0, len(raw_findings) - len(findings)),
                )
            )
        return SurfaceChanges(
            since=_moment(since),
            returned=len(changes),
            truncated=len(rows) > args.limit,
            changes=changes,
        )

    # -- explain --------------------------------------------------------------------------------

    async def explain_check(self, args: CheckArgs) -> Explanation:
        now = time.time()
        name = args.check
        state = self._state(name)
        info, last = state.info, state.last
        row = self._row_of(name, brief=False)
        runs = [
            Run(started_at=_moment(t), status=s, duration_seconds=d)
            for t, d, s in reversed(row.get("history") or [])
        ]
        counts = {s: sum(1 for r in runs if r.status == s) for s in ("up", "degraded", "down")}
        counts["unknown"] = len(runs) - sum(counts.values())
        doc = Explanation(
            check=inert_text(info.name, 1000),
            probe=info.probe_type,
            status=_status_of(state),
            summary="",
            reason=inert_text(last.reason, REASON_CHARS) if last else "not run yet",
            since=_when(state.since),
            status_for_seconds=_for_seconds(state.since, now),
            last_run=_when(last.started_at) if last else None,
            details=inert_json(dict(last.details), [DETAILS_BUDGET], 1000)
            if last and last.details
            else None,
            observations=_observations(last.observations) if last else {},
            recent_runs=runs,
            recent_counts=RunCounts(**counts),
            dependencies=list(self._dependencies(info.depends_on[:MAX_DEPENDENCIES])),
            firing_alerts=self._alerts_of(info.name),
            recent_incidents=await self._recent_incidents(name, now),
            tool_surface=await self._surface_note(name),
        )
        doc.summary = _explain_text(doc)
        return doc

    def _dependencies(self, names: Iterable[str]) -> Iterable[Dependency]:
        for name in names:
            state = self.store.get(name)
            last = state.last if state is not None else None
            yield Dependency(
                check=inert_text(name, 300),
                status=_status_of(state) if state is not None else "not configured",
                reason=inert_text(last.reason, ROW_REASON_CHARS) if last else "",
            )

    def _alerts_of(self, name: str) -> list[FiringAlert]:
        if self._firing_alerts is None:
            return []
        return [
            FiringAlert(
                alert=str(a.get("alert", "")),
                severity=str(a.get("severity", "")),
                since=_when(a.get("since")),
                reason=inert_text(str(a.get("reason", "")), REASON_CHARS),
                notified=bool(a.get("notified")),
            )
            for a in self._firing_alerts()
            if a.get("check") == name
        ]

    async def _recent_incidents(self, name: str, now: float) -> list[Incident] | None:
        if self.history is None:
            return None
        try:
            docs = await self.history.incidents(name, now - EXPLAIN_INCIDENTS_SINCE, 3)
        except HistoryUnavailable:
            return None
        return [_incident(d) for d in docs]

    async def _surface_note(self, name: str) -> SurfaceNote | None:
        surfaces = self.surfaces
        if surfaces is None:
            return None
        try:
            state = await asyncio.to_thread(
                surface_state, surfaces.store, name, surfaces.approved(name)
            )
        except sqlite3.Error:
            return None
        if state is None:
            return None
        return SurfaceNote(state=state.state, digest=state.digest, findings=len(state.findings))

    # -- resources ------------------------------------------------------------------------------

    def names(self, offset: int, count: int) -> tuple[list[str], int | None]:
        """Check names from ``offset`` (at most ``count``) and the offset after them (None:
        the end)."""
        states = self.store.states()
        page = [s.info.name for s in states[offset : offset + count]]
        after = offset + len(page)
        return page, after if after < len(states) else None


def _since(text: str) -> float:
    try:
        return parse_instant(text, time.time())
    except ValueError as exc:
        raise FaceError(f"since: {exc}") from None


def _no_check(name: str) -> FaceError:
    return FaceError(
        f"no check named {inert_text(name, 200)!r}; list_checks shows the names (its text "
        "filter finds part of a name)"
    )
