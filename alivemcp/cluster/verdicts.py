"""Votes in, verdicts out: the quorum stage of cluster mode.

This replica's results arrive from the results pipeline (as soon as a run ends), every other
replica's from the view of the results topic. Each is a vote of its location
(:class:`~alivemcp.cluster.quorum.QuorumBoard`), and each vote gives the check a verdict, which
goes:

- to the status store: recorded on every replica (every /status shows every check), taken as
  a change of status (logged, and on the status-changes topic) only by the replica that
  *decides* the check: the holder of its shard in the deployment-wide verdict group;
- to alerting, paced (see :mod:`.quorum`); alerting evaluates only the checks it holds, so
  one replica of the whole deployment pages, whichever location it is in. A minority of
  locations saying down is a ``location_disagrees`` alert of its own, never a page;
- to history, paced, under the check's name (uptime as users see it), while each location's
  own results go to history under ``check@location`` (from the view only: it reads each
  record once). A verdict made because a vote went stale is no run: not in history.

Every few seconds the board is swept for votes gone stale (a location went quiet), so a
verdict changes even when no new vote arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from alivemcp.cluster.quorum import QuorumBoard, Verdict
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore

__all__ = ["SWEEP_SECONDS", "Verdicts", "location_history_name"]

log = structlog.get_logger("alivemcp.cluster")

#: How often stale votes are looked for.
SWEEP_SECONDS = 2.0


def location_history_name(check: str, location: str) -> str:
    """The name a location's own results of ``check`` are kept under in history."""
    return f"{check}@{location}"


class VerdictAlerts(Protocol):
    """What the quorum stage tells alerting (the AlertManager)."""

    def observe(self, result: CheckResult) -> None: ...

    def observe_disagreement(
        self, check: CheckInfo, dissent: tuple[str, ...], reason: str
    ) -> None: ...


class Verdicts:
    """A results-pipeline stage (this replica's runs) and the view's sink (everyone's)."""

    name = "quorum"

    def __init__(
        self,
        board: QuorumBoard,
        store: StatusStore,
        alerts: VerdictAlerts | None,
        history: HistoryStore | None,
        decides: Callable[[str], bool],
        registry: CollectorRegistry,
        *,
        sweep_every: float = SWEEP_SECONDS,
    ) -> None:
        """``decides(name)``: whether this replica holds the check's shard in the verdict
        group (and its lease is live)."""
        self.board = board
        self.location = board.location
        self.store = store
        self.alerts = alerts
        self.history = history
        self.decides = decides
        self.sweep_every = sweep_every
        self._task: asyncio.Task[None] | None = None
        self._verdicts = Counter(
            "alivemcp_cluster_verdicts",
            "Quorum verdicts made (a vote arrived, or a vote went stale: expired).",
            ["cause"],
            registry=registry,
        )
        for cause in ("vote", "expired"):
            self._verdicts.labels(cause=cause)
        self._by_vote = self._verdicts.labels(cause="vote")  # once per record: looked up once
        registry.register(_LocationCollector(board))
        Gauge(
            "alivemcp_cluster_location_info",
            "1, labelled with this replica's location.",
            ["location"],
            registry=registry,
        ).labels(location=self.location).set(1)

    # -- votes --------------------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        """The pipeline's stage: a run of this replica, a vote of its location."""
        self.take(result, self.location)

    def take(self, result: CheckResult, location: str, *, to_history: bool = True) -> None:
        """A vote of ``location``: decide the check again and pass the verdict on.
        ``to_history`` False: a record history was given by an earlier process (the view's
        replay after a restart)."""
        verdict = self.board.vote(result, location)
        if verdict is not None:
            self._by_vote.inc()
            self._pass_on(verdict, to_history)

    def take_history(self, result: CheckResult, location: str) -> None:
        """A location's own result for history (the view, once per record), when the check
        has several locations (with one, its verdict is its result: kept once, by name)."""
        if self.history is None:
            return
        if len(self.board.locations_of(result.check)) < 2:
            return
        info = dataclasses.replace(
            result.check, name=location_history_name(result.check.name, location)
        )
        self.history.consume(dataclasses.replace(result, check=info))

    def _pass_on(self, verdict: Verdict, to_history: bool = True) -> None:
        result = verdict.result
        name = result.check.name
        if self.decides(name):
            self.store.consume(result)
        else:
            self.store.record(result)
        if not verdict.paced:
            return
        if self.history is not None and to_history:
            self.history.consume(result)
        if self.alerts is not None:
            alert_status = verdict.alert_status
            if alert_status is not None and alert_status is not result.status:
                self.alerts.observe(dataclasses.replace(result, status=alert_status))
            else:
                self.alerts.observe(result)
            self.alerts.observe_disagreement(result.check, verdict.dissent, result.reason)

    # -- stale votes --------------------------------------------------------------------------

    def sweep(self, now: float | None = None) -> int:
        """Decide again the checks one of whose votes went stale; how many changed."""
        changed = 0
        for verdict in self.board.expired(time.time() if now is None else now):
            changed += 1
            self._verdicts.labels(cause="expired").inc()
            # Status and alerting follow it; history does not: it counts verdicts of runs, and
            # a vote going stale is no run (a handover's few quiet seconds were counted as
            # unknown runs of checks that ran on time).
            self._pass_on(verdict, to_history=False)
        return changed

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._sweep_loop(), name="alivemcp-quorum-sweep")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_every)
            try:
                self.sweep()
            except Exception:  # a bug here must not end the sweeps for good
                log.exception("quorum sweep failed")


class _LocationCollector(Collector):
    """Per known location: silent or not, and when its latest result was seen."""

    def __init__(self, board: QuorumBoard) -> None:
        self._board = board

    def collect(self) -> list[GaugeMetricFamily]:
        silent = GaugeMetricFamily(
            "alivemcp_cluster_location_silent",
            "1 while a known location (another than this replica's) has no fresh vote on any "
            "check as this replica sees it (its replicas are dead or cut off from Kafka): it "
            "does not vote.",
            labels=["location"],
        )
        seen = GaugeMetricFamily(
            "alivemcp_cluster_location_last_result_timestamp_seconds",
            "When the latest result of a location was made (unix time).",
            labels=["location"],
        )
        board = self._board
        last = board.last_seen()
        for location, is_silent in board.silent().items():
            # Not of its own location: a replica cut off from Kafka would call every other
            # location silent and never itself, so the rule takes the minimum over the
            # replicas of the other locations (docs/cluster.md).
            if location != board.location:
                silent.add_metric([location], 1.0 if is_silent else 0.0)
            at = last.get(location)
            if at is not None:
                seen.add_metric([location], at)
        return [silent, seen]
