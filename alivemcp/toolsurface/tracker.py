"""The surface consumer: every result that carries a surface passes here; a new surface is
stored, compared with the approved one and scanned for poisoning signs, and alerting is told
whether the check's surface is approved (:class:`SurfaceVerdict`).

On the event loop, a result costs a dict lookup when its surface has not changed (the common
case); a change is queued and worked on in a worker thread (SQLite, the diff, the scan), one at
a time, so a server that changes its surface on every call costs one row per distinct surface
and never blocks probing. Approvals made by the CLI while the daemon runs are picked up by a
poll of the approvals table (every ``poll_interval``, a single indexed query).

Modes (``SurfaceMode``): ``pin``: the first surface seen becomes the approved baseline (by
"first seen"); a later difference, or findings in a baseline nobody approved by hand, make the
surface unapproved until ``alivemcp tools approve``; returning to the approved surface
approves again. ``observe``: versions and changes are recorded, the surface always counts as
approved (nobody is paged).

Flapping: more than :data:`FLAP_CHANGES` new surfaces within :data:`FLAP_WINDOW` seconds is
reported once as flapping instead of once per surface.

Cluster mode: the replica that probes a check judges its surface (and alerting, shared through
the alert-state topic, decides the page). Every other replica keeps the same versions and
approvals in its own store, from the results topic: each result record carries the surface's
digest and the current approval, and the whole surface the first time this process publishes
that digest (:meth:`SurfaceTracker.record_for`); the view hands them to
:meth:`SurfaceTracker.take_remote`. An approval made with the CLI on any replica is published
as a record of its own (``publish``), so the probing replica takes it within a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.hygiene.untrusted import inert_text
from alivemcp.surface import Surface, SurfaceMode, build_surface
from alivemcp.toolsurface.diff import diff_surfaces
from alivemcp.toolsurface.findings import Finding, find
from alivemcp.toolsurface.store import MAX_STORED_BYTES, Approval, SurfaceStore, stored_text

__all__ = ["FIRST_SEEN", "SurfaceTracker", "SurfaceVerdict"]

log = structlog.get_logger("alivemcp.toolsurface")

#: ``approved_by`` of a baseline taken automatically (pin mode, first surface seen).
FIRST_SEEN = "first seen"
FLAP_WINDOW = 3600.0
FLAP_CHANGES = 4
#: Characters of the multi-line summary an alert carries.
SUMMARY_LIMIT = 2_000
#: Changes queued for the worker before the oldest is dropped (a check's next result with the
#: same surface queues it again).
_MAX_QUEUED = 10_000
#: Seconds between writes of last-seen times (unchanged surfaces).
_TOUCH_EVERY = 60.0
#: The largest surface a result record carries whole (Kafka's default message limit is 1 MB).
_MAX_PUBLISHED_CHARS = 256 * 1024
#: A record repeats a check's unchanged surface digest and approval this often.
REPEAT_SECONDS = 600.0
_HEX = frozenset("0123456789abcdef")
#: Finding severities that keep a surface approved on first sight from counting as approved.
_PAGED_SEVERITIES = frozenset({"critical", "warning"})


@dataclass(frozen=True, slots=True)
class SurfaceVerdict:
    """What alerting is told about one check's surface."""

    check: CheckInfo
    approved: bool
    digest: str
    approved_digest: str | None
    #: One line: what changed since the approved surface, and the findings.
    reason: str
    #: Several lines (inert, bounded): the change per item, then the findings.
    summary: str = ""
    #: Bounded JSON for webhooks: from, to, changes, findings.
    details: dict[str, Any] = field(default_factory=dict)
    flapping: bool = False
    severity: str = "warning"


@dataclass(slots=True)
class _Known:
    digest: str
    mode: SurfaceMode
    approved: bool


