"""The alert manager's books: each check's alert state, and what changed since it was saved.

One :class:`AlertLedger` is shared by the manager's parts: decisions change it, the state file
(standalone) or the check's record (cluster mode) saves what it says changed, and the
``alivemcp_alerts_firing`` gauge follows it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import AlertKind
from alivemcp.alerting.policy import CheckState

__all__ = ["AlertLedger"]


class AlertLedger:
    """Per check: its alert state; in all: what is out of date on disk or in Kafka."""

    def __init__(self, metrics: AlertingMetrics) -> None:
        self.states: dict[str, CheckState] = {}
        #: Checks whose state is not plain healthy (the tick looks at these only).
        self.attention: set[str] = set()
        #: Checks whose saved entry (state file) or record (cluster mode) is out of date.
        self.changed: set[str] = set()
        #: Bumped on every change worth persisting; the state file is written when it moved.
        self.generation = 0
        #: The id of the next notification (persisted: ids are never reused).
        self.next_id = 1
        self._metrics = metrics
        self._firing: dict[tuple[str, str], str] = {}  # (check, kind) -> severity
        self._firing_counts: Counter[str] = Counter()

    def bump(self) -> None:
        """Something worth persisting changed."""
        self.generation += 1

    def take_id(self) -> int:
        """The id of a new notification."""
        taken = self.next_id
        self.next_id += 1
        return taken

    def note_attention(self, name: str, state: CheckState) -> None:
        if state.is_quiet():
            self.attention.discard(name)
        else:
            self.attention.add(name)

    def track_firing(self, name: str, state: CheckState | None) -> None:
        """Keep ``alivemcp_alerts_firing`` current in O(alerts of this check)."""
        for kind in AlertKind:
            alert = state.alerts.get(kind.value) if state is not None else None
            key = (name, kind.value)
            new = (alert.severity or "warning") if alert is not None and alert.active else None
            old = self._firing.get(key)
            if new == old:
                continue
            if old is not None:
                self._firing_counts[old] -= 1
                del self._firing[key]
            if new is not None:
                self._firing[key] = new
                self._firing_counts[new] += 1
            self._metrics.set_firing(self._firing_counts)

    def active_alerts(self) -> int:
        return sum(1 for s in self.states.values() for a in s.alerts.values() if a.active)

    def firing_alerts(self) -> list[dict[str, Any]]:
        """Alerts that fire now: check, alert kind, severity, since, reason, and whether
        receivers were told (False: held by maintenance, a dependency or flapping)."""
        out = []
        for (name, kind), severity in sorted(self._firing.items()):
            state = self.states.get(name)
            alert = state.alerts.get(kind) if state is not None else None
            if alert is None:
                continue
            out.append(
                {
                    "check": name,
                    "alert": kind,
                    "severity": severity,
                    "since": alert.since,
                    "reason": alert.reason,
                    "notified": alert.notified,
                }
            )
        return out
