"""The route of a result: the one place that declares which stages a finished run goes through,
and in which order, standalone and in cluster mode alike.

::

    scheduler ─► runner ─► ResultPipeline
                             1 admission  cluster mode: drop a result of a check whose shard this
                                          replica no longer holds, or whose lease has lapsed
                             2 status     the status store: the latest state of every check; it
                                          tells its watchers of each change of status
                             3 stream     cluster mode: the results topic (the store's changes of
                                          status go to the status-changes topic)
                             4 alerting   the alert policy, routes and receivers
                             5 history    standalone: uptime, incidents, latency
                             6 surfaces   the tool surface: versions, approvals, and the
                                          tool-surface alert (told to alerting)

In cluster mode history takes its results from the view of the results topic instead of stage
5: the topic carries every replica's results, one source for the history of every check
whoever probed it. The view also records other replicas' results in the status store (never
through this pipeline: they are not this replica's to publish, page or log).

The scheduler's other hook, ``on_start``, marks a check's first run as in flight in the status
store (readiness counts it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from alivemcp.alerting.manager import AlertManager
from alivemcp.cluster.stream import ResultsStream
from alivemcp.engine.pipeline import ResultConsumer, ResultPipeline
from alivemcp.engine.results import CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.toolsurface.tracker import SurfaceTracker

__all__ = ["Admission", "result_route"]


@dataclass(frozen=True, slots=True)
class Admission:
    """The cluster's gate: ``admit(name)`` is the node's (it counts what it withholds)."""

    admit_check: Callable[[str], bool]
    name: str = "admission"

    def admit(self, result: CheckResult) -> bool:
        return self.admit_check(result.check.name)


def result_route(
    *,
    store: StatusStore,
    alerts: AlertManager | None,
    history: HistoryStore | None,
    registry: CollectorRegistry,
    stream: ResultsStream | None = None,
    admission: Admission | None = None,
    surfaces: SurfaceTracker | None = None,
) -> ResultPipeline:
    """The daemon's pipeline. ``stream`` and ``admission`` are cluster mode's; with them,
    ``history`` is left out (the view feeds it)."""
    clustered = stream is not None
    stages: list[ResultConsumer] = [store]
    if stream is not None:
        store.watch(stream.status_changed)
        stages.append(stream)
    if alerts is not None:
        stages.append(alerts)
    if history is not None and not clustered:
        stages.append(history)
    if surfaces is not None:
        stages.append(surfaces)
    return ResultPipeline(stages, registry, gate=admission)
