"""Prometheus exposition: check results become metrics in this one place.

Per-check series are produced at scrape time from the :class:`StatusStore` by a custom
collector (no per-check metric objects to hold in memory), rendered in a worker thread so a
scrape of 50,000 checks never blocks probing. Engine-wide metrics are ordinary
prometheus-client objects on the same registry.
"""

from __future__ import annotations

import asyncio
import platform
import time
from collections.abc import Iterator, Mapping

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from alivemcp import __version__
from alivemcp.probe import Status
from alivemcp.results import CheckInfo
from alivemcp.status import StatusStore

__all__ = ["ENGINE_METRIC_NAMES", "OBSERVATION_PREFIX", "Metrics"]

prometheus_client.disable_created_metrics()

OBSERVATION_PREFIX = "alivemcp_probe_"
_STATUSES = tuple(Status)

#: Every metric family the engine itself exports (alerting adds its own).
ENGINE_METRIC_NAMES = frozenset(
    {
        "alivemcp_check_up",
        "alivemcp_check_status",
        "alivemcp_check_duration_seconds",
        "alivemcp_check_runs_total",
        "alivemcp_check_last_run_timestamp_seconds",
        "alivemcp_check_status_since_timestamp_seconds",
        "alivemcp_scheduler_lateness_seconds",
        "alivemcp_scheduler_runs_in_flight",
        "alivemcp_scheduler_skipped_runs_total",
        "alivemcp_scheduler_abandoned_probes",
        "alivemcp_checks_configured",
        "alivemcp_build_info",
        "alivemcp_config_last_reload_successful",
        "alivemcp_config_last_reload_success_timestamp_seconds",
        "alivemcp_config_reloads_total",
        "alivemcp_metrics_render_seconds",
    }
)


class _CheckCollector(Collector):
    """Yields the per-check families from the status store at scrape time."""

    def __init__(self, store: StatusStore) -> None:
        self._store = store
        self._labels: dict[str, tuple[CheckInfo, dict[str, str]]] = {}

    def _labels_for(self, info: CheckInfo) -> dict[str, str]:
        cached = self._labels.get(info.name)
        if cached is not None and cached[0] is info:
            return cached[1]
        labels = {**info.labels, "check": info.name, "probe": info.probe_type}
        self._labels[info.name] = (info, labels)
        return labels

    def collect(self) -> Iterator[Metric]:
        up = Metric("alivemcp_check_up", "1 when the check's last run was up.", "gauge")
        status = Metric(
            "alivemcp_check_status",
            "State set of the check's last status: 1 for the current state.",
            "gauge",
        )
        duration = Metric(
            "alivemcp_check_duration_seconds", "Duration of the check's last run.", "gauge"
        )
        runs = Metric("alivemcp_check_runs", "Runs of the check by result.", "counter")
        last_run = Metric(
            "alivemcp_check_last_run_timestamp_seconds",
            "Unix time the check's last run started.",
            "gauge",
        )
        since = Metric(
            "alivemcp_check_status_since_timestamp_seconds",
            "Unix time the check's current status began.",
            "gauge",
        )
        observed: dict[str, Metric] = {}
        names = set()
        for state in self._store.states():
            labels = self._labels_for(state.info)
            names.add(state.info.name)
            for code, count in enumerate(state.runs):
                if count:
                    runs.samples.append(
                        Sample(
                            "alivemcp_check_runs_total",
                            {**labels, "result": _STATUSES[code].value},
                            float(count),
                        )
                    )
            last = state.last
            if last is None:
                continue
            up.samples.append(
                Sample("alivemcp_check_up", labels, 1.0 if last.status is Status.UP else 0.0)
            )
            for s in _STATUSES:
                status.samples.append(
                    Sample(
                        "alivemcp_check_status",
                        {**labels, "status": s.value},
                        1.0 if last.status is s else 0.0,
                    )
                )
            duration.samples.append(
                Sample("alivemcp_check_duration_seconds", labels, last.duration_seconds)
            )
            last_run.samples.append(
                Sample("alivemcp_check_last_run_timestamp_seconds", labels, last.started_at)
            )
            if state.since is not None:
                since.samples.append(
                    Sample("alivemcp_check_status_since_timestamp_seconds", labels, state.since)
                )
            for name, value in last.observations.items():
                _observation(observed, name).samples.append(
                    Sample(OBSERVATION_PREFIX + name, labels, float(value))
                )
            for item in last.labeled_observations:
                _observation(observed, item.name).samples.append(
                    Sample(OBSERVATION_PREFIX + item.name, {**item.labels, **labels},
                           float(item.value))
                )
        for stale in set(self._labels) - names:
            del self._labels[stale]
        yield from (up, status, duration, runs, last_run, since)
        yield from observed.values()


