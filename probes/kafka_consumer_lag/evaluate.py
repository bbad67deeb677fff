"""From one run's readings to partition verdicts, keeping each partition's window and
offset/time table between runs.

Lagging partitions whose time lag is not known yet (first run, nothing readable) are judged
on their offset lag alone. A partition this run could not read keeps its window: a broker
that misses one run must not restart it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alivemcp.plumbing.kafka import PartitionId
from alivemcp.probe import Status
from probes.kafka_consumer_lag.judge import (
    GroupFinding,
    PartitionVerdict,
    Thresholds,
    judge_partition,
)
from probes.kafka_consumer_lag.time_table import OffsetTimeTable
from probes.kafka_consumer_lag.window import PartitionWindow, Sample

__all__ = ["Evaluation", "GroupReading", "LagEvaluator", "LagSnapshot"]

PartitionKey = tuple[str, str, int]  # group, topic, partition


@dataclass(slots=True)
class GroupReading:
    """What one run read about one consumer group."""

    committed: dict[PartitionId, int] = field(default_factory=dict)
    #: True: has members; False: Empty/Dead; None: not visible (KIP-848 groups, errors).
    members_active: bool | None = None
    state: str | None = None
    #: Why the group could not be read (it is then ``unknown``).
    error: str | None = None


@dataclass(slots=True)
class LagSnapshot:
    """Everything one run of the Kafka source read: the evaluator's only input."""

    at: float
    groups: dict[str, GroupReading]
    log_end: dict[PartitionId, int]
    #: Write time (unix seconds) of the message at (topic, partition, offset), when read.
    record_times: dict[tuple[str, int, int], float] = field(default_factory=dict)
    #: Named groups: a named group missing from ``groups`` is reported as missing.
    named_groups: frozenset[str] = frozenset()
    #: Partitions the group has offsets for but whose log end could not be read.
    unreadable: dict[PartitionId, str] = field(default_factory=dict)
    #: How many groups the names and the pattern selected (with or without offsets).
    selected: int = 0


@dataclass(slots=True)
class Evaluation:
    verdicts: list[PartitionVerdict]
    findings: list[GroupFinding]
    groups: list[str]


class LagEvaluator:
    """Keeps the per-partition windows and offset/time tables between runs (instance state)."""

    def __init__(self, window: int, thresholds: Thresholds, table_points: int = 64) -> None:
        self.window = window
        self.thresholds = thresholds
        self.table_points = table_points
        self._history: dict[PartitionKey, PartitionWindow] = {}
        self._tables: dict[PartitionId, OffsetTimeTable] = {}

    def time_lag(
        self, snapshot: LagSnapshot, tp: PartitionId, committed: int, log_end: int
    ) -> tuple[float | None, str | None]:
        if committed >= log_end:
            return 0.0, "caught up"
        written = snapshot.record_times.get((tp[0], tp[1], committed))
        if written is not None:
            return max(0.0, snapshot.at - written), "record"
        table = self._tables.get(tp)
        estimate = table.written_at(committed) if table is not None else None
        if estimate is None:
            return None, None
        lag = max(0.0, snapshot.at - estimate[0])
        if estimate[1] == "at least" and lag == 0.0:
            return None, None  # first sighting is this run: "at least 0 s" says nothing
        return lag, estimate[1]

    def evaluate(self, snapshot: LagSnapshot) -> Evaluation:
        for tp, log_end in snapshot.log_end.items():
            table = self._tables.get(tp)
            if table is None:
                table = self._tables[tp] = OffsetTimeTable(self.table_points)
            table.add(log_end, snapshot.at)
        verdicts: list[PartitionVerdict] = []
        findings: list[GroupFinding] = []
        seen: set[PartitionKey] = set()
        for group in sorted(snapshot.named_groups - snapshot.groups.keys()):
            findings.append(GroupFinding(group, Status.DOWN, "group has no committed offsets"))
        for group, reading in sorted(snapshot.groups.items()):
            if reading.error is not None:
                findings.append(GroupFinding(group, Status.UNKNOWN, reading.error))
                continue
            readable = {tp: c for tp, c in reading.committed.items() if tp in snapshot.log_end}
            unread = sorted(tp for tp in reading.committed if tp in snapshot.unreadable)
            if unread:
                tp = unread[0]
                findings.append(
                    GroupFinding(
                        group,
                        Status.UNKNOWN,
                        f"log end of {len(unread)} partition(s) unreadable, e.g. "
                        f"{tp[0]}[{tp[1]}]: {snapshot.unreadable[tp]}",
                    )
                )
            elif not readable and group in snapshot.named_groups:
                findings.append(
                    GroupFinding(group, Status.DOWN, _no_offsets_why(reading, snapshot))
                )
            for tp, committed in sorted(readable.items()):
                key = (group, tp[0], tp[1])
                seen.add(key)
                verdicts.append(self._judge(snapshot, key, committed, reading.members_active))
        # Forget partitions that are gone or no longer selected, but not those this run
        # merely failed to read: a broker that misses one run must not restart the window.
        failed = {g for g, r in snapshot.groups.items() if r.error is not None}
        for key in list(self._history):
            if key not in seen and key[0] not in failed and key[1:] not in snapshot.unreadable:
                del self._history[key]
        for tp in list(self._tables):
            if tp not in snapshot.log_end and tp not in snapshot.unreadable and not failed:
                del self._tables[tp]
        return Evaluation(verdicts, findings, sorted(set(snapshot.groups) | snapshot.named_groups))

    def _judge(
        self, snapshot: LagSnapshot, key: PartitionKey, committed: int, members: bool | None
    ) -> PartitionVerdict:
        group, topic, partition = key
        tp = (topic, partition)
        log_end = snapshot.log_end[tp]
        history = self._history.get(key)
        if history is None or history.window != self.window:
            history = self._history[key] = PartitionWindow(self.window)
        sample = Sample(snapshot.at, committed, log_end)
        history.add(sample)
        state, state_why = history.state(members)
        time_lag, source = self.time_lag(snapshot, tp, committed, log_end)
        return judge_partition(
            group,
            topic,
            partition,
            sample.lag,
            time_lag,
            source,
            state,
            state_why,
            self.thresholds,
            committed=committed,
            log_end=log_end,
        )


def _no_offsets_why(reading: GroupReading, snapshot: LagSnapshot) -> str:
    if reading.committed:
        return "group has no committed offsets on the selected topics"
    if reading.state and reading.state not in ("Dead", ""):
        return f"group is {reading.state} but has no committed offsets"
    return "group has no committed offsets"
