"""kafka_consumer_lag: are the consumer groups keeping up with their topics?

For every configured group (names in ``groups`` and/or a ``group_pattern`` regex) and every
partition it has committed offsets for, the probe compares the committed offset with the
partition's log-end offset (the offset lag, in messages) and measures the time lag: the age of
the first message the group has not consumed yet. The time lag is read from that message's own
timestamp (one batched Fetch per broker) when it can be read; otherwise (``time_lag: estimate``,
no Read permission, message deleted by retention) it is estimated like kafka-lag-exporter does,
by interpolating over a table of (log-end offset, time) points the probe keeps between runs
(extrapolating with the table's write rate below its first point, or, with no writes seen,
reporting the lower bound "at least since the first point"). Lagging partitions whose time
lag is not known yet (first run, nothing readable) are counted in
``time_lag_unknown_partitions`` and judged on their offset lag alone.

Each partition also keeps a window of its last ``window`` samples (committed offset, log-end
offset), evaluated like Burrow:

- ``rewind``: the committed offset went back inside the window (a reset or a replay);
- ``stop``: the committed offset did not move over the whole window, the lag stayed above zero,
  and the group has no active members (the consumers are gone);
- ``stall``: the same, but the group still has members, or its membership is not visible
  (KIP-848 groups): consumers are there but not making progress;
- ``warn``: the lag grew on every run of the whole window (the consumers are falling behind).

Verdicts (the worst partition decides; the reason names its group, topic and partition):

- ``up``: every partition under the thresholds and no window finding;
- ``degraded``: a partition over ``max_lag_seconds`` / ``max_lag_messages``, or a ``warn`` or
  ``rewind`` finding, or a ``stop``/``stall`` while the lag is still under the thresholds;
- ``down``: a partition over ``down_lag_seconds`` / ``down_lag_messages``, or ``stop``/``stall``
  with the lag over the ``max_lag_*`` thresholds (the consumers are not coming back on their
  own), or a group named in ``groups`` that has no committed offsets (gone, or its offsets
  expired);
- ``unknown``: the prober could not read the group or the cluster (own credentials refused,
  cluster unreachable, coordinator errors), or ``group_pattern`` matched no group and no group
  is named: the prober cannot tell a typo from a vanished fleet. Name the groups you depend on
  in ``groups`` to get ``down`` when they vanish.

A real finding beats missing information: ``down`` > ``degraded`` > ``unknown`` > ``up``.

Every request gets a slice of the check's timeout: a broker that accepts connections but
answers nothing makes what it owes ``unknown`` (the group it coordinates, the partitions it
leads, each naming the broker and its address), never the engine's anonymous timeout, and is
not asked again until it answers a re-test.

Observations: totals over all groups, plus per-group maxima and sums as labeled observations
(label ``group``). Per-partition series (``partition_offset_lag_messages``,
``partition_time_lag_seconds``; labels group, topic, partition; ``topic_*`` with labels group,
topic from CloudWatch) only with ``per_partition_metrics: true``: they multiply series by the
partition count.

``source: cloudwatch`` reads MSK's own ``AWS/Kafka`` metrics (``MaxOffsetLag``,
``EstimatedMaxTimeLag``, ``SumOffsetLag`` per Cluster Name / Consumer Group / Topic) for
clusters the prober cannot reach. CloudWatch has no per-partition offsets, so there the window
rule is ``warn`` only (SumOffsetLag grew over the last ``window`` periods) and a group/topic
without datapoints is ``unknown``.
"""

from __future__ import annotations

import time
from typing import ClassVar

from alivemcp.errors import ProbeError
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.kafka import RunBudget, cluster_failure
from alivemcp.probe import CheckContext, Observable, Probe, ProbeResult, Status
from probes.kafka_consumer_lag.cloudwatch import CloudWatchLagReader, judge_cloudwatch
from probes.kafka_consumer_lag.evaluate import LagEvaluator
from probes.kafka_consumer_lag.kafka_source import KafkaLagReader
from probes.kafka_consumer_lag.params import KafkaConsumerLagParams
from probes.kafka_consumer_lag.summary import summarize

__all__ = ["KafkaConsumerLagProbe"]


