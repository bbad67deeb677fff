"""Alerting's Prometheus metrics (names are a contract with the dashboard and rules)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from alivemcp.alerting.config import SEVERITIES

__all__ = ["OUTCOMES", "STATE_DISCARD_REASONS", "STATE_SECTIONS", "AlertingMetrics"]

#: ``alivemcp_notifications_total{outcome}``: accepted by the receiver; a failed attempt that
#: will be retried; given up (permanent error); discarded (receiver removed from the config);
#: handed over (cluster mode: its check moved to another replica, which sends it); possibly
#: undelivered (cluster mode: its send was interrupted by a replica's loss, and the receiver
#: must not get a duplicate, so it was not sent again).
OUTCOMES = (
    "delivered",
    "retried",
    "permanent_failure",
    "discarded",
    "handed_over",
    "possibly_undelivered",
)
#: ``alivemcp_alert_state_discarded_total{reason}``: why a saved state file was set aside.
STATE_DISCARD_REASONS = (
    "unreadable",
    "not_a_file",
    "too_large",
    "not_utf8",
    "not_json",
    "bad_shape",
)
#: ``alivemcp_alert_state_entries_dropped_total{section}``: where a damaged entry was.
STATE_SECTIONS = ("checks", "notifications", "receivers")


class AlertingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.alerts_firing = Gauge(
            "alivemcp_alerts_firing",
            "Alerts currently firing (target, probe-broken and flapping alerts), by severity.",
            ["severity"],
            registry=registry,
        )
        self.notifications = Counter(
            "alivemcp_notifications_total",
            "Notifications by receiver and outcome (delivered, retried, permanent_failure, "
            "discarded; cluster mode: handed_over to the replica taking the check, "
            "possibly_undelivered when a replica lost mid-send cannot be repeated safely).",
            ["receiver", "outcome"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "alivemcp_notification_queue_depth",
            "Notifications waiting for delivery, by receiver.",
            ["receiver"],
            registry=registry,
        )
        self.oldest_age = Gauge(
            "alivemcp_notification_oldest_undelivered_age_seconds",
            "Age of the oldest undelivered notification (0 when the queue is empty).",
            ["receiver"],
            registry=registry,
        )
        self.permanent_failures = Counter(
            "alivemcp_notification_permanent_failures_total",
            "Sends a receiver rejected for good (revoked webhook, invalid event): not retried.",
            ["receiver"],
            registry=registry,
        )
        self.state_discarded = Counter(
            "alivemcp_alert_state_discarded_total",
            "Saved alert state files that could not be trusted (unreadable, not a regular "
            "file, too large, not UTF-8, not JSON, wrong shape or version): moved aside, "
            "alerting started clean.",
            ["reason"],
            registry=registry,
        )
        self.state_entries_dropped = Counter(
            "alivemcp_alert_state_entries_dropped_total",
            "Damaged entries left out of the saved alert state at start (one check's state, "
            "one queued notification, one receiver's state); the rest was restored.",
            ["section"],
            registry=registry,
        )
        for severity in SEVERITIES:
            self.alerts_firing.labels(severity)
        for reason in STATE_DISCARD_REASONS:
            self.state_discarded.labels(reason)
        for section in STATE_SECTIONS:
            self.state_entries_dropped.labels(section)

    def add_receiver(self, name: str) -> None:
        for outcome in OUTCOMES:
            self.notifications.labels(name, outcome)
        self.permanent_failures.labels(name)

    def remove_receiver(self, name: str) -> None:
        for outcome in OUTCOMES:
            _remove(self.notifications, name, outcome)
        for metric in (self.queue_depth, self.oldest_age, self.permanent_failures):
            _remove(metric, name)

    def set_firing(self, counts: Mapping[str, int]) -> None:
        for severity in SEVERITIES:
            self.alerts_firing.labels(severity).set(counts.get(severity, 0))


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
