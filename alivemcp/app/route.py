"""The route of a result: the one place that declares which stages a finished run goes through,
and in which order, standalone and in cluster mode alike.

::

    scheduler ─► runner ─► ResultPipeline
                             1 admission  cluster mode: drop a result of a check whose shard this
                                          replica no longer probes, or whose lease has lapsed
                             2 status     the status store: the latest state of every check; it
                                          tells its watchers of each change of status
                               (cluster)  the quorum stage instead: the result is a vote of this
                                          replica's location; the check's verdict goes to the
                                          status store, alerting and history (cluster/verdicts)
                             3 stream     cluster mode: the results topic (the store's changes of
                                          status go to the status-changes topic)
                             4 alerting   standalone: the alert policy, routes and receivers
                             5 history    standalone: uptime, incidents, latency
                             6 surfaces   the tool surface: versions, approvals, and the
                                          tool-surface alert (told to alerting)

In cluster mode the view of the results topic gives every other replica's results to the
quorum stage as votes of their locations (never through this pipeline: they are not this
replica's to publish), and each location's own results to history under ``check@location``.

The scheduler's other hook, ``on_start``, marks a check's first run as in flight in the status
store (readiness counts it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from alivemcp.alerting.manager import AlertManager
from alivemcp.cluster.stream import ResultsStream
from alivemcp.cluster.verdicts import Verdicts
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
    verdicts: Verdicts | None = None,
) -> ResultPipeline:
    """The daemon's pipeline. ``stream``, ``admission`` and ``verdicts`` are cluster mode's;
    with them, the quorum stage stands for status, alerting and history (it passes verdicts
    on to each)."""
    stages: list[ResultConsumer] = [store if verdicts is None else verdicts]
    if stream is not None:
        store.watch(stream.status_changed)
        stages.append(stream)
    if verdicts is None:
        if alerts is not None:
            stages.append(alerts)
        if history is not None and stream is None:
            stages.append(history)
    if surfaces is not None:
        stages.append(surfaces)
    return ResultPipeline(stages, registry, gate=admission)
