"""The engine's own instruments, declared beside the code that owns them.

Every component registers its instruments the same way: a small class built with the
daemon's ``CollectorRegistry`` creates them there (``registry=registry``), and the component
keeps the instance (alerting's ``AlertingMetrics``, the cluster's per-component metrics,
history's collector). The web layer only exposes the registry; it declares the families of
the checks themselves and of its own rendering, nothing of the engine's.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from alivemcp.engine.runner import abandoned_probes

__all__ = ["SchedulerMetrics"]

LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class SchedulerMetrics:
    """What the scheduler reports: lateness, runs in flight, skipped and abandoned runs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lateness = Histogram(
            "alivemcp_scheduler_lateness_seconds",
            "Actual start of a run minus its planned start.",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "alivemcp_scheduler_runs_in_flight",
            "Probe runs currently executing.",
            registry=registry,
        )
        self.skipped = Counter(
            "alivemcp_scheduler_skipped_runs",
            "Planned runs not started (previous run still going, or missed).",
            ["reason"],
            registry=registry,
        )
        for reason in ("overlap", "missed"):  # present at zero, so rate() works from the start
            self.skipped.labels(reason=reason)
        Gauge(
            "alivemcp_scheduler_abandoned_probes",
            "Timed-out probe runs that ignored cancellation and still hold resources.",
            registry=registry,
        ).set_function(lambda: float(abandoned_probes()))
