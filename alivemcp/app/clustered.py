"""A replica's cluster-mode parts, how they are wired, started and stopped (docs/cluster.md).

Two consumer groups, both over the results topic's partitions (the shards):

- the **probing group** of this replica's location (``ClusterConfig.probing_group``): its
  shards are the checks this replica probes; the results stream and probing listen to it;
- the **verdict group** of the whole deployment (``ClusterConfig.verdict_group``): its shards
  are the checks whose quorum verdict this replica decides (status changes, metrics), pages for
  and keeps the alert state of; the alert-state log listens to it.

So every location probes each of its checks, and one replica of the whole deployment pages
for it, whichever location it is in; when that replica dies, another takes its shards and
their alert state (no re-page). With a single location the verdict is that location's result,
as before locations.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from alivemcp.alerting.manager import AlertManager
from alivemcp.cluster._kafka import ClusterKafka
from alivemcp.cluster.alert_state import AlertStateLog
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.node import ClusterNode
from alivemcp.cluster.probing import ProbingListener
from alivemcp.cluster.quorum import QuorumBoard
from alivemcp.cluster.shards import ShardMap
from alivemcp.cluster.stream import ResultsStream
from alivemcp.cluster.topics import ClusterTopicsError, KafkaUnavailableError, ensure_topics
from alivemcp.cluster.verdicts import Verdicts
from alivemcp.cluster.view import ResultsView
from alivemcp.config import ResolvedCheck
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.toolsurface.tracker import SurfaceTracker
from alivemcp.web.metrics import Metrics

__all__ = ["CLUSTER_STOP_SECONDS", "ClusterParts", "cluster_parts"]

log = structlog.get_logger("alivemcp.app.daemon")

#: The probing node's revoke (probing stopped, up to 5 s for the results stream's flush), the
#: verdict node's (the alert state written: a request timeout and a second), then the stream,
#: alert-state and view stops, one after the other.
CLUSTER_STOP_SECONDS = {
    "node": 8.0,
    "verdict_node": 5.0,
    "stream": 3.0,
    "alert_state": 3.0,
    "view": 2.0,
}
#: Between two attempts to ensure the cluster topics while Kafka does not answer.
TOPICS_RETRY_SECONDS = 5.0


@dataclass
class ClusterParts:
    """A replica's cluster-mode components."""

    config: ClusterConfig
    kafka: ClusterKafka
    #: The probing group of this location: the checks probed here.
    node: ClusterNode
    #: The deployment's verdict group: the checks decided, paged for, kept here.
    verdict_node: ClusterNode
    stream: ResultsStream
    view: ResultsView
    alert_state: AlertStateLog
    probing: ProbingListener
    verdicts: Verdicts

    def decides(self, name: str) -> bool:
        """Whether this replica decides the check's verdict (held in the verdict group, lease
        live): it logs and publishes its changes of status and exports its series."""
        return self.verdict_node.may_publish(name)

    def last_run_here(self, name: str) -> float | None:
        """When this location last ran the check, as far as the board knows (unix time)."""
        vote = self.verdicts.board.votes(name).get(self.config.location)
        return vote.started_at if vote is not None else None

    async def start(self, fail: Callable[[str], None]) -> None:
        """Topics, then view, stream, alert state, the quorum sweep and the nodes (whose
        assignments start the probing). Kafka not answering is retried; a topic layout that
        cannot serve the config is passed to ``fail`` (the daemon stops)."""
        while True:
            try:
                created = await ensure_topics(self.config, self.kafka)
                break
            except ClusterTopicsError as exc:
                print(f"alivemcp: {exc}", file=sys.stderr, flush=True)
                log.error("cluster topics unusable; stopping", error=str(exc))
                fail(str(exc))
                return
            except KafkaUnavailableError as exc:
                log.warning(
                    "cannot reach the cluster's Kafka to check its topics; retrying",
                    error=str(exc),
                    kafka=self.kafka.describe(),
                )
                await asyncio.sleep(TOPICS_RETRY_SECONDS)
        await self.view.start()
        await self.stream.start()
        await self.alert_state.start()
        await self.verdicts.start()
        await self.verdict_node.start()
        await self.node.start()
        log.info(
            "cluster mode: joining the groups",
            location=self.config.location,
            probing_group=self.config.probing_group,
            verdict_group=self.config.verdict_group,
            replica=self.config.replica_id,
            shards=self.config.shards,
            topics_created=created,
            kafka=self.kafka.describe(),
        )

    async def stop(self) -> None:
        budget = CLUSTER_STOP_SECONDS
        await self.node.stop(budget["node"])
        await self.verdict_node.stop(budget["verdict_node"])
        await self.stream.stop(budget["stream"])
        await self.alert_state.stop(budget["alert_state"])
        await self.verdicts.stop()
        await self.view.stop(budget["view"])


def cluster_parts(
    config: ClusterConfig,
    kafka: ClusterKafka,
    stream: ResultsStream,
    verdicts: Verdicts,
    *,
    store: StatusStore,
    history: HistoryStore | None,
    alerts: AlertManager,
    surfaces: SurfaceTracker,
    metrics: Metrics,
    data_dir: Path,
    scheduler: Scheduler,
    checks: Callable[[], Sequence[ResolvedCheck]],
    build: Callable[[ResolvedCheck], ProbeHandle],
    retire: Callable[[list[ProbeHandle]], None],
) -> ClusterParts:
    registry = metrics.registry
    view = ResultsView(
        config,
        kafka,
        store,
        history,
        data_dir,
        registry,
        surfaces=surfaces,
        votes=verdicts,
    )
    shard_of = ShardMap(config.shards)
    alert_state = AlertStateLog(
        config,
        kafka,
        alerts,
        registry,
        # A changed surface is judged once: if that was before the shard's alert state was
        # adopted here (the probing group may hand the check over first), judged again now.
        on_adopted=lambda shards: surfaces.redeliver(lambda name: shard_of(name) in shards),
    )
    parts: ClusterParts | None = None

    def last_run(name: str) -> float | None:
        return parts.last_run_here(name) if parts is not None else None

    async def read_gained(shards: frozenset[int]) -> object:
        # A shard that comes straight back has no results newer than this replica's own.
        new = shards - node.returning
        return await view.read_to_end(new) if new else True

    location = config.location
    probing = ProbingListener(
        scheduler,
        shard_of,
        checks,
        build,
        retire,
        last_run=last_run,
        # The previous owner's last results read before ``last_run`` is asked (bounded).
        before_probing=read_gained,
        probed_here=lambda check: check.probed_in(location),
        returning=lambda: node.returning,
    )
    # Told in this order of shards gained, in reverse of shards lost: probing stops before its
    # results are flushed.
    node = ClusterNode(
        config,
        kafka,
        [stream, probing],
        registry,
        shard_map=shard_of,
        group=config.probing_group,
    )
    verdict_node = ClusterNode(
        config,
        kafka,
        [alert_state],
        registry,
        shard_map=shard_of,
        group=config.verdict_group,
        role="verdict",
    )
    parts = ClusterParts(
        config, kafka, node, verdict_node, stream, view, alert_state, probing, verdicts
    )
    metrics.checks.set_owned(parts.decides)
    store.decides = parts.decides
    return parts


def quorum_board(config: ClusterConfig) -> QuorumBoard:
    return QuorumBoard(config.location, config.freshness_intervals)