def _observation(families: dict[str, Metric], name: str) -> Metric:
    family = families.get(name)
    if family is None:
        family = Metric(OBSERVATION_PREFIX + name, f"Probe observation {name}.", "gauge")
        families[name] = family
    return family


class Metrics:
    """The daemon's registry and its engine-wide metrics."""

    def __init__(self, store: StatusStore) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_CheckCollector(store))
        r = self.registry
        self.lateness = Histogram(
            "alivemcp_scheduler_lateness_seconds",
            "Actual start of a run minus its planned start.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.in_flight = Gauge(
            "alivemcp_scheduler_runs_in_flight", "Probe runs currently executing.", registry=r
        )
        self.skipped = Counter(
            "alivemcp_scheduler_skipped_runs",
            "Planned runs not started (previous run still going, or missed).",
            ["reason"],
            registry=r,
        )
        Gauge(
            "alivemcp_scheduler_abandoned_probes",
            "Timed-out probe runs that ignored cancellation and still hold resources.",
            registry=r,
        ).set_function(_abandoned)
        self.checks_configured = Gauge(
            "alivemcp_checks_configured", "Configured checks by probe type.", ["probe"],
            registry=r,
        )
        Info("alivemcp_build", "Build information.", registry=r).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self.reload_ok = Gauge(
            "alivemcp_config_last_reload_successful",
            "1 if the last configuration load or reload succeeded.",
            registry=r,
        )
        self.reload_ts = Gauge(
            "alivemcp_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load.",
            registry=r,
        )
        self.reloads = Counter(
            "alivemcp_config_reloads", "Configuration reloads by result.", ["result"], registry=r
        )
        self.render_seconds = Gauge(
            "alivemcp_metrics_render_seconds", "Time the last /metrics render took.", registry=r
        )
        self._render: asyncio.Future[tuple[bytes, str]] | None = None
        self._render_accept: str | None = None

    def set_configured(self, counts: Mapping[str, int]) -> None:
        self.checks_configured.clear()
        for probe, count in counts.items():
            self.checks_configured.labels(probe=probe).set(count)

    def config_loaded(self, ok: bool) -> None:
        self.reloads.labels(result="success" if ok else "failure").inc()
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_ts.set(time.time())

    async def render(self, accept: str | None) -> tuple[bytes, str]:
        """Render in a worker thread; concurrent scrapes with the same Accept share a render."""
        if self._render is not None and not self._render.done() and self._render_accept == accept:
            return await asyncio.shield(self._render)
        self._render_accept = accept
        self._render = asyncio.ensure_future(asyncio.to_thread(self._render_sync, accept))
        return await asyncio.shield(self._render)

    def _render_sync(self, accept: str | None) -> tuple[bytes, str]:
        started = time.perf_counter()
        encoder, content_type = choose_encoder(accept or "")
        body = encoder(self.registry)
        self.render_seconds.set(time.perf_counter() - started)
        return body, content_type


def _abandoned() -> float:
    from alivemcp.runner import abandoned_probes

    return float(abandoned_probes())


def metric_names_in(text: str) -> set[str]:
    """Family names in an exposition text (for tests and the dashboard check)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
    return names
