"""The tool-surface metrics, read from the tracker at scrape time.

* ``alivemcp_tool_surface_changes_total{check}``: surfaces that differed from the one before
  (since the daemon started);
* ``alivemcp_tool_surface_approved{check}``: 1 when the check's current surface is approved
  (or watched in ``observe`` mode), 0 while its tool-surface alert stands;
* ``alivemcp_tool_surface_findings{check, rule, severity}``: poisoning signs in the current
  surface, by rule;
* ``alivemcp_tool_surface_versions_pruned_total``, ``alivemcp_tool_surface_dropped_total``,
  ``alivemcp_tool_surface_store_errors_total``: the bounds at work, and a store that fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alivemcp.toolsurface.tracker import SurfaceTracker

__all__ = ["SurfaceCollector"]


class SurfaceCollector(Collector):
    def __init__(self, tracker: SurfaceTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[Metric]:
        tracker = self._tracker
        changes = CounterMetricFamily(
            "alivemcp_tool_surface_changes",
            "Tool surfaces that differed from the check's previous one, since start.",
            labels=["check"],
        )
        for check, count in _copy(tracker.changes_total):
            changes.add_metric([check], count)
        yield changes
        approved = GaugeMetricFamily(
            "alivemcp_tool_surface_approved",
            "1 when the check's current tool surface is approved (or only observed), 0 while "
            "its tool_surface_changed alert stands.",
            labels=["check"],
        )
        for check, state in tracker.approval_states():
            approved.add_metric([check], 1.0 if state else 0.0)
        yield approved
        findings = GaugeMetricFamily(
            "alivemcp_tool_surface_findings",
            "Poisoning signs in the check's current tool surface, by rule.",
            labels=["check", "rule", "severity"],
        )
        for check, found in _copy(tracker.findings):
            for (rule, severity), count in sorted(
                Counter((f.rule, f.severity) for f in found).items()
            ):
                findings.add_metric([check, rule, severity], count)
        yield findings
        for name, help_text, value in (
            (
                "alivemcp_tool_surface_versions_pruned",
                "Stored tool-surface versions pruned by the per-check cap.",
                tracker.pruned_total,
            ),
            (
                "alivemcp_tool_surface_dropped",
                "Surface changes dropped because the tracker's queue was full.",
                tracker.dropped_total,
            ),
            (
                "alivemcp_tool_surface_store_errors",
                "Failed reads or writes of the tool-surface store.",
                tracker.errors_total,
            ),
        ):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], value)
            yield family


V = TypeVar("V")


def _copy(mapping: dict[str, V]) -> list[tuple[str, V]]:
    """The items of a dict the tracker's worker thread may change meanwhile."""
    for _ in range(5):
        try:
            return sorted(mapping.items())
        except RuntimeError:  # changed size during iteration: try again
            continue
    return []
