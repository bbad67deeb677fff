"""The CloudWatch source: MSK's own lag metrics (``MaxOffsetLag``, ``EstimatedMaxTimeLag``,
``SumOffsetLag`` per Cluster Name / Consumer Group / Topic) for clusters the prober cannot
reach. CloudWatch has no per-partition offsets, so the window rule here is ``warn`` only
(SumOffsetLag grew over the last ``window`` periods) and a named group without datapoints is
``unknown``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from alivemcp.plumbing.cloudwatch import aligned_window
from alivemcp.plumbing.kafka_cloudwatch import list_series, series_values
from alivemcp.probe import Status
from probes.kafka_consumer_lag.evaluate import Evaluation
from probes.kafka_consumer_lag.judge import (
    GroupFinding,
    PartitionVerdict,
    Thresholds,
    judge_partition,
)
from probes.kafka_consumer_lag.params import (
    CloudWatchLagSource,
    KafkaConsumerLagParams,
    compile_pattern,
)
from probes.kafka_consumer_lag.window import WindowState

__all__ = ["CloudWatchLagReader", "aligned_range", "judge_cloudwatch"]

_METRICS = ("MaxOffsetLag", "EstimatedMaxTimeLag", "SumOffsetLag")
_DIMENSIONS = frozenset({"Cluster Name", "Consumer Group", "Topic"})

GroupTopic = tuple[str, str]


def aligned_range(now: float, period: int, periods: int) -> tuple[float, float]:
    """A [start, end) range on period boundaries, ending at the last complete period
    (``period``: whole minutes, as the source's params require)."""
    window = aligned_window(period, periods, now)
    return window.start.timestamp(), window.end.timestamp()


def judge_cloudwatch(
    series: Mapping[GroupTopic, Mapping[str, Sequence[float]]],
    named_groups: frozenset[str],
    thresholds: Thresholds,
    window: int,
    lookback_seconds: float,
) -> Evaluation:
    """Verdicts per (group, topic) from MSK's metrics, values oldest first."""
    verdicts: list[PartitionVerdict] = []
    with_data: set[str] = set()
    for (group, topic), metrics in sorted(series.items()):
        max_lag = metrics.get("MaxOffsetLag") or ()
        time_lag = metrics.get("EstimatedMaxTimeLag") or ()
        sums = metrics.get("SumOffsetLag") or ()
        if not max_lag and not time_lag and not sums:
            continue
        with_data.add(group)
        state, why = WindowState.OK, "within limits"
        recent = list(sums)[-window:]
        if len(recent) >= window and all(b > a for a, b in pairwise(recent)):
            state = WindowState.WARN
            why = (
                f"SumOffsetLag grew on each of the last {len(recent)} periods "
                f"({recent[0]:.0f} -> {recent[-1]:.0f} messages)"
            )
        offset_lag = int(max_lag[-1]) if max_lag else int(sums[-1]) if sums else 0
        verdict = judge_partition(
            group,
            topic,
            None,
            offset_lag,
            float(time_lag[-1]) if time_lag else None,
            "cloudwatch" if time_lag else None,
            state,
            why,
            thresholds,
        )
        if sums:
            verdict = replace(verdict, sum_offset_lag=int(sums[-1]))
        verdicts.append(verdict)
    findings = [
        GroupFinding(
            group,
            Status.UNKNOWN,
            f"no CloudWatch lag datapoints in the last {lookback_seconds / 60:.0f} min "
            "(group gone, or metrics delayed)",
        )
        for group in sorted(named_groups - with_data)
    ]
    groups = sorted(with_data | named_groups)
    return Evaluation(verdicts, findings, groups)


class CloudWatchLagReader:
    """Reads MSK's lag metrics: ListMetrics finds the (group, topic) pairs, then
    GetMetricData reads their series."""

    async def read(
        self,
        client: Any,
        source: CloudWatchLagSource,
        params: KafkaConsumerLagParams,
        now: float,
    ) -> dict[GroupTopic, dict[str, list[float]]]:
        """Per selected (group, topic): each lag metric's values, oldest first."""
        pattern = compile_pattern(params.group_pattern)
        wanted_topic = params.topic_wanted()
        named = set(params.groups)
        pairs: set[GroupTopic] = set()
        for _, dimensions in await list_series(client, source.cluster_name, "SumOffsetLag"):
            dims = {d["Name"]: d["Value"] for d in dimensions}
            if set(dims) != _DIMENSIONS:
                continue  # per-partition series (PER_TOPIC_PER_PARTITION) and others
            group, topic = dims["Consumer Group"], dims["Topic"]
            if not wanted_topic(topic):
                continue
            if group in named or (pattern is not None and pattern.fullmatch(group)):
                pairs.add((group, topic))
        start, end = aligned_range(now, source.period, source.lookback_periods)
        wanted = [(pair, metric) for pair in sorted(pairs) for metric in _METRICS]
        values = await series_values(
            client,
            [(metric, _dimensions(source.cluster_name, *pair)) for pair, metric in wanted],
            start,
            end,
            source.period,
        )
        series: dict[GroupTopic, dict[str, list[float]]] = {pair: {} for pair in pairs}
        for (pair, metric), found in zip(wanted, values, strict=True):
            if found:
                series[pair][metric] = found
        return series


def _dimensions(cluster_name: str, group: str, topic: str) -> list[dict[str, str]]:
    return [
        {"Name": "Cluster Name", "Value": cluster_name},
        {"Name": "Consumer Group", "Value": group},
        {"Name": "Topic", "Value": topic},
    ]
