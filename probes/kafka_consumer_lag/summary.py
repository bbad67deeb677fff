"""From an evaluation to the run's result: the worst partition (or group finding) decides and
is named first, the other problems are counted; observations per group and in total."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from alivemcp.probe import LabeledObservation, ProbeResult, Status
from alivemcp.verdict import Findings, worst
from probes.kafka_consumer_lag.evaluate import Evaluation
from probes.kafka_consumer_lag.judge import GroupFinding, PartitionVerdict, Thresholds
from probes.kafka_consumer_lag.window import WindowState

__all__ = ["summarize"]


def summarize(
    evaluation: Evaluation,
    *,
    per_partition_metrics: bool,
    thresholds: Thresholds,
    empty_reason: str | None = None,
    max_listed: int = 10,
) -> ProbeResult:
    """The run's result. The reason names the worst problem (a group finding beats a
    partition of the same status only when it is strictly worse) and counts the others;
    ``details`` lists up to ``max_listed`` of the worst partitions."""
    verdicts, group_findings = evaluation.verdicts, evaluation.findings
    per_group: dict[str, list[PartitionVerdict]] = defaultdict(list)
    for v in verdicts:
        per_group[v.group].append(v)
    not_up = [v for v in verdicts if v.status != Status.UP]
    worst_listed = heapq.nlargest(max_listed, not_up, key=PartitionVerdict.sort_key)

    found = Findings()
    if not verdicts and not group_findings:
        # Nothing to judge: a typo and a vanished fleet look alike.
        found.add(Status.UNKNOWN, empty_reason or "no consumer group offsets to evaluate")
    # Partitions first, the worst of them first: at the same status a partition is named
    # before a group finding (the findings keep their order within a status).
    for v in worst_listed:
        found.add(v.status, v.describe())
    listed = {id(v) for v in worst_listed}
    for v in not_up:
        if id(v) not in listed:
            found.add(v.status, v.why)  # counted, not named: the short text will do
    for f in group_findings:
        found.add(f.status, f"group {f.group}: {f.why}")

    _observe(found, verdicts, per_group, per_partition_metrics)
    found.details.update(
        groups={
            group: _group_json(per_group.get(group, []), group_findings, group)
            for group in evaluation.groups
        },
        worst_partitions=[v.as_json() for v in worst_listed],
        thresholds={
            "max_lag_seconds": thresholds.degraded_seconds,
            "down_lag_seconds": thresholds.down_seconds,
            "max_lag_messages": thresholds.degraded_messages,
            "down_lag_messages": thresholds.down_messages,
        },
    )
    worst_lag = max((v.offset_lag for v in verdicts), default=0)
    return found.result(
        f"{len(per_group)} group(s), {len(verdicts)} partition(s) within limits "
        f"(max lag {worst_lag} messages)",
        max_listed=1,
    )


def _observe(
    found: Findings,
    verdicts: Sequence[PartitionVerdict],
    per_group: dict[str, list[PartitionVerdict]],
    per_partition_metrics: bool,
) -> None:
    for group in sorted(per_group):
        rows = per_group[group]
        found.labeled(
            "group_max_offset_lag_messages", float(max(v.offset_lag for v in rows)), group=group
        )
        found.labeled(
            "group_sum_offset_lag_messages", float(sum(v.total_lag for v in rows)), group=group
        )
        times = [v.time_lag for v in rows if v.time_lag is not None]
        if times:
            found.labeled("group_max_time_lag_seconds", max(times), group=group)
    if per_partition_metrics:
        for v in verdicts:
            labels = {"group": v.group, "topic": v.topic}
            # CloudWatch rows are whole topics: a name of their own keeps label sets fixed.
            scope = "topic"
            if v.partition is not None:
                labels["partition"] = str(v.partition)
                scope = "partition"
            found.labeled_observations.append(
                LabeledObservation(f"{scope}_offset_lag_messages", float(v.offset_lag), labels)
            )
            if v.time_lag is not None:
                found.labeled_observations.append(
                    LabeledObservation(f"{scope}_time_lag_seconds", v.time_lag, labels)
                )

    observations = {
        "groups": float(len(per_group)),
        "partitions": float(len(verdicts)),
        "lagging_partitions": float(sum(1 for v in verdicts if v.offset_lag > 0)),
        "degraded_partitions": float(sum(1 for v in verdicts if v.status == Status.DEGRADED)),
        "down_partitions": float(sum(1 for v in verdicts if v.status == Status.DOWN)),
        "max_offset_lag_messages": float(max((v.offset_lag for v in verdicts), default=0)),
        "sum_offset_lag_messages": float(sum(v.total_lag for v in verdicts)),
    }
    times = [v.time_lag for v in verdicts if v.time_lag is not None]
    if times:
        observations["max_time_lag_seconds"] = max(times)
    # Lagging partitions whose time lag could not be read or estimated yet (the maximum
    # above does not cover them).
    observations["time_lag_unknown_partitions"] = float(
        sum(1 for v in verdicts if v.time_lag is None)
    )
    found.observations.update(observations)


def _group_json(
    rows: Sequence[PartitionVerdict], findings: Iterable[GroupFinding], group: str
) -> dict[str, Any]:
    notes = [f for f in findings if f.group == group]
    status = worst(*(v.status for v in rows), *(f.status for f in notes))
    times = [v.time_lag for v in rows if v.time_lag is not None]
    out: dict[str, Any] = {
        "status": status.value,
        "partitions": len(rows),
        "max_offset_lag": max((v.offset_lag for v in rows), default=0),
        "sum_offset_lag": sum(v.total_lag for v in rows),
        "max_time_lag_seconds": round(max(times), 3) if times else None,
    }
    if notes:
        out["problems"] = [f.why for f in notes]
    states = sorted({v.state.value for v in rows if v.state != WindowState.OK})
    if states:
        out["window_findings"] = states
    return out
