"""Per-check decisions: a result (or the passing of time) in, notifications out.

The policy arithmetic is :mod:`alivemcp.alerting.policy`; this module applies it to a check
with what surrounds it (maintenance windows, flapping, dependencies), turns each event into a
:class:`~alivemcp.alerting.model.Notification` and hands it to the receivers' queues. It never
waits: probing calls it for every run.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import structlog

from alivemcp.alerting.catalog import AlertedCheck, CheckCatalog, match_labels
from alivemcp.alerting.config import AlertingConfig, AlertPolicy
from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.maintenance import MaintenanceCalendar
from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.policy import (
    AlertState,
    CheckState,
    apply_result,
    reconcile,
    update_flapping,
)
from alivemcp.alerting.routing import Router
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.hygiene.untrusted import clean_label, clean_text
from alivemcp.probe import Status
from alivemcp.toolsurface.tracker import SurfaceVerdict

__all__ = ["Decider"]

log = structlog.get_logger("alivemcp.alerting")

Clock = Callable[[], float]
#: Hands a notification to the queues of the named receivers.
Dispatch = Callable[[Sequence[str], Notification], None]
#: Alerts of one check in decision order: a flapping notice precedes the held target alert.
_KIND_ORDER = (AlertKind.PROBE_BROKEN, AlertKind.FLAPPING, AlertKind.TARGET)
_FLAPPING_SEVERITY = "warning"
_DISAGREES = AlertKind.LOCATION_DISAGREES
#: Below a page: the quorum says the check is not down.
_DISAGREEMENT_SEVERITY = "warning"
#: Every alert of a check, for closing them all when the check goes.
_ALL_KINDS = (*_KIND_ORDER, AlertKind.TOOL_SURFACE, _DISAGREES)
#: What a tool-surface alert is routed by, beside the check's labels.
_SURFACE_ROUTE = {"alert": AlertKind.TOOL_SURFACE.value}
#: What a location_disagrees alert is routed by, beside the check's labels.
_DISAGREEMENT_ROUTE = {"alert": _DISAGREES.value}
#: A set of dissenting locations longer than this (never, with real location names: 63
#: characters at most) is remembered by its digest, so the saved alert stays within bounds.
_MAX_DISSENT_CHARS = 2_000
_FAILING = frozenset({Status.DOWN.value, Status.DEGRADED.value})
_UP = Status.UP.value


class Decider:
    """Decides, for the checks this process evaluates (``owns``), what to notify."""

    def __init__(
        self,
        config: AlertingConfig,
        router: Router,
        catalog: CheckCatalog,
        ledger: AlertLedger,
        dispatch: Dispatch,
        *,
        clock: Clock,
        owns: Callable[[str], bool],
        status_of: Callable[[str], str | None] | None,
    ) -> None:
        """``owns``: whether this process evaluates a check now (cluster mode: the checks of
        the shards adopted). ``status_of``: the latest status of any check, for dependencies
        evaluated elsewhere."""
        self._catalog = catalog
        self._ledger = ledger
        self._dispatch = dispatch
        self._clock = clock
        self._owns = owns
        self._status_of = status_of
        self.configure(config, router)

    @property
    def router(self) -> Router:
        """The routes of the current config."""
        return self._router

    def configure(self, config: AlertingConfig, router: Router) -> None:
        self._config = config
        self._router = router
        self._calendar = MaintenanceCalendar(config.maintenance)

    # -- what drives decisions -----------------------------------------------------------------

    def observe(self, result: CheckResult) -> None:
        """A finished run; must not block."""
        name = result.check.name
        check = self._catalog.checks.get(name)
        if check is None or not check.enabled:
            return
        if not self._owns(name):
            return  # another replica's check, or one whose state is not read yet
        ledger = self._ledger
        state = ledger.states.get(name)
        was_quiet = name not in ledger.attention
        if state is not None and result.status is Status.UP and was_quiet and state.steadily_up():
            # Up, and up before with nothing open (the common case): what apply_result and
            # update_flapping would do comes down to this, and nothing is left to decide (see
            # CheckState.steadily_up); the slow path below would end at the same return.
            state.last_status = _UP
            state.last_reason = result.reason
            state.observations = dict(result.observations or {})
            state.known_streak += 1
            state.ok_streak += 1
            ledger.changed.discard(name)
            return
        now = self._clock()
        if state is None:
            state = ledger.states[name] = CheckState()
        ledger.changed.add(name)
        apply_result(
            state,
            result.status,
            result.reason,
            now,
            check.policy,
            check.info.labels,
            result.observations,
        )
        update_flapping(state, now, check.policy)
        if was_quiet and state.is_quiet():
            # Healthy and staying healthy (the common case): nothing to decide, nothing for
            # dependants (they only react to a dependency that was failing).
            ledger.changed.discard(name)
            return
        ledger.attention.add(name)
        self.decide(name, now)
        for dependant in self._catalog.dependants.get(name, ()):
            self.decide(dependant, now)
        ledger.note_attention(name, state)
        # A healthy check that stays healthy changes nothing worth writing to disk.
        if not (was_quiet and name not in ledger.attention):
            ledger.bump()

    def tick(self) -> None:
        """Time-driven decisions: reminders, ends of maintenance windows and of flapping."""
        ledger = self._ledger
        now = self._clock()
        for name in list(ledger.attention):
            state = ledger.states.get(name)
            check = self._catalog.checks.get(name)
            if state is None or check is None:
                ledger.attention.discard(name)
                continue
            if not _needs_tick(state, check.policy, now):
                continue
            changes = len(state.changes)
            update_flapping(state, now, check.policy)
            if len(state.changes) != changes:
                ledger.changed.add(name)
                ledger.bump()
            self.decide(name, now)  # anything it sends marks the state changed
            ledger.note_attention(name, state)

    def apply_config(self, previous: Mapping[str, AlertedCheck]) -> None:
        """After a reload: close incidents of checks gone (or no longer alerting), and decide
        again for the others (a policy or a maintenance window may have changed)."""
        for _ in self.applying_config(previous):
            pass

    def applying_config(self, previous: Mapping[str, AlertedCheck]) -> Iterator[None]:
        """:meth:`apply_config` a check at a time, yielding after each: the caller may let
        other work run in between (at 100,000 checks the whole took most of a tenth of a
        second)."""
        now = self._clock()
        alerting = self._catalog.alerting
        for name in list(self._ledger.states):
            if not alerting(name) and name in self._ledger.states:
                gone = previous.get(name)
                self.resolve_removed(
                    name, gone.info if gone else None, now, self._catalog.why_not_alerting(name)
                )
            yield
        for name in list(self._ledger.attention):
            if name in self._catalog.checks and name in self._ledger.attention:
                self.decide(name, now)

    # -- deciding ------------------------------------------------------------------------------

    def decide(self, name: str, now: float) -> None:
        state = self._ledger.states.get(name)
        check = self._catalog.checks.get(name)
        if state is None or check is None:
            return
        window = self._calendar.active_for(check.match_labels, now) if self._calendar else None
        for kind in _KIND_ORDER:
            alert = state.alerts.get(kind.value)
            if alert is None:
                continue
            held = window is not None
            if kind is AlertKind.PROBE_BROKEN:
                alert.severity = self._config.probe_broken_severity
            elif kind is AlertKind.FLAPPING:
                alert.severity = _FLAPPING_SEVERITY
            else:
                flapping = state.alerts.get(AlertKind.FLAPPING.value)
                held = held or bool(flapping and flapping.active) or self._dependency_failing(check)
            event = reconcile(alert, now, check.policy, held)
            if event is not None:
                self._emit(check, state, kind, alert, event, now)
        disagreement = state.alerts.get(_DISAGREES.value)
        if disagreement is not None:
            self._tell_disagreement(check, state, disagreement, now, held=window is not None)
        self._ledger.track_firing(name, state)

    def observe_surface(self, verdict: SurfaceVerdict) -> None:
        """The tracker's judgement of a check's tool surface: open the tool-surface alert when
        it is not approved, notify again for each new surface while open (once for a flapping
        one), resolve it when the surface is approved again. Not held by maintenance windows
        or dependencies: a changed surface is news whatever the target's health."""
        name = verdict.check.name
        check = self._catalog.checks.get(name)
        if check is None or not check.enabled or not self._owns(name):
            return
        ledger = self._ledger
        state = ledger.states.get(name)
        alert = state.alerts.get(AlertKind.TOOL_SURFACE.value) if state is not None else None
        now = self._clock()
        if verdict.approved:
            if state is None or alert is None or not (alert.active or alert.notified):
                return
            alert.active = False
            alert.reason = verdict.reason
            alert.fingerprint = ""
            if alert.notified:
                self._emit(check, state, AlertKind.TOOL_SURFACE, alert, Event.RESOLVED, now)
                alert.notified = False
            del state.alerts[AlertKind.TOOL_SURFACE.value]
            ledger.changed.add(name)
            ledger.bump()
            return
        fingerprint = "flapping" if verdict.flapping else verdict.digest
        if alert is not None and alert.active and alert.fingerprint in (fingerprint, "flapping"):
            return  # told already (a flapping surface stays quiet until approved)
        if state is None:
            state = ledger.states[name] = CheckState()
        alert = state.alert(AlertKind.TOOL_SURFACE)
        if not alert.active:
            alert.since = now
        alert.active = True
        alert.severity = verdict.severity
        alert.reason = verdict.reason
        alert.fingerprint = fingerprint
        self._emit(
            check,
            state,
            AlertKind.TOOL_SURFACE,
            alert,
            Event.FIRING,
            now,
            summary=verdict.summary,
            details=verdict.details,
        )
        alert.notified = True
        alert.notified_severity = alert.severity
        alert.last_notified_at = now
        ledger.changed.add(name)
        ledger.bump()

    def observe_disagreement(self, info: CheckInfo, dissent: Sequence[str], reason: str) -> None:
        """Cluster mode with several locations: ``dissent`` names the check's locations that
        say down while fewer than its quorum do (the verdict is degraded, nobody is paged);
        empty when they agree. Opens the ``location_disagrees`` alert (severity warning) and
        notifies again only when the set of dissenting locations changes: this is called
        about once per check interval. Resolves it when the dissent ends.

        Held by maintenance windows like the status alerts (the true state is sent when the
        window ends; a resolve is never held): the planned work a window covers is what
        makes some locations see a target down. Not held by dependencies or flapping, and
        no reminders: it is a notice, not a page."""
        name = info.name
        check = self._catalog.checks.get(name)
        if check is None or not check.enabled or not self._owns(name):
            return
        ledger = self._ledger
        state = ledger.states.get(name)
        alert = state.alerts.get(_DISAGREES.value) if state is not None else None
        if not dissent:
            if state is None or alert is None:
                return
            now = self._clock()
            alert.active = False
            alert.reason = clean_text(reason)
            self._tell_disagreement(check, state, alert, now, held=False)
            del state.alerts[_DISAGREES.value]
        else:
            fingerprint = _dissent_fingerprint(dissent)
            if alert is not None and alert.active and alert.fingerprint == fingerprint:
                return  # told already, or held (the tick tells it when the window ends)
            now = self._clock()
            if state is None:
                state = ledger.states[name] = CheckState()
            alert = state.alert(_DISAGREES)
            if not alert.active:
                alert.since = now
            alert.active = True
            alert.severity = _DISAGREEMENT_SEVERITY
            alert.reason = clean_text(reason)
            alert.fingerprint = fingerprint
            # What receivers were told (if anything) is about another set: out of date.
            alert.notified_severity = ""
            self._tell_disagreement(check, state, alert, now, held=self._held(check, now))
        ledger.changed.add(name)
        ledger.bump()
        ledger.note_attention(name, state)  # the tick releases a held alert
        ledger.track_firing(name, state)

    def _tell_disagreement(
        self, check: AlertedCheck, state: CheckState, alert: AlertState, now: float, *, held: bool
    ) -> None:
        """Tell receivers what differs from what they were told: a new set of dissenting
        locations (``notified_severity`` cleared when the set changed), or the end. Unlike
        :func:`reconcile`, never a reminder."""
        if not alert.active:
            if alert.notified:
                alert.notified = False
                alert.notified_severity = ""
                self._emit(check, state, _DISAGREES, alert, Event.RESOLVED, now)
            return
        if held or (alert.notified and alert.notified_severity == alert.severity):
            return
        alert.notified = True
        alert.notified_severity = alert.severity
        alert.last_notified_at = now
        self._emit(
            check,
            state,
            _DISAGREES,
            alert,
            Event.FIRING,
            now,
            details={"locations": _dissent_listed(alert.fingerprint)},
        )

    def _held(self, check: AlertedCheck, now: float) -> bool:
        """Whether a maintenance window holds the check's pages now."""
        return bool(self._calendar) and (
            self._calendar.active_for(check.match_labels, now) is not None
        )

    def _dependency_failing(self, check: AlertedCheck) -> bool:
        """A dependency that fires, or whose latest result failed, suppresses dependants: the
        second case covers dependants whose own threshold is reached first."""
        for dep in check.info.depends_on:
            state = self._ledger.states.get(dep)
            if state is None:
                # Cluster mode: another replica evaluates it; its latest result is in the
                # status store.
                if (
                    self._status_of is not None
                    and not self._owns(dep)
                    and self._status_of(dep) in _FAILING
                ):
                    return True
                continue
            target = state.alerts.get(AlertKind.TARGET.value)
            if (target is not None and target.active) or state.last_status in _FAILING:
                return True
        return False

    def resolve_removed(
        self,
        name: str,
        info: CheckInfo | None,
        now: float,
        reason: str = "check removed from the configuration",
    ) -> None:
        """A check left the config: close its open incidents instead of leaving them open."""
        ledger = self._ledger
        state = ledger.states.pop(name, None)
        ledger.attention.discard(name)
        ledger.changed.add(name)
        ledger.track_firing(name, None)
        if state is None or info is None:
            return
        check = AlertedCheck.removed(info, self._config, self._router)
        for kind in _ALL_KINDS:
            alert = state.alerts.get(kind.value)
            if alert is not None and alert.notified:
                alert.active = False
                alert.reason = reason
                self._emit(check, state, kind, alert, Event.RESOLVED, now)
                alert.notified = False
        ledger.bump()

    def _emit(
        self,
        check: AlertedCheck,
        state: CheckState,
        kind: AlertKind,
        alert: AlertState,
        event: Event,
        now: float,
        note: str = "",
        *,
        summary: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        notification = Notification(
            id=self._ledger.take_id(),
            check=check.info.name,
            probe_type=check.info.probe_type,
            kind=kind,
            event=event,
            severity=alert.severity or "warning",
            status=(
                alert.status
                if kind is AlertKind.TARGET and event is not Event.RESOLVED and alert.status
                else state.last_status
            )
            or "unknown",
            reason=alert.reason or state.last_reason,
            since=alert.since or now,
            created_at=now,
            dedup_key=dedup_key(check.info.name, kind),
            labels=dict(check.info.labels),
            observations=_finite(state.observations),
            note=note,
            summary=summary,
            details=details or {},
        )
        if kind is AlertKind.PROBE_BROKEN:
            receivers = check.owners
        elif kind is AlertKind.TOOL_SURFACE:
            receivers = self._router.receivers_for(match_labels(check.info) | _SURFACE_ROUTE)
        elif kind is _DISAGREES:
            receivers = self._router.receivers_for(match_labels(check.info) | _DISAGREEMENT_ROUTE)
        else:
            receivers = check.receivers
        self._dispatch(receivers, notification)
        self._ledger.changed.add(check.info.name)
        self._ledger.bump()
        log.info(
            "alert notification",
            check=check.info.name,
            alert=kind.value,
            notification_event=event.value,
            severity=notification.severity,
            reason=notification.reason[:200],
            receivers=list(receivers),
        )


def _finite(observations: Mapping[str, float]) -> dict[str, float]:
    """Observations that JSON can carry: NaN and infinities are not JSON (a receiver would
    reject the body, and the saved queue would not load back)."""
    return {
        name: float(value)
        for name, value in observations.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def _dissent_fingerprint(dissent: Sequence[str]) -> str:
    """The set of dissenting locations as the alert remembers it: the names, sorted."""
    names = ",".join(sorted({clean_label(name) for name in dissent}))
    if len(names) <= _MAX_DISSENT_CHARS:
        return names
    return "sha256:" + hashlib.sha256(names.encode()).hexdigest()


def _dissent_listed(fingerprint: str) -> list[str]:
    """The dissenting locations a notification names (none for a digest)."""
    if fingerprint.startswith("sha256:"):
        return []
    return fingerprint.split(",")


def _needs_tick(state: CheckState, policy: AlertPolicy, now: float) -> bool:
    """Whether time alone can change anything for this check: flap history to age out, an
    alert held back (a maintenance window may have ended), or a reminder due."""
    if state.changes:
        return True
    disagreement = state.alerts.get(_DISAGREES.value)
    if (
        disagreement is not None
        and disagreement.active
        and disagreement.notified_severity != disagreement.severity
    ):
        return True  # a new set of dissenting locations held back (receivers know another)
    for alert in state.alerts.values():
        if alert.active and not alert.notified:
            return True
        if (
            alert.notified
            and policy.repeat_interval is not None
            and now - alert.last_notified_at >= policy.repeat_interval
        ):
            return True
    return False
