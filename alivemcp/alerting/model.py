"""What flows from the policy to the receivers: one notification about one alert of one check."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = ["AlertKind", "Event", "Notification", "dedup_key"]


class AlertKind(StrEnum):
    """A check has up to five independent alerts, each with its own lifecycle and key."""

    TARGET = "target"  # the target is degraded/down: pages the target's owners
    PROBE_BROKEN = "probe_broken"  # the prober cannot decide (unknown): the prober's owners
    FLAPPING = "flapping"  # too many state changes: one notice instead of a stream
    #: The target's tool surface differs from the approved one (or has findings): routed with
    #: the label ``alert="tool_surface_changed"``, e.g. to a security channel.
    TOOL_SURFACE = "tool_surface_changed"
    #: Cluster mode with several locations: some of the check's locations say down, fewer
    #: than its quorum (the verdict is degraded, nobody is paged). A lower-severity notice,
    #: routed with the label ``alert="location_disagrees"``.
    LOCATION_DISAGREES = "location_disagrees"


class Event(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"
    REMINDER = "reminder"
    TEST = "test"


_MAX_DEDUP = 255


def dedup_key(check: str, kind: AlertKind) -> str:
    """Deterministic per check and kind, so a restart reuses the open incident's key."""
    key = f"alivemcp/{check}" if kind is AlertKind.TARGET else f"alivemcp/{check}/{kind.value}"
    if len(key) <= _MAX_DEDUP:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: _MAX_DEDUP - 17]}~{digest}"


@dataclass(slots=True)
class Notification:
    """One message about one alert. Persisted as JSON while undelivered."""

    id: int  # increases across restarts: the order notifications were decided in
    check: str
    probe_type: str
    kind: AlertKind
    event: Event
    severity: str
    status: str  # the check's latest status when this was decided
    reason: str
    since: float  # when the alert started (unix time)
    created_at: float  # when this was decided (policy clock)
    dedup_key: str
    labels: dict[str, str] = field(default_factory=dict)
    observations: dict[str, float] = field(default_factory=dict)
    note: str = ""  # e.g. "held by maintenance 'nightly' until now"
    enqueued_at: float = 0.0  # wall time it entered a receiver queue (queue age metric)
    #: Several lines for the message body (tool surface: the change per item, the findings);
    #: inert text, bounded.
    summary: str = ""
    #: Structured facts for webhooks (tool surface: from, to, changes, findings); bounded.
    details: dict[str, Any] = field(default_factory=dict)
    #: Serialised form, cached: a queued notification is written to disk many times.
    _text: str | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "check": self.check,
            "probe_type": self.probe_type,
            "kind": self.kind.value,
            "event": self.event.value,
            "severity": self.severity,
            "status": self.status,
            "reason": self.reason,
            "since": self.since,
            "created_at": self.created_at,
            "dedup_key": self.dedup_key,
            "labels": dict(self.labels),
            "observations": dict(self.observations),
            "note": self.note,
            "enqueued_at": self.enqueued_at,
            "summary": self.summary,
            "details": self.details,
        }

    def json_text(self) -> str:
        """The JSON text of this notification (fixed once it is queued)."""
        if self._text is None:
            self._text = json.dumps(self.to_json(), separators=(",", ":"))
        return self._text

    def copy(self) -> Notification:
        """An independent copy (one per receiver: each stamps its own ``enqueued_at``)."""
        return replace(
            self,
            labels=dict(self.labels),
            observations=dict(self.observations),
            details=dict(self.details),
            _text=None,
        )

    @property
    def firing(self) -> bool:
        return self.event in (Event.FIRING, Event.REMINDER)

    def title(self) -> str:
        if self.event is Event.TEST:
            return f"TEST {self.check}: test notification"
        what = {
            AlertKind.TARGET: self.status if self.firing else "recovered",
            AlertKind.PROBE_BROKEN: "probe broken" if self.firing else "probe working again",
            AlertKind.FLAPPING: "flapping" if self.firing else "stopped flapping",
            AlertKind.TOOL_SURFACE: (
                "tool surface changed" if self.firing else "tool surface approved"
            ),
            AlertKind.LOCATION_DISAGREES: (
                "locations disagree" if self.firing else "locations agree again"
            ),
        }[self.kind]
        prefix = {
            Event.FIRING: "FIRING",
            Event.RESOLVED: "RESOLVED",
            Event.REMINDER: "STILL FIRING",
        }[self.event]
        return f"{prefix} [{self.severity}] {self.check}: {what}"
