"""Alerting's Prometheus metrics (names are a contract with the dashboard and rules)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from alivemcp.alerting.config import SEVERITIES

__all__ = ["OUTCOMES", "AlertingMetrics"]

#: ``alivemcp_notifications_total{outcome}``: accepted by the receiver; a failed attempt that
#: will be retried; given up (permanent error); discarded (receiver removed from the config).
OUTCOMES = ("delivered", "retried", "permanent_failure", "discarded")


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
            "discarded).",
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
        for severity in SEVERITIES:
            self.alerts_firing.labels(severity)

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
