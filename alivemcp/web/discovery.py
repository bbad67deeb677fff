"""What the daemon shows of its discovery sources: ``GET /api/v1/discovery`` and the
``alivemcp_discovery_*`` metric families, both made from the sources' snapshots
(:meth:`alivemcp.discovery.manager.DiscoveryManager.snapshot`) and nothing else.

* :func:`discovery_json`: the API's body.
* :class:`DiscoveryCollector`: a prometheus-client collector to register on the daemon's
  registry; :func:`discovery_families` is what it yields, for tests.

Per source (label ``source``): the time of the last successful refresh (0 before the first),
whether the last refresh succeeded, its duration, the checks it yields, what it skipped by
reason, and failed refreshes by reason (a counter; every reason present from the start, at 0,
so ``increase()`` sees the first one). A source that fails keeps its last good set, so its
``targets`` stay; ``time() - alivemcp_discovery_last_success_timestamp_seconds`` growing past
a few refresh intervals is what to alert on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alivemcp.discovery.found import ERROR_REASONS, SKIP_REASONS
from alivemcp.discovery.manager import SourceSnapshot

__all__ = [
    "DISCOVERY_METRIC_NAMES",
    "DiscoveryCollector",
    "discovery_families",
    "discovery_json",
    "source_json",
]

#: Every family this module exports (a counter without its ``_total``).
DISCOVERY_METRIC_NAMES = frozenset(
    {
        "alivemcp_discovery_last_success_timestamp_seconds",
        "alivemcp_discovery_last_refresh_successful",
        "alivemcp_discovery_last_refresh_duration_seconds",
        "alivemcp_discovery_targets",
        "alivemcp_discovery_skipped_targets",
        "alivemcp_discovery_errors",
    }
)


def source_json(snap: SourceSnapshot) -> dict[str, Any]:
    """One source as ``/api/v1/discovery`` lists it. Times are Unix seconds (null: never)."""
    return {
        "name": snap.name,
        "kind": snap.kind,
        "refresh_seconds": snap.refresh_seconds,
        "last_attempt": snap.last_attempt,
        "last_success": snap.last_success,
        "last_duration_seconds": snap.last_duration_seconds,
        "ok": snap.attempts > 0 and not snap.failing,
        "targets": snap.targets,
        "skipped": dict(sorted(snap.skipped.items())),
        "skipped_examples": {k: list(v) for k, v in sorted(snap.skipped_examples.items())},
        "errors": dict(sorted(snap.errors.items())),
        "last_error": (
            None
            if snap.last_error is None
            else {
                "reason": snap.last_error_reason,
                "message": snap.last_error,
                "at": snap.last_error_at,
            }
        ),
    }


def discovery_json(snapshots: Sequence[SourceSnapshot]) -> dict[str, Any]:
    """The body of ``GET /api/v1/discovery``: ``{"sources": [...]}`` in config order."""
    return {"sources": [source_json(snap) for snap in snapshots]}


def discovery_families(snapshots: Sequence[SourceSnapshot]) -> list[Metric]:
    """The ``alivemcp_discovery_*`` families for these snapshots."""
    success = GaugeMetricFamily(
        "alivemcp_discovery_last_success_timestamp_seconds",
        "Unix time of the source's last successful refresh (0: none yet).",
        labels=["source"],
    )
    healthy = GaugeMetricFamily(
        "alivemcp_discovery_last_refresh_successful",
        "1 if the source's last refresh succeeded (0: it failed, or none finished yet).",
        labels=["source"],
    )
    duration = GaugeMetricFamily(
        "alivemcp_discovery_last_refresh_duration_seconds",
        "How long the source's last refresh took.",
        labels=["source"],
    )
    targets = GaugeMetricFamily(
        "alivemcp_discovery_targets",
        "Checks the source yields now (its last successful refresh's; kept while it fails).",
        labels=["source"],
    )
    skipped = GaugeMetricFamily(
        "alivemcp_discovery_skipped_targets",
        "Entries the source's last successful refresh left out, by reason.",
        labels=["source", "reason"],
    )
    errors = CounterMetricFamily(
        "alivemcp_discovery_errors",
        "Failed refreshes of the source, by reason.",
        labels=["source", "reason"],
    )
    for snap in snapshots:
        source = [snap.name]
        success.add_metric(source, snap.last_success or 0.0)
        healthy.add_metric(source, 1.0 if snap.attempts and not snap.failing else 0.0)
        duration.add_metric(source, snap.last_duration_seconds or 0.0)
        targets.add_metric(source, float(snap.targets))
        for reason in _reasons(SKIP_REASONS, snap.skipped):
            skipped.add_metric([snap.name, reason], float(snap.skipped.get(reason, 0)))
        for reason in _reasons(ERROR_REASONS, snap.errors):
            errors.add_metric([snap.name, reason], float(snap.errors.get(reason, 0)))
    return [success, healthy, duration, targets, skipped, errors]


def _reasons(known: Sequence[str], seen: Any) -> list[str]:
    return [*known, *sorted(r for r in seen if r not in known)]


class DiscoveryCollector(Collector):
    """The discovery families, read from ``snapshots()`` at each scrape: register one on the
    daemon's ``CollectorRegistry`` (``registry.register(DiscoveryCollector(manager.snapshot))``)."""

    def __init__(self, snapshots: Callable[[], Sequence[SourceSnapshot]]) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        yield from discovery_families(self._snapshots())
