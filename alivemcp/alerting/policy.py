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
from dataclasses import dataclass, field
from typing import Any

from alivemcp.alerting.config import SEVERITIES, AlertPolicy
from alivemcp.alerting.model import AlertKind, Event
from alivemcp.probe import Status

__all__ = ["AlertState", "CheckState", "apply_result", "reconcile", "update_flapping"]


@dataclass(slots=True)
class AlertState:
    active: bool = False
    severity: str = ""
    since: float = 0.0
    reason: str = ""
    status: str = ""  # the check status that (last) drove this alert
    notified: bool = False
    notified_severity: str = ""
    last_notified_at: float = 0.0
    reminders_sent: int = 0


@dataclass(slots=True)
class CheckState:
    fail_streak: int = 0
    ok_streak: int = 0
    unknown_streak: int = 0
    known_streak: int = 0
    fail_since: float = 0.0
    unknown_since: float = 0.0
    last_status: str = ""
    last_reason: str = ""
    last_up: bool | None = None  # last known (non-unknown) verdict, for flap counting
    changes: list[float] = field(default_factory=list)  # times of up <-> not-up changes
    observations: dict[str, float] = field(default_factory=dict)
    alerts: dict[str, AlertState] = field(default_factory=dict)

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
            or self.alerts.keys() != _ALERT_KINDS
        ):
            return False
        for alert in self.alerts.values():  # noqa: SIM110 (no generator made on every run)
            if alert.active or alert.notified:
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        """Written by hand (``dataclasses.asdict`` deep-copies and is ~10x slower). The latest
        observations are left out: the next result brings fresh ones."""
        return {
            "fail_streak": self.fail_streak,
            "ok_streak": self.ok_streak,
            "unknown_streak": self.unknown_streak,
            "known_streak": self.known_streak,
            "fail_since": self.fail_since,
            "unknown_since": self.unknown_since,
            "last_status": self.last_status,
            "last_reason": self.last_reason,
            "last_up": self.last_up,
            "changes": list(self.changes),
            "alerts": {
                kind: _alert_json(a) for kind, a in self.alerts.items() if a.active or a.notified
            },
        }


_ALERT_KINDS = frozenset(kind.value for kind in AlertKind)


def _alert_json(alert: AlertState) -> dict[str, Any]:
    return {
        "active": alert.active,
        "severity": alert.severity,
        "since": alert.since,
        "reason": alert.reason,
        "status": alert.status,
        "notified": alert.notified,
        "notified_severity": alert.notified_severity,
        "last_notified_at": alert.last_notified_at,
        "reminders_sent": alert.reminders_sent,
    }


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