class SurfaceTracker:
    #: As a consumer of the results pipeline.
    name = "tool_surface"

    def __init__(
        self,
        store: SurfaceStore,
        on_verdict: Callable[[SurfaceVerdict], None],
        *,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 1.0,
        replica: str = "",
        publish: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        """``publish``: cluster mode: puts a record about a check on the results topic."""
        self.publish = publish
        self.store = store
        self._on_verdict = on_verdict
        self._clock = clock
        self._poll_interval = poll_interval
        self._replica = replica
        self._known: dict[str, _Known] = {}
        self._infos: dict[str, CheckInfo] = {}
        self._queue: deque[tuple[CheckInfo, Surface, float]] = deque()
        self._remote: deque[tuple[str, Mapping[str, Any], float, CheckInfo | None]] = deque()
        #: Per check: the approval as [digest, at, by] (for the records other replicas read).
        self._approvals: dict[str, list[Any]] = {}
        #: Per check: the digest this process last published whole.
        self._published: dict[str, str] = {}
        #: Per check: the latest verdict given to alerting (see redeliver).
        self._delivered: dict[str, SurfaceVerdict] = {}
        #: Per check: what its last record said of the surface, and when (see record_for).
        self._said: dict[str, tuple[tuple[str, str, str], float]] = {}
        self._wake = asyncio.Event()
        self._seen: dict[tuple[str, str], float] = {}
        self._new_digests: dict[str, deque[float]] = {}
        self._last_approval = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False
        self._started_at = 0.0
        #: Counters read by the metrics collector.
        self.changes_total: dict[str, int] = {}
        self.pruned_total = 0
        self.dropped_total = 0
        self.errors_total = 0
        self.findings: dict[str, list[Finding]] = {}

    # -- the pipeline's side -------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        surface = result.surface
        if surface is None:
            return
        name = result.check.name
        known = self._known.get(name)
        if known is not None and known.digest == surface.digest and known.mode == surface.mode:
            self._seen[(name, surface.digest)] = result.finished_at
            return
        if len(self._queue) >= _MAX_QUEUED:
            self._queue.popleft()
            self.dropped_total += 1
        self._queue.append((result.check, surface, result.finished_at))
        self._wake.set()

    def record_for(self, result: CheckResult) -> dict[str, Any] | None:
        """What a result's record on the results topic says of its surface (cluster mode):
        its digest, mode and approval when one of them changed since this process last said
        them for the check, or :data:`REPEAT_SECONDS` ago (a replica started since learns them
        then); else None. A record without it is read without parsing its JSON by every
        replica's view (see alivemcp.cluster.vote_header): on a fleet of MCP checks that is
        most records."""
        surface = result.surface
        if surface is None:
            return None
        name = result.check.name
        doc: dict[str, Any] = {"digest": surface.digest, "mode": surface.mode.value}
        approval = self._approvals.get(name)
        if approval is not None:
            doc["approved"] = approval
        said = (surface.digest, surface.mode.value, repr(approval))
        last = self._said.get(name)
        now = self._clock()
        if last is not None and last[0] == said and now - last[1] < REPEAT_SECONDS:
            return None
        self._said[name] = (said, now)
        if self._published.get(name) != surface.digest:
            text = stored_text(surface)
            if len(text) <= _MAX_PUBLISHED_CHARS:
                doc["surface"] = surface.to_json()
            self._published[name] = surface.digest
        return doc

    def take_remote(
        self, check: str, data: Mapping[str, Any], at: float, info: CheckInfo | None = None
    ) -> None:
        """Another replica's word on ``check``'s surface (untrusted: checked in the worker).
        With ``info`` (a result's record), a surface other than the one last judged here is
        judged here too: alerting opens the alert only on the replica that decides the check
        (with several locations, not necessarily the one that probed it)."""
        if len(self._remote) >= _MAX_QUEUED:
            self._remote.popleft()
            self.dropped_total += 1
        self._remote.append((check, data, at, info))
        self._wake.set()

    def forget(self, names: Iterable[str]) -> None:
        """Checks removed (from the config or their discovery source): their versions stay in
        the store, what is kept in memory for them goes (and their series with it)."""
        for name in names:
            for kept in (
                self._known,
                self._infos,
                self._new_digests,
                self.findings,
                self._approvals,
                self._published,
                self._said,
                self._delivered,
                self.changes_total,
            ):
                kept.pop(name, None)

    def retain(self, names: Container[str]) -> None:
        """Forget every check but ``names`` (after a reload)."""
        self.forget([name for name in list(self._known) if name not in names])

    def approval_states(self) -> list[tuple[str, bool]]:
        """(check, approved) of every check with a surface seen, sorted."""
        for _ in range(5):
            try:
                return sorted((name, k.approved) for name, k in self._known.items())
            except RuntimeError:  # the worker thread added one meanwhile
                continue
        return []

    def approved(self, name: str) -> bool | None:
        """Whether the check's current surface is approved (None: no surface seen)."""
        known = self._known.get(name)
        return None if known is None else known.approved

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the worker and the approvals poll (the store is first read by the poll, so
        starting never waits on the disk)."""
        loop = asyncio.get_running_loop()
        self._started_at = self._clock()
        self._tasks = [
            loop.create_task(self._work(), name="alivemcp-surface-worker"),
            loop.create_task(self._poll(), name="alivemcp-surface-approvals"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._flush_seen)
        await asyncio.to_thread(self.store.close)

    async def drain(self) -> None:
        """Work off every queued change (tests, shutdown)."""
        while self._queue or self._remote:
            await self._process_one()

    # -- work ------------------------------------------------------------------------------------

    async def _work(self) -> None:
        last_touch = self._clock()
        while True:
            if not self._queue and not self._remote:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _TOUCH_EVERY)
            await self._process_one()
            if self._clock() - last_touch >= _TOUCH_EVERY:
                last_touch = self._clock()
                await self._guarded(self._flush_seen)

    async def _process_one(self) -> None:
        if self._remote:
            check, data, at, info = self._remote.popleft()
            remote = await self._guarded(lambda: self._record_remote(check, data, at, info))
            if remote is not None:
                self._deliver(remote)
            return
        if not self._queue:
            return
        info, surface, at = self._queue.popleft()
        known = self._known.get(info.name)
        if known is not None and known.digest == surface.digest and known.mode == surface.mode:
            return  # queued twice before the first was worked on
        verdict = await self._guarded(lambda: self._evaluate(info, surface, at))
        if verdict is not None:
            self._deliver(verdict)

    async def _guarded(self, work: Callable[[], Any]) -> Any:
        """``work`` in a worker thread; None if it raised (the database is unusable: counted,
        said once until it works again; probing and everything else carry on)."""
        try:
            done = await asyncio.to_thread(work)
        except Exception as exc:
            self.errors_total += 1
            if not self._failing:
                self._failing = True
                log.error(
                    "tool surface store failed; retrying",
                    path=str(self.store.path),
                    error=f"{type(exc).__name__}: {exc}",
                )
            return None
        if self._failing:
            self._failing = False
            log.info("tool surface store works again", path=str(self.store.path))
        return done

    def redeliver(self, which: Callable[[str], bool]) -> None:
        """Give alerting the latest verdict of each check ``which`` names again (cluster mode:
        their alert state was just adopted here; a verdict given before was not acted on).
        Alerting takes a verdict it already acted on as told."""
        for name, verdict in list(self._delivered.items()):
            if which(name):
                self._deliver(verdict)

    def _deliver(self, verdict: SurfaceVerdict) -> None:
        name = verdict.check.name
        self._delivered[name] = verdict
        self._infos[name] = verdict.check
        try:
            self._on_verdict(verdict)
        except Exception:
            log.exception("tool surface verdict not taken", check=name)

    def _flush_seen(self) -> None:
        seen, self._seen = self._seen, {}
        self.store.touch([(check, digest, at) for (check, digest), at in seen.items()])

    async def _poll(self) -> None:
        # Approvals made before this process started are the store's state, not news.
        started = self._started_at
        while True:
            # No file, no approvals (and a daemon whose checks have no surface never makes
            # one): nothing to read yet.
            if self.store.exists():
                break
            await asyncio.sleep(self._poll_interval)  # why: the poll's period
        self._last_approval = max(
            self._last_approval,
            await self._guarded(lambda: self.store.last_approval_id(before=started)) or 0,
        )
        while True:
            await asyncio.sleep(self._poll_interval)  # why: the poll's period
            approvals = await self._guarded(lambda: self.store.approvals_after(self._last_approval))
            for approval in approvals or ():
                self._last_approval = max(self._last_approval, approval.id)
                if approval.origin == "local" and self.publish is not None:
                    self.publish(approval.check, {"surface_approval": _approval_doc(approval)})
                await self._approved_elsewhere(approval)

    async def _approved_elsewhere(self, approval: Approval) -> None:
        """An approval the CLI (or another process) wrote: judge the current surface again."""
        name = approval.check
        known, info = self._known.get(name), self._infos.get(name)
        if known is None or info is None:
            return
        verdict = await self._guarded(lambda: self._judge(info, known.digest, known.mode, None))
        if verdict is not None:
            self._deliver(verdict)

    # -- judging (in the worker thread) ----------------------------------------------------------

    def _record_remote(
        self, check: str, data: Mapping[str, Any], at: float, info: CheckInfo | None
    ) -> SurfaceVerdict | None:
        approved = data.get("approved")
        approval_taken = False
        if (
            isinstance(approved, list)
            and len(approved) == 3
            and _is_digest(approved[0])
            and isinstance(approved[1], int | float)
            and isinstance(approved[2], str)
            and len(approved[2]) <= 200
        ):
            self.store.approve_remote(check, approved[0], float(approved[1]), approved[2])
            approval_taken = True
        digest = data.get("digest")
        if not isinstance(digest, str) or not _is_digest(digest):
            return None
        whole = data.get("surface")
        surface: Surface | None = None
        if isinstance(whole, dict):
            surface = self._remote_surface(whole, digest)
            if surface is None:
                return None  # a record that does not hold together: nothing of it is taken
            self.findings[check] = self._record_version(
                check, surface, at, self.store.latest(check)
            )
        if info is None:
            return None
        try:
            mode = SurfaceMode(str(data.get("mode")))
        except ValueError:
            return None
        known = self._known.get(check)
        if (
            known is not None
            and known.digest == digest
            and known.mode == mode
            and (not approval_taken or known.approved)
        ):
            return None
        if surface is None and (known is None or known.digest != digest):
            self.findings.pop(check, None)  # those of another digest: read again for this one
        return self._judge(info, digest, mode, surface)

    def _remote_surface(self, whole: dict[str, Any], digest: str) -> Surface | None:
        try:
            surface = Surface.from_json(whole)
            # Recomputed from the documents when every one was kept: a record cannot claim a
            # digest its items do not have.
            if surface.dropped == 0 and all(i.document is not None for i in surface.items):
                rebuilt = build_surface((i.kind, i.name, i.document or {}) for i in surface.items)
                if rebuilt.digest != surface.digest:
                    return None
        except (KeyError, TypeError, ValueError, RecursionError):
            return None
        if surface.digest != digest or len(stored_text(surface)) > MAX_STORED_BYTES:
            return None
        return surface

    def _record_version(
        self, name: str, surface: Surface, at: float, before: str | None
    ) -> list[Finding]:
        """Store ``surface`` as ``name``'s version at ``at`` (a change from ``before`` goes to
        the changelog); returns its findings."""
        findings = find(surface)
        is_new, pruned = self.store.record(name, surface, [asdict(f) for f in findings], at)
        self.pruned_total += pruned
        if before != surface.digest:
            old = self.store.surface(name, before) if before is not None else None
            diff = diff_surfaces(old, surface)
            self.store.add_change(
                name,
                at,
                before,
                surface.digest,
                {
                    "mode": surface.mode.value,
                    "diff": diff.to_json(),
                    "findings": [asdict(f) for f in findings[:50]],
                    "summary": diff.summary(SUMMARY_LIMIT),
                },
            )
            self.changes_total[name] = self.changes_total.get(name, 0) + 1
            if is_new and before is not None:
                self._new_digests.setdefault(name, deque(maxlen=FLAP_CHANGES + 1)).append(at)
        return findings

    def _evaluate(self, info: CheckInfo, surface: Surface, at: float) -> SurfaceVerdict:
        name = info.name
        previous = self._known.get(name)
        before = previous.digest if previous is not None else self.store.latest(name)
        self.findings[name] = self._record_version(name, surface, at, before)
        return self._judge(info, surface.digest, surface.mode, surface)

    def _judge(
        self, info: CheckInfo, digest: str, mode: SurfaceMode, surface: Surface | None
    ) -> SurfaceVerdict:
        name = info.name
        approval = self.store.approval(name)
        if approval is None and mode is SurfaceMode.PIN:
            approval = self.store.approve(name, digest, self._clock(), FIRST_SEEN)
            self._last_approval = max(self._last_approval, approval.id)
        findings = self.findings.get(name)
        if findings is None:
            findings = [Finding(**f) for f in self.store.findings(name, digest)]
            self.findings[name] = findings
        approved_digest = approval.digest if approval is not None else None
        if approval is not None:
            self._approvals[name] = _approval_doc(approval)
        if mode is SurfaceMode.OBSERVE:
            approved = True
        else:
            by_hand = approval is not None and approval.approved_by != FIRST_SEEN
            # An info finding ("you must always pass an absolute path") is shown, not paged.
            flagged = any(f.severity in _PAGED_SEVERITIES for f in findings)
            approved = digest == approved_digest and (by_hand or not flagged)
        self._known[name] = _Known(digest, mode, approved)
        if approved:
            return SurfaceVerdict(info, True, digest, approved_digest, "tool surface approved")
        return self._unapproved(info, digest, approved_digest, surface, findings)

    def _unapproved(
        self,
        info: CheckInfo,
        digest: str,
        approved_digest: str | None,
        surface: Surface | None,
        findings: list[Finding],
    ) -> SurfaceVerdict:
        name = info.name
        recent = self._new_digests.get(name, deque())
        now = self._clock()
        flapping = sum(1 for t in recent if now - t <= FLAP_WINDOW) >= FLAP_CHANGES
        current = surface or self.store.surface(name, digest)
        baseline = self.store.surface(name, approved_digest) if approved_digest else None
        if current is not None and digest != approved_digest:
            diff = diff_surfaces(baseline, current)
            what = _counts(diff.to_json())
            summary = diff.summary(SUMMARY_LIMIT)
            diff_json = diff.to_json(max_items=50)
        else:
            what, summary, diff_json = "", "", {}
        found = _finding_counts(findings)
        if flapping:
            reason = f"tool surface flapping: {len(recent)} new surfaces within the hour"
        elif digest != approved_digest:
            reason = f"tool surface changed since the approved {approved_digest or '(none)'}"
            reason += f": {what}" if what else ""
        else:
            reason = "tool surface approved on first sight has findings"
        if found:
            reason += f" ({found})"
        lines = [summary] if summary else []
        if findings:
            lines.append("Findings:")
            lines += [
                f"- [{f.severity}] {f.rule} in {inert_text(f.item, 120)}: {f.message}"
                for f in findings[:20]
            ]
            if len(findings) > 20:
                lines.append(f"- … and {len(findings) - 20} more")
        text = "\n".join(lines)
        if len(text) > SUMMARY_LIMIT:
            text = text[: SUMMARY_LIMIT - 1] + "…"
        severity = "critical" if any(f.severity == "critical" for f in findings) else "warning"
        return SurfaceVerdict(
            check=info,
            approved=False,
            digest=digest,
            approved_digest=approved_digest,
            reason=reason,
            summary=text,
            details={
                "from": approved_digest,
                "to": digest,
                "changes": diff_json,
                "findings": [asdict(f) for f in findings[:50]],
                "flapping": flapping,
            },
            flapping=flapping,
            severity=severity,
        )


def _approval_doc(approval: Approval) -> list[Any]:
    return [approval.digest, approval.approved_at, approval.approved_by]


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 16 and set(value) <= _HEX


def _counts(diff: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for change in diff.get("changes", []):
        what = str(change.get("change", "changed"))
        counts[what] = counts.get(what, 0) + 1
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))


def _finding_counts(findings: list[Finding]) -> str:
    if not findings:
        return ""
    rules = sorted({f.rule for f in findings})
    return f"{len(findings)} finding{'s' if len(findings) != 1 else ''}: " + ", ".join(rules)
