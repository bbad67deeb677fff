"""The route of a result (alivemcp.app.route): its stages in their declared order, standalone
and in cluster mode, the cluster's admission gate, and the status store's changes of status
reaching the results stream without the stream reading the store."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from alivemcp.alerting.config import AlertingConfig
from alivemcp.alerting.manager import AlertManager
from alivemcp.app.route import Admission, result_route
from alivemcp.cluster._kafka import ClusterKafka
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.quorum import QuorumBoard
from alivemcp.cluster.stream import ResultsStream
from alivemcp.cluster.verdicts import Verdicts
from alivemcp.engine.status import StatusChange, StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.plumbing import Plumbing
from alivemcp.probe import Status
from tests.support.cluster import cluster_section
from tests.support.results_stream import info, result

CHECKS = [info("svc-a/tools"), info("svc-b/tools")]


def _alerts(tmp_path: Path, *, shared: bool = False) -> AlertManager:
    return AlertManager(
        AlertingConfig(), [(i, None) for i in CHECKS], tmp_path, CollectorRegistry(), shared=shared
    )


def test_standalone_route_is_status_then_alerting_then_history(tmp_path: Path) -> None:
    store = StatusStore()
    history = HistoryStore(tmp_path, HistoryConfig())
    route = result_route(
        store=store, alerts=_alerts(tmp_path), history=history, registry=CollectorRegistry()
    )
    assert route.stages == ("status", "alerting", "history")
    assert route.consumers[0] is store and route.consumers[2] is history


def _cluster_route(tmp_path: Path, owned: set[str]) -> tuple[StatusStore, ResultsStream, Admission]:
    config = ClusterConfig.model_validate(cluster_section("127.0.0.1:9", "route", replica="r1"))
    stream = ResultsStream(config, ClusterKafka(config.kafka, Plumbing()), CollectorRegistry())
    store = StatusStore(replica="r1")
    store.set_checks(CHECKS)
    return store, stream, Admission(lambda name: name in owned)


def test_cluster_route_with_locations_votes_then_streams(tmp_path: Path) -> None:
    """The daemon's cluster route: the quorum stage stands for status, alerting and history
    (it passes each verdict on); the raw result goes to the stream."""
    store, stream, admission = _cluster_route(tmp_path, {"svc-a/tools"})
    alerts = _alerts(tmp_path, shared=True)
    history = HistoryStore(tmp_path, HistoryConfig())
    verdicts = Verdicts(
        QuorumBoard("eu-west"), store, alerts, history, lambda name: True, CollectorRegistry()
    )
    route = result_route(
        store=store,
        alerts=alerts,
        history=history,
        registry=CollectorRegistry(),
        stream=stream,
        admission=admission,
        verdicts=verdicts,
    )
    assert route.stages == ("admission", "quorum", "results_stream")
    route(result(CHECKS[0]))
    state = store.get("svc-a/tools")
    assert state is not None and state.last is not None
    assert state.last.locations is not None and set(state.last.locations) == {"eu-west"}
    assert verdicts.board.votes("svc-a/tools")["eu-west"].status is state.last.status
    assert stream.pending() == 1


def test_cluster_route_gates_first_then_status_stream_alerting_and_no_history(
    tmp_path: Path,
) -> None:
    store, stream, admission = _cluster_route(tmp_path, {"svc-a/tools"})
    route = result_route(
        store=store,
        alerts=_alerts(tmp_path, shared=True),
        history=HistoryStore(tmp_path, HistoryConfig()),  # the view feeds it in cluster mode
        registry=CollectorRegistry(),
        stream=stream,
        admission=admission,
    )
    assert route.stages == ("admission", "status", "results_stream", "alerting")

    route(result(CHECKS[1]))  # a shard this replica does not hold: goes nowhere
    state = store.get("svc-b/tools")
    assert state is not None and state.last is None
    assert stream.pending() == 0

    route(result(CHECKS[0]))
    state = store.get("svc-a/tools")
    assert state is not None and state.last is not None
    assert stream.pending() == 1  # the result; a first result is no change of status


def test_a_change_of_status_is_told_to_the_stream_by_the_store(tmp_path: Path) -> None:
    store, stream, _ = _cluster_route(tmp_path, set())
    seen: list[StatusChange] = []
    store.watch(seen.append)
    route = result_route(
        store=store, alerts=None, history=None, registry=CollectorRegistry(), stream=stream
    )
    check = CHECKS[0]
    route(result(check, Status.UP))
    route(result(check, Status.UP))
    assert (stream.pending(), seen) == (2, [])  # two results, no change yet
    route(result(check, Status.DOWN))
    assert stream.pending() == 4  # the result and its change of status
    assert [(c.result.status, c.before) for c in seen] == [(Status.DOWN, Status.UP)]

    # Another replica's result, recorded by the view, is no change of this replica's to tell.
    store.record(result(check, Status.UP, replica="r2"))
    assert stream.pending() == 4 and len(seen) == 1


def test_a_watcher_that_raises_keeps_the_change_from_no_other(tmp_path: Path) -> None:
    store = StatusStore()
    store.set_checks(CHECKS)
    seen: list[StatusChange] = []

    def broken(change: StatusChange) -> None:
        raise RuntimeError("watcher bug")

    store.watch(broken)
    store.watch(seen.append)
    store.consume(result(CHECKS[0], Status.UP))
    store.consume(result(CHECKS[0], Status.DOWN))
    assert len(seen) == 1
    state = store.get(CHECKS[0].name)
    assert state is not None and state.last is not None and state.last.status is Status.DOWN