class KafkaConsumerLagProbe(Probe[KafkaConsumerLagParams]):
    Params = KafkaConsumerLagParams
    summary: ClassVar[str] = (
        "Consumer group lag in messages and seconds, with Burrow-style stop/stall/rewind/warn "
        "windows; brokers or MSK CloudWatch metrics"
    )
    default_timeout: ClassVar[float | None] = 30.0
    observables = (
        Observable("groups", "Consumer groups evaluated."),
        Observable("partitions", "Group-partitions evaluated."),
        Observable("lagging_partitions", "Group-partitions with any offset lag."),
        Observable(
            "degraded_partitions",
            "Group-partitions judged degraded (e.g. falling behind, lag over max_lag_seconds).",
        ),
        Observable("down_partitions", "Group-partitions judged down (stopped, stalled)."),
        Observable(
            "time_lag_unknown_partitions",
            "Lagging group-partitions whose time lag is not known yet.",
        ),
        Observable("max_offset_lag_messages", "Largest offset lag of any group-partition."),
        Observable("sum_offset_lag_messages", "Offset lag summed over all group-partitions."),
        Observable("max_time_lag_seconds", "Largest time lag of any group-partition."),
        Observable("group_max_offset_lag_messages", "Largest offset lag in the group.", ("group",)),
        Observable(
            "group_sum_offset_lag_messages", "Offset lag summed over the group.", ("group",)
        ),
        Observable("group_max_time_lag_seconds", "Largest time lag in the group.", ("group",)),
        Observable(
            "partition_offset_lag_messages",
            "Offset lag of one group-partition.",
            ("group", "topic", "partition"),
        ),
        Observable(
            "partition_time_lag_seconds",
            "Time lag of one group-partition.",
            ("group", "topic", "partition"),
        ),
        Observable(
            "topic_offset_lag_messages",
            "Offset lag of one group's topic (CloudWatch source).",
            ("group", "topic"),
        ),
        Observable(
            "topic_time_lag_seconds",
            "Time lag of one group's topic (CloudWatch source).",
            ("group", "topic"),
        ),
    )

    def __init__(self, context: CheckContext, params: KafkaConsumerLagParams) -> None:
        super().__init__(context, params)
        self._evaluator = LagEvaluator(params.window, params.thresholds())
        self._reader: KafkaLagReader | None = None
        self._cloudwatch = CloudWatchLagReader()

    async def probe(self) -> ProbeResult:
        if self.params.source == "cloudwatch":
            return await self._probe_cloudwatch()
        return await self._probe_kafka()

    async def _probe_kafka(self) -> ProbeResult:
        conn = self.params.cluster
        assert conn is not None  # the params validator guarantees it
        cluster = plumbing_of(self.context).kafka.cluster(conn)
        if self._reader is None or self._reader.cluster is not cluster:
            self._reader = KafkaLagReader(cluster)  # it remembers group coordinators
        try:
            snapshot = await self._reader.read(
                self.params, RunBudget.for_check(self.context.timeout)
            )
        except ProbeError as err:
            # Whatever kind: the groups were not read, so nothing is known about them.
            return cluster_failure(err, "cannot read consumer lag", otherwise=Status.UNKNOWN)
        evaluation = self._evaluator.evaluate(snapshot)
        return summarize(
            evaluation,
            per_partition_metrics=self.params.per_partition_metrics,
            thresholds=self._evaluator.thresholds,
            empty_reason=self._nothing_reason(snapshot.selected > 0),
        )

    async def _probe_cloudwatch(self) -> ProbeResult:
        source = self.params.cloudwatch
        assert source is not None
        try:
            client = await plumbing_of(self.context).aws.client("cloudwatch", source.aws)
            series = await self._cloudwatch.read(client, source, self.params, time.time())
        except ProbeError as err:  # CloudWatch failing says nothing about the groups
            return ProbeResult.unknown(
                f"cannot read MSK lag metrics ({err.kind}): {err.operation}: {err.detail}"
            )
        evaluation = judge_cloudwatch(
            series,
            frozenset(self.params.groups),
            self._evaluator.thresholds,
            self.params.window,
            source.period * source.lookback_periods,
        )
        return summarize(
            evaluation,
            per_partition_metrics=self.params.per_partition_metrics,
            thresholds=self._evaluator.thresholds,
            empty_reason=self._nothing_reason(bool(series)),
        )

    def _nothing_reason(self, matched: bool) -> str:
        if matched:
            return "the selected groups have no committed offsets on the selected topics"
        return f"no consumer group matches {self.params.group_pattern!r}"
