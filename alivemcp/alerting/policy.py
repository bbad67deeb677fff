"""The alert policy of one check: thresholds, severities, flap detection, reminders.

Pure state machines with an explicit ``now`` (no clock, no I/O), so they are easy to test and
to persist. Every check has up to three alerts (see :class:`AlertKind`); each remembers both
what the policy believes (``active``) and what receivers were told (``notified``). Suppression
(maintenance, dependencies, flapping) only holds back *pages*: when it ends, :func:`reconcile`
sends whatever differs, so the true state always reaches receivers. Resolves are never held:
a stale open incident is worse than an early all-clear.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from pydantic import Field, Strict

from alivemcp.alerting.bounds import (
    Changes,
    Count,
    Flag,
    Observations,
    SeverityOrNone,
    StatusOrNone,
    Text,
    Timestamp,
)
from alivemcp.alerting.config import SEVERITIES, AlertPolicy
from alivemcp.alerting.model import AlertKind, Event
from alivemcp.probe import Status

__all__ = ["AlertState", "CheckState", "apply_result", "reconcile", "update_flapping"]

#: A key of :attr:`CheckState.alerts`: an :class:`AlertKind`'s value.
AlertKindName = Annotated[
    str, Strict(), Field(pattern="^(" + "|".join(kind.value for kind in AlertKind) + ")$")
]


@dataclass(slots=True)
class AlertState:
    """One alert of a check. The field types carry the bounds a saved copy is held to
    (:mod:`alivemcp.alerting.bounds`); :mod:`alivemcp.alerting.saved` validates against this
    very class."""

    active: Flag = False
    severity: SeverityOrNone = ""
    since: Timestamp = 0.0
    reason: Text = ""
    status: StatusOrNone = ""  # the check status that (last) drove this alert
    notified: Flag = False
    notified_severity: SeverityOrNone = ""
    last_notified_at: Timestamp = 0.0
    reminders_sent: Count = 0
    #: What the last notification was about, when the alert can fire again for something new
    #: while active (tool surface: the surface's digest, or "flapping").
    fingerprint: Text = ""


@dataclass(slots=True)
class CheckState:
    """The policy state of one check (bounded like :class:`AlertState`)."""

    fail_streak: Count = 0
    ok_streak: Count = 0
    unknown_streak: Count = 0
    known_streak: Count = 0
    fail_since: Timestamp = 0.0
    unknown_since: Timestamp = 0.0
    last_status: StatusOrNone = ""
    last_reason: Text = ""
    last_up: Flag | None = None  # last known (non-unknown) verdict, for flap counting
    changes: Changes = field(default_factory=list)  # times of up <-> not-up changes
    observations: Observations = field(default_factory=dict)
    alerts: dict[AlertKindName, AlertState] = field(default_factory=dict)

    def alert(self, kind: AlertKind) -> AlertState:
        state = self.alerts.get(kind.value)
        if state is None:
            state = self.alerts[kind.value] = AlertState()
        return state

    def is_quiet(self) -> bool:
        """Nothing worth persisting: a healthy check restarts from a clean slate."""
        return (
            self.fail_streak == 0
            and self.unknown_streak == 0
            and not self.changes
            and not any(a.active or a.notified for a in self.alerts.values())
        )

    def steadily_up(self) -> bool:
        """Whether an ``up`` result would change nothing but the latest status, reason and
        observations and the two success streaks: the last known verdict was up, no failure or
        unknown streak, no flap history, and all three alerts made, none active or told to
        receivers. Such a check stays quiet (:meth:`is_quiet`) after the result, whatever its
        policy: apply_result only resolves alerts that are active and only counts a change
        against a verdict that differs, and update_flapping has no changes to count."""
        if (
            self.last_up is not True
            or self.fail_streak
            or self.unknown_streak
            or self.changes
            or not self.alerts.keys() >= _ALERT_KINDS
        ):
            return False
        for alert in self.alerts.values():  # noqa: SIM110 (no generator made on every run)
            if alert.active or alert.notified:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """What is saved: every field but the latest observations (the next result brings
        fresh ones), and only the alerts worth keeping. By a precomputed list of names, not
        ``dataclasses.asdict`` (it deep-copies and is ~10x slower)."""
        saved = {name: getattr(self, name) for name in SAVED_SCALARS}
        saved["changes"] = list(self.changes)
        saved["alerts"] = {
            kind: {name: getattr(a, name) for name in ALERT_FIELDS}
            for kind, a in self.alerts.items()
            if a.active or a.notified
        }
        return saved


#: The alerts every result decides (the tool-surface alert is decided by surface changes,
#: the location_disagrees one by the quorum of locations).
_ALERT_KINDS = frozenset(
    kind.value for kind in (AlertKind.TARGET, AlertKind.PROBE_BROKEN, AlertKind.FLAPPING)
)
#: The fields a saved alert has, all of them required when read back.
ALERT_FIELDS = tuple(f.name for f in fields(AlertState))
#: The saved fields of a check's state besides ``changes`` and ``alerts`` (also required).
SAVED_SCALARS = tuple(
    f.name for f in fields(CheckState) if f.name not in ("changes", "observations", "alerts")
)


def severity_for(status: Status, policy: AlertPolicy, labels: Mapping[str, str]) -> str:
    if status is Status.DEGRADED:
        label = labels.get("severity_degraded")
        return label if label in SEVERITIES else policy.severity_degraded
    label = labels.get("severity")
    return label if label in SEVERITIES else policy.severity_down


def apply_result(
    state: CheckState,
    status: Status,
    reason: str,
    now: float,
    policy: AlertPolicy,
    labels: Mapping[str, str],
    observations: Mapping[str, float] | None = None,
) -> None:
    """Fold one result into the check's streaks and alerts' ``active`` flags."""
    state.last_status = status.value
    state.last_reason = reason
    state.observations = dict(observations or {})
    target = state.alert(AlertKind.TARGET)
    broken = state.alert(AlertKind.PROBE_BROKEN)

    if status is Status.UNKNOWN:
        # The prober could not decide: say nothing about the target (its streaks hold).
        if state.unknown_streak == 0:
            state.unknown_since = now
        state.unknown_streak += 1
        state.known_streak = 0
        if state.unknown_streak >= policy.failures_to_fire:
            if not broken.active:
                broken.since = state.unknown_since
            broken.active = True
            broken.reason = reason
        return

    state.known_streak += 1
    state.unknown_streak = 0
    if broken.active and state.known_streak >= policy.successes_to_resolve:
        broken.active = False
        broken.reason = reason

    is_up = status is Status.UP
    if state.last_up is not None and state.last_up != is_up:
        state.changes.append(now)
    state.last_up = is_up

    if is_up:
        state.ok_streak += 1
        state.fail_streak = 0
        if target.active and state.ok_streak >= policy.successes_to_resolve:
            target.active = False
            target.reason = reason
        return
    if state.fail_streak == 0:
        state.fail_since = now
    state.fail_streak += 1
    state.ok_streak = 0
    if target.active or state.fail_streak >= policy.failures_to_fire:
        if not target.active:
            target.since = state.fail_since
        target.active = True
        target.severity = severity_for(status, policy, labels)
        target.reason = reason
        target.status = status.value


def update_flapping(state: CheckState, now: float, policy: AlertPolicy) -> None:
    """Forget changes older than the window; start or end the flapping alert (with hysteresis,
    so a check hovering at the threshold does not flap between flapping and not)."""
    horizon = now - policy.flap_window
    if state.changes and state.changes[0] < horizon:
        state.changes = [t for t in state.changes if t >= horizon]
    flapping = state.alert(AlertKind.FLAPPING)
    if policy.flap_threshold <= 0:
        flapping.active = False
        return
    count = len(state.changes)
    if not flapping.active and count >= policy.flap_threshold:
        flapping.active = True
        flapping.since = now
        flapping.reason = f"{count} state changes within {policy.flap_window:g}s"
    elif flapping.active and count <= policy.flap_threshold // 2:
        flapping.active = False
        flapping.reason = f"{count} state changes within {policy.flap_window:g}s"


def reconcile(alert: AlertState, now: float, policy: AlertPolicy, held: bool) -> Event | None:
    """What to tell receivers so they agree with the policy, and record that it was told.

    ``held``: pages are suppressed now (maintenance, a failing dependency, flapping).
    """
    if not alert.active:
        if alert.notified:
            alert.notified = False
            alert.notified_severity = ""
            alert.reminders_sent = 0
            return Event.RESOLVED
        return None
    if held:
        return None
    if not alert.notified or alert.notified_severity != alert.severity:
        first = not alert.notified
        alert.notified = True
        alert.notified_severity = alert.severity
        alert.last_notified_at = now
        if first:
            alert.reminders_sent = 0
        return Event.FIRING
    if (
        policy.repeat_interval is not None
        and now - alert.last_notified_at >= policy.repeat_interval
        and (policy.max_reminders is None or alert.reminders_sent < policy.max_reminders)
    ):
        alert.last_notified_at = now
        alert.reminders_sent += 1
        return Event.REMINDER
    return None
