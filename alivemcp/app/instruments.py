"""The daemon's own instruments: configuration loads and the configured checks."""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["ConfigMetrics"]


class ConfigMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.checks_configured = Gauge(
            "alivemcp_checks_configured",
            "Configured checks by probe type.",
            ["probe"],
            registry=registry,
        )
        self.reload_ok = Gauge(
            "alivemcp_config_last_reload_successful",
            "1 if the last configuration load or reload succeeded.",
            registry=registry,
        )
        self.reload_ts = Gauge(
            "alivemcp_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load.",
            registry=registry,
        )
        self.reloads = Counter(
            "alivemcp_config_reloads",
            "Configuration reloads by result.",
            ["result"],
            registry=registry,
        )

    def set_configured(self, counts: Mapping[str, int]) -> None:
        self.checks_configured.clear()
        for probe, count in counts.items():
            self.checks_configured.labels(probe=probe).set(count)

    def config_loaded(self, ok: bool) -> None:
        self.reloads.labels(result="success" if ok else "failure").inc()
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_ts.set(time.time())
