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

import asyncio
import bisect
import heapq
import math
import re
import struct
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise
from typing import Any, ClassVar, Literal

from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsRequest_v3,
    DescribeGroupsResponse_v3,
)
from aiokafka.protocol.api import RequestStruct
from aiokafka.protocol.commit import OffsetFetchRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.plumbing.aws import AwsSettings, aws_error_kind, aws_error_summary
from alivemcp.plumbing.kafka import (
    KafkaAuthFailed,
    KafkaCluster,
    KafkaConnection,
    KafkaPlumbingError,
    RunBudget,
)
from alivemcp.probe import (
    CheckContext,
    Duration,
    LabeledObservation,
    Observable,
    Probe,
    ProbeParams,
    ProbeResult,
    Status,
)

__all__ = [
    "CloudWatchLagSource",
    "KafkaConsumerLagParams",
    "KafkaConsumerLagProbe",
    "LagEvaluator",
    "LagSnapshot",
    "OffsetTimeTable",
    "PartitionVerdict",
    "Sample",
    "Thresholds",
    "WindowState",
    "classify_window",
]

# --------------------------------------------------------------------------------------------
# Params
# --------------------------------------------------------------------------------------------


class CloudWatchLagSource(BaseModel):
    """Where MSK publishes the lag metrics of a cluster the prober cannot reach directly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aws: AwsSettings = Field(
        AwsSettings.model_validate({}),
        description="AWS identity and region of the MSK cluster.",
    )
    cluster_name: str = Field(
        min_length=1, description="The MSK cluster's name (the `Cluster Name` dimension)."
    )
    period: int = Field(
        60,
        ge=60,
        multiple_of=60,
        description="Metric period in seconds, whole minutes (MSK publishes lag every minute).",
    )
    lookback_periods: int = Field(
        15,
        ge=1,
        le=1440,
        description="How many periods back to look for datapoints (MSK lag metrics arrive "
        "a few minutes late).",
    )


class KafkaConsumerLagParams(ProbeParams):
    cluster: KafkaConnection | None = Field(
        None, description="The Kafka/MSK cluster (required with `source: kafka`)."
    )
    source: Literal["kafka", "cloudwatch"] = Field(
        "kafka",
        description="`kafka`: ask the brokers (exact, per partition); `cloudwatch`: read MSK's "
        "AWS/Kafka lag metrics for clusters the prober cannot reach.",
    )
    cloudwatch: CloudWatchLagSource | None = Field(
        None, description="CloudWatch settings (required with `source: cloudwatch`)."
    )
    groups: list[str] = Field(
        default_factory=list,
        description="Consumer groups to watch by name; a named group without committed "
        "offsets is `down`.",
    )
    group_pattern: str | None = Field(
        None, description="Regex (full match) selecting more groups from the cluster's list."
    )
    topics: list[str] = Field(
        default_factory=list, description="Only these topics (default: every topic)."
    )
    topic_pattern: str | None = Field(
        None, description="Only topics matching this regex (full match)."
    )
    max_lag_seconds: Duration = Field(
        60.0, description="Time lag above which a partition is `degraded` (e.g. 60 or 5m)."
    )
    down_lag_seconds: Duration | None = Field(
        None, description="Time lag above which a partition is `down` (default: never)."
    )
    max_lag_messages: int | None = Field(
        None, ge=0, description="Offset lag above which a partition is `degraded`."
    )
    down_lag_messages: int | None = Field(
        None, ge=0, description="Offset lag above which a partition is `down`."
    )
    window: int = Field(
        10,
        ge=2,
        le=100,
        description="Runs kept per partition for the stop/stall/rewind/warn rules (Burrow: 10).",
    )
    time_lag: Literal["fetch", "estimate"] = Field(
        "fetch",
        description="`fetch`: read the first unconsumed message's timestamp (needs Read on the "
        "topic); `estimate`: interpolate from the log-end offsets seen on earlier runs only.",
    )
    max_fetch_partitions: int = Field(
        2000,
        ge=0,
        description="At most this many lagging partitions have their first unconsumed message "
        "read per run; the rest are estimated.",
    )
    per_partition_metrics: bool = Field(
        False,
        description="Export lag per group/topic/partition (one series each: mind cardinality).",
    )

    @field_validator("group_pattern", "topic_pattern")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regex: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConsumerLagParams:
        if not self.groups and self.group_pattern is None:
            raise ValueError("set `groups` and/or `group_pattern`")
        if self.source == "kafka" and self.cluster is None:
            raise ValueError("`cluster` is required with source: kafka")
        if self.source == "cloudwatch" and self.cloudwatch is None:
            raise ValueError("`cloudwatch` is required with source: cloudwatch")
        if self.down_lag_seconds is not None and self.down_lag_seconds < self.max_lag_seconds:
            raise ValueError("down_lag_seconds must not be below max_lag_seconds")
        if (
            self.down_lag_messages is not None
            and self.max_lag_messages is not None
            and self.down_lag_messages < self.max_lag_messages
        ):
            raise ValueError("down_lag_messages must not be below max_lag_messages")
        return self

    def thresholds(self) -> Thresholds:
        return Thresholds(
            degraded_seconds=self.max_lag_seconds,
            down_seconds=self.down_lag_seconds,
            degraded_messages=self.max_lag_messages,
            down_messages=self.down_lag_messages,
        )

    def topic_wanted(self) -> TopicFilter:
        return TopicFilter(frozenset(self.topics), _compile(self.topic_pattern))


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern is not None else None


@dataclass(frozen=True, slots=True)
class TopicFilter:
    names: frozenset[str]
    pattern: re.Pattern[str] | None

    def __call__(self, topic: str) -> bool:
        if not self.names and self.pattern is None:
            return True
        if topic in self.names:
            return True
        return self.pattern is not None and self.pattern.fullmatch(topic) is not None


# --------------------------------------------------------------------------------------------
# Pure evaluation: windows, time-lag estimation, verdicts
# --------------------------------------------------------------------------------------------

TopicPartition = tuple[str, int]
PartitionKey = tuple[str, str, int]  # group, topic, partition


class WindowState(StrEnum):
    """What the window of recent samples says about one partition (Burrow's vocabulary)."""

    OK = "ok"
    WARN = "warn"
    REWIND = "rewind"
    STALL = "stall"
    STOP = "stop"


class Sample:
    """One run's view of one group's partition (a plain slotted class: 40,000 are made per
    run in a big check, and the lag is read several times each)."""

    __slots__ = ("at", "committed", "lag", "log_end")

    def __init__(self, at: float, committed: int, log_end: int) -> None:
        self.at = at
        self.committed = committed
        self.log_end = log_end
        # A committed offset past the log end (topic recreated, unclean election) is no lag.
        self.lag = log_end - committed if log_end > committed else 0

    def __repr__(self) -> str:
        return f"Sample(at={self.at}, committed={self.committed}, log_end={self.log_end})"


class PartitionWindow:
    """The last ``window`` samples of one group's partition, with the Burrow rules kept as
    running counts so a run costs O(1) per partition (40,000 of them in one check is real)."""

    __slots__ = ("_growing", "_rewind", "_rewind_age", "_still", "samples", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.samples: deque[Sample] = deque(maxlen=window)
        self._still = 0  # trailing samples with the same committed offset, all lagging
        self._growing = 0  # trailing samples whose lag rose on each step
        self._rewind: tuple[int, int] | None = None
        self._rewind_age = 0  # samples appended since the rewind step

    def add(self, sample: Sample) -> None:
        samples = self.samples
        if samples and sample.log_end < samples[-1].log_end:
            self.clear()  # another log under the same name: old samples do not apply
        previous = samples[-1] if samples else None
        lag = sample.lag
        if previous is None:
            self._still = 1 if lag > 0 else 0
            self._growing = 1
        else:
            if sample.committed < previous.committed:
                self._rewind = (previous.committed, sample.committed)
                self._rewind_age = 0
            elif self._rewind is not None:
                self._rewind_age += 1
            if lag > 0 and sample.committed == previous.committed:
                self._still = self._still + 1 if self._still else 1
            else:
                self._still = 1 if lag > 0 else 0
            self._growing = self._growing + 1 if lag > previous.lag else 1
        samples.append(sample)

    def clear(self) -> None:
        self.samples.clear()
        self._still = self._growing = 0
        self._rewind = None

    def state(self, members_active: bool | None) -> tuple[WindowState, str]:
        """Burrow-style verdict; ``stop``, ``stall`` and ``warn`` need a full window (fewer
        samples cannot show that progress stopped or that lag only grew)."""
        samples, window = self.samples, self.window
        # The rewind step is inside the window while both of its samples are.
        if self._rewind is not None and self._rewind_age <= window - 2:
            older, newer = self._rewind
            return WindowState.REWIND, f"committed offset went back from {older} to {newer}"
        if not samples or samples[-1].lag == 0:
            return WindowState.OK, "caught up"
        if len(samples) < window:
            return WindowState.OK, "lagging"
        span = samples[-1].at - samples[0].at
        if self._still >= window:
            if members_active is False:
                return WindowState.STOP, (
                    f"no commits over the last {window} runs ({span:.0f}s) and the group "
                    "has no active members"
                )
            return WindowState.STALL, (
                f"committed offset stuck at {samples[-1].committed} over the last {window} "
                f"runs ({span:.0f}s)"
            )
        if self._growing >= window:
            return WindowState.WARN, (
                f"lag grew on each of the last {window} runs "
                f"({samples[0].lag} -> {samples[-1].lag} messages)"
            )
        return WindowState.OK, "lagging"


def classify_window(
    samples: Sequence[Sample], window: int, members_active: bool | None
) -> tuple[WindowState, str]:
    """Burrow-style evaluation of one partition's last ``window`` samples, oldest first."""
    tracker = PartitionWindow(window)
    for sample in list(samples)[-window:]:
        tracker.add(sample)
    return tracker.state(members_active)


class OffsetTimeTable:
    """(log-end offset, time) points of one partition, for kafka-lag-exporter-style estimates.

    The message at offset ``o`` was written after the last time the log end was seen at or
    below ``o`` and before the first time it was seen above ``o``; interpolating between those
    two points gives its approximate write time. For an unchanged log end only the first and
    the latest sighting are kept, so a quiet partition does not fill the table.
    """

    __slots__ = ("_offsets", "_times", "max_points")

    def __init__(self, max_points: int = 64) -> None:
        self.max_points = max(3, max_points)
        self._offsets: list[int] = []
        self._times: list[float] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, log_end: int, at: float) -> None:
        if self._offsets and log_end < self._offsets[-1]:
            # The log went backwards (topic recreated, truncation): old points describe
            # another log.
            self._offsets.clear()
            self._times.clear()
        if (
            len(self._offsets) >= 2
            and self._offsets[-1] == log_end
            and self._offsets[-2] == log_end
        ):
            self._times[-1] = at
        else:
            self._offsets.append(log_end)
            self._times.append(at)
        if len(self._offsets) > self.max_points:
            del self._offsets[0]
            del self._times[0]

    def written_at(self, offset: int) -> tuple[float, str] | None:
        """Estimated write time of the message at ``offset`` and how it was obtained:
        ``interpolated``, ``extrapolated``, or ``at least`` (only known to be written before
        the table's first point, so the lag is a lower bound); None when the table cannot
        tell."""
        offsets, times = self._offsets, self._times
        if not offsets or offset >= offsets[-1]:
            return None  # not written yet as far as the table knows
        # First point whose log end is past the message: it was written before that time.
        after = bisect.bisect_right(offsets, offset)
        if after > 0:
            # Latest sighting of a log end at or below the offset: written after that time.
            o1, t1 = offsets[after - 1], times[after - 1]
            o2, t2 = offsets[after], times[after]
            return t1 + (offset - o1) / (o2 - o1) * (t2 - t1), "interpolated"
        # Older than the whole table: extrapolate with the table's average write rate.
        o_first, t_first = offsets[0], times[0]
        o_last, t_last = offsets[-1], times[-1]
        if o_last > o_first and t_last > t_first:
            rate = (o_last - o_first) / (t_last - t_first)
            return t_first - (o_first - offset) / rate, "extrapolated"
        return t_first, "at least"


@dataclass(frozen=True, slots=True)
class Thresholds:
    degraded_seconds: float
    down_seconds: float | None = None
    degraded_messages: int | None = None
    down_messages: int | None = None

    def level(self, offset_lag: int, time_lag: float | None) -> tuple[Status, str]:
        """Status from the lag alone, and which limit it crossed."""
        if time_lag is not None and self.down_seconds is not None and time_lag > self.down_seconds:
            return Status.DOWN, f"time lag over {self.down_seconds:g}s"
        if self.down_messages is not None and offset_lag > self.down_messages:
            return Status.DOWN, f"offset lag over {self.down_messages} messages"
        if time_lag is not None and time_lag > self.degraded_seconds:
            return Status.DEGRADED, f"time lag over {self.degraded_seconds:g}s"
        if self.degraded_messages is not None and offset_lag > self.degraded_messages:
            return Status.DEGRADED, f"offset lag over {self.degraded_messages} messages"
        return Status.UP, ""


_STATUS_RANK = {Status.UP: 0, Status.UNKNOWN: 1, Status.DEGRADED: 2, Status.DOWN: 3}
_STATE_RANK = {
    WindowState.OK: 0,
    WindowState.WARN: 1,
    WindowState.REWIND: 2,
    WindowState.STALL: 3,
    WindowState.STOP: 4,
}


def worse(a: Status, b: Status) -> Status:
    return a if _STATUS_RANK[a] >= _STATUS_RANK[b] else b


@dataclass(slots=True)  # not frozen: its __init__ is measurably slower at 40,000 a run
class PartitionVerdict:
    """The judgement of one group's partition (``partition`` None: a whole topic, from
    CloudWatch)."""

    group: str
    topic: str
    partition: int | None
    offset_lag: int
    time_lag: float | None
    time_lag_source: str | None
    state: WindowState
    status: Status
    why: str
    committed: int | None = None
    log_end: int | None = None
    #: Lag summed over the topic's partitions when ``partition`` is None (CloudWatch).
    sum_offset_lag: int | None = None

    @property
    def total_lag(self) -> int:
        return self.sum_offset_lag if self.sum_offset_lag is not None else self.offset_lag

    def sort_key(self) -> tuple[int, int, float, int]:
        return (
            _STATUS_RANK[self.status],
            _STATE_RANK[self.state],
            self.time_lag if self.time_lag is not None else -1.0,
            self.offset_lag,
        )

    def where(self) -> str:
        if self.partition is None:
            return f"group {self.group} topic {self.topic}"
        return f"group {self.group} {self.topic}[{self.partition}]"

    def describe(self) -> str:
        lag = f"lag {self.offset_lag} messages"
        if self.time_lag is not None:
            approx = {"interpolated": "~", "extrapolated": "~", "at least": ">="}.get(
                self.time_lag_source or "", ""
            )
            lag += f" / {approx}{_fmt_s(self.time_lag)}"
        return f"{self.where()}: {self.why}; {lag}"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "group": self.group,
            "topic": self.topic,
            "status": self.status.value,
            "state": self.state.value,
            "offset_lag": self.offset_lag,
            "time_lag_seconds": None if self.time_lag is None else round(self.time_lag, 3),
            "time_lag_source": self.time_lag_source,
            "why": self.why,
        }
        if self.partition is not None:
            out["partition"] = self.partition
            out["committed_offset"] = self.committed
            out["log_end_offset"] = self.log_end
        return out


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


def judge_partition(
    group: str,
    topic: str,
    partition: int | None,
    offset_lag: int,
    time_lag: float | None,
    time_lag_source: str | None,
    state: WindowState,
    state_why: str,
    thresholds: Thresholds,
    committed: int | None = None,
    log_end: int | None = None,
) -> PartitionVerdict:
    """Combine the threshold level and the window state into one partition's verdict."""
    level, crossed = thresholds.level(offset_lag, time_lag)
    status = level
    why = crossed or state_why
    if state in (WindowState.STOP, WindowState.STALL):
        # Not moving and already too far behind: nobody is going to catch this up.
        status = worse(status, Status.DOWN if level != Status.UP else Status.DEGRADED)
        why = state_why + (f" ({crossed})" if crossed else "")
    elif state in (WindowState.WARN, WindowState.REWIND):
        status = worse(status, Status.DEGRADED)
        why = state_why + (f" ({crossed})" if crossed else "")
    elif status == Status.UP:
        why = "ok" if offset_lag == 0 else "within limits"
    return PartitionVerdict(
        group=group,
        topic=topic,
        partition=partition,
        offset_lag=offset_lag,
        time_lag=time_lag,
        time_lag_source=time_lag_source,
        state=state,
        status=status,
        why=why,
        committed=committed,
        log_end=log_end,
    )


@dataclass(slots=True)
class GroupReading:
    """What one run read about one consumer group."""

    committed: dict[TopicPartition, int] = field(default_factory=dict)
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
    log_end: dict[TopicPartition, int]
    #: Write time (unix seconds) of the message at (topic, partition, offset), when read.
    record_times: dict[tuple[str, int, int], float] = field(default_factory=dict)
    #: Named groups: a named group missing from ``groups`` is reported as missing.
    named_groups: frozenset[str] = frozenset()
    #: Partitions the group has offsets for but whose log end could not be read.
    unreadable: dict[TopicPartition, str] = field(default_factory=dict)
    #: How many groups the names and the pattern selected (with or without offsets).
    selected: int = 0


@dataclass(frozen=True, slots=True)
class GroupFinding:
    """A whole-group verdict that has no partition (missing group, read error)."""

    group: str
    status: Status
    why: str


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
        self._tables: dict[TopicPartition, OffsetTimeTable] = {}

    def time_lag(
        self, snapshot: LagSnapshot, tp: TopicPartition, committed: int, log_end: int
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
            group, topic, partition, sample.lag, time_lag, source, state, state_why,
            self.thresholds, committed=committed, log_end=log_end,
        )


def _no_offsets_why(reading: GroupReading, snapshot: LagSnapshot) -> str:
    if reading.committed:
        return "group has no committed offsets on the selected topics"
    if reading.state and reading.state not in ("Dead", ""):
        return f"group is {reading.state} but has no committed offsets"
    return "group has no committed offsets"


# --------------------------------------------------------------------------------------------
# Turning an evaluation into a result
# --------------------------------------------------------------------------------------------


def summarize(
    evaluation: Evaluation,
    *,
    per_partition_metrics: bool,
    thresholds: Thresholds,
    empty_reason: str | None = None,
    max_listed: int = 10,
) -> ProbeResult:
    """Worst partition (or group finding) decides; observations per group and in total."""
    verdicts, findings = evaluation.verdicts, evaluation.findings
    status = Status.UP
    for v in verdicts:
        status = worse(status, v.status)
    for f in findings:
        status = worse(status, f.status)
    if not verdicts and not findings:
        status = Status.UNKNOWN  # nothing to judge: a typo and a vanished fleet look alike

    per_group: dict[str, list[PartitionVerdict]] = defaultdict(list)
    for v in verdicts:
        per_group[v.group].append(v)
    labeled: list[LabeledObservation] = []
    for group in sorted(per_group):
        rows = per_group[group]
        labels = {"group": group}
        labeled.append(
            LabeledObservation(
                "group_max_offset_lag_messages", float(max(v.offset_lag for v in rows)), labels
            )
        )
        labeled.append(
            LabeledObservation(
                "group_sum_offset_lag_messages", float(sum(v.total_lag for v in rows)), labels
            )
        )
        times = [v.time_lag for v in rows if v.time_lag is not None]
        if times:
            labeled.append(LabeledObservation("group_max_time_lag_seconds", max(times), labels))
    if per_partition_metrics:
        for v in verdicts:
            labels = {"group": v.group, "topic": v.topic}
            # CloudWatch rows are whole topics: a name of their own keeps label sets fixed.
            scope = "topic"
            if v.partition is not None:
                labels["partition"] = str(v.partition)
                scope = "partition"
            labeled.append(
                LabeledObservation(f"{scope}_offset_lag_messages", float(v.offset_lag), labels)
            )
            if v.time_lag is not None:
                labeled.append(LabeledObservation(f"{scope}_time_lag_seconds", v.time_lag, labels))

    times = [v.time_lag for v in verdicts if v.time_lag is not None]
    observations = {
        "groups": float(len(per_group)),
        "partitions": float(len(verdicts)),
        "lagging_partitions": float(sum(1 for v in verdicts if v.offset_lag > 0)),
        "degraded_partitions": float(sum(1 for v in verdicts if v.status == Status.DEGRADED)),
        "down_partitions": float(sum(1 for v in verdicts if v.status == Status.DOWN)),
        "max_offset_lag_messages": float(max((v.offset_lag for v in verdicts), default=0)),
        "sum_offset_lag_messages": float(sum(v.total_lag for v in verdicts)),
    }
    if times:
        observations["max_time_lag_seconds"] = max(times)
    # Lagging partitions whose time lag could not be read or estimated yet (the maximum
    # above does not cover them).
    observations["time_lag_unknown_partitions"] = float(
        sum(1 for v in verdicts if v.time_lag is None)
    )

    not_up = [v for v in verdicts if v.status != Status.UP]
    bad = heapq.nlargest(max_listed, not_up, key=PartitionVerdict.sort_key)
    ranked_findings = sorted(findings, key=lambda f: _STATUS_RANK[f.status], reverse=True)
    details: dict[str, Any] = {
        "groups": {
            group: _group_json(per_group.get(group, []), findings, group)
            for group in evaluation.groups
        },
        "worst_partitions": [v.as_json() for v in bad[:max_listed]],
        "thresholds": {
            "max_lag_seconds": thresholds.degraded_seconds,
            "down_lag_seconds": thresholds.down_seconds,
            "max_lag_messages": thresholds.degraded_messages,
            "down_lag_messages": thresholds.down_messages,
        },
    }
    reason = _reason(bad, len(not_up), ranked_findings, verdicts, empty_reason)
    return ProbeResult(
        status,
        reason,
        observations=observations,
        labeled_observations=labeled,
        details=details,
    )


def _group_json(
    rows: Sequence[PartitionVerdict], findings: Iterable[GroupFinding], group: str
) -> dict[str, Any]:
    status = Status.UP
    notes = [f for f in findings if f.group == group]
    for v in rows:
        status = worse(status, v.status)
    for f in notes:
        status = worse(status, f.status)
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


def _reason(
    bad: Sequence[PartitionVerdict],
    bad_count: int,
    findings: Sequence[GroupFinding],
    verdicts: Sequence[PartitionVerdict],
    empty_reason: str | None,
) -> str:
    if not verdicts and not findings:
        return empty_reason or "no consumer group offsets to evaluate"
    # The worst thing first: a group finding at the top status beats a partition at the same
    # status only when it is strictly worse.
    top_finding = findings[0] if findings else None
    top_partition = bad[0] if bad else None
    parts: list[str] = []
    if top_finding is not None and (
        top_partition is None
        or _STATUS_RANK[top_finding.status] > _STATUS_RANK[top_partition.status]
    ):
        parts.append(f"group {top_finding.group}: {top_finding.why}")
        others = len(findings) - 1 + bad_count
    elif top_partition is not None:
        parts.append(top_partition.describe())
        others = bad_count - 1 + len(findings)
    else:
        groups = {v.group for v in verdicts}
        worst_lag = max((v.offset_lag for v in verdicts), default=0)
        return (
            f"{len(groups)} group(s), {len(verdicts)} partition(s) within limits "
            f"(max lag {worst_lag} messages)"
        )
    if others > 0:
        parts.append(f"{others} more problem(s)")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Kafka source: one snapshot per run, in batched requests
# --------------------------------------------------------------------------------------------

#: Coordinator errors that a fresh FindCoordinator may cure.
_COORDINATOR_ERRORS = frozenset({14, 15, 16})  # load in progress, not available, not coordinator
_GROUP_AUTHORIZATION_FAILED = 30
_UNKNOWN_TOPIC_OR_PARTITION = 3
#: Bytes asked per partition when reading the first unconsumed message: one producer batch
#: (16 KiB by default in Java and aiokafka) fits with room to spare.
_FETCH_PARTITION_BYTES = 64 * 1024
_FETCH_MAX_BYTES = 16 * 1024 * 1024


class _DescribeGroupsRequestV3(RequestStruct):
    """DescribeGroups v3 parsed with the v3 response schema. aiokafka 0.14 pairs the v3
    request with the v2 response, so every group after the first is misread (its trailing
    ``authorized_operations`` is taken for the next group's fields)."""

    API_KEY = 15
    API_VERSION = 3
    RESPONSE_TYPE = DescribeGroupsResponse_v3
    SCHEMA = DescribeGroupsRequest_v3.SCHEMA


class _DescribeGroups(DescribeGroupsRequest):
    def build(self, request_struct_class: type[Any]) -> Any:
        if request_struct_class.API_VERSION == 3:
            return _DescribeGroupsRequestV3(self._groups, self._include_authorized_operations)
        return super().build(request_struct_class)


class LagReadError(Exception):
    """The run could not read what it needs from the cluster (``str()`` is safe to show)."""


def _error_name(code: int) -> str:
    return for_code(code).__name__


class KafkaLagReader:
    """Reads a :class:`LagSnapshot` with a bounded number of requests per run.

    Per run: one OffsetFetch per group (to its coordinator, cached between runs), one
    DescribeGroups per coordinator, one Metadata, one ListOffsets per partition leader and,
    for ``time_lag: fetch``, one Fetch per leader (more only when several groups of one
    partition wait at different offsets). A ``group_pattern`` adds a ListGroups per broker.

    Each stage gets a slice of the run's :class:`RunBudget`: a broker that does not answer
    costs its stage that slice, is named where its answer is missing (the group it
    coordinates, the partitions it leads) and is not asked again until it answers a re-test.
    """

    def __init__(self) -> None:
        self._coordinators: dict[str, int] = {}

    async def read(
        self, cluster: KafkaCluster, params: KafkaConsumerLagParams, budget: RunBudget
    ) -> LagSnapshot:
        request = cluster.conn.request_timeout
        await cluster.admin(timeout=budget.step(request, share=0.3))
        named = frozenset(params.groups)
        groups = set(named)
        if params.group_pattern is not None:
            pattern = re.compile(params.group_pattern)
            listed = await cluster.list_groups(timeout=budget.step(request, share=0.25))
            groups.update(g for g in listed if pattern.fullmatch(g))
        ordered = sorted(groups)
        timeout = budget.step(request, share=0.3)
        readings_list = await asyncio.gather(
            *(self._group_offsets(cluster, group, timeout) for group in ordered)
        )
        readings = dict(zip(ordered, readings_list, strict=True))
        await self._describe_groups(cluster, readings, budget.step(request, share=0.2))
        wanted = params.topic_wanted()
        for reading in readings.values():
            reading.committed = {tp: o for tp, o in reading.committed.items() if wanted(tp[0])}
        present = {
            g: r for g, r in readings.items() if r.committed or r.error is not None or g in named
        }
        partitions = {tp for r in present.values() for tp in r.committed}
        at = time.time()
        log_end: dict[TopicPartition, int] = {}
        unreadable: dict[TopicPartition, str] = {}
        leaders: dict[TopicPartition, int] = {}
        if partitions:
            metadata = await cluster.metadata(
                sorted({tp[0] for tp in partitions}), timeout=budget.step(request, share=0.4)
            )
            by_tp = {
                (t.name, p.partition): p for t in metadata.topics.values() for p in t.partitions
            }
            for tp in partitions:
                state = metadata.topics.get(tp[0])
                if state is None or state.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
                    continue  # deleted topic: its old commits are not lag
                if state.error_code:
                    unreadable[tp] = f"topic metadata: {_error_name(state.error_code)}"
                    continue
                part = by_tp.get(tp)
                if part is None:
                    continue
                if part.leader < 0:
                    unreadable[tp] = "partition offline (no leader)"
                else:
                    leaders[tp] = part.leader
            at = time.time()
            log_end = await self._log_ends(
                cluster, leaders, unreadable, budget.step(request, share=0.6)
            )
        snapshot = LagSnapshot(
            at=at,
            groups=present,
            log_end=log_end,
            named_groups=named,
            unreadable=unreadable,
            selected=len(groups),
        )
        if params.time_lag == "fetch" and params.max_fetch_partitions > 0:
            snapshot.record_times = await self._first_unconsumed(
                cluster, snapshot, leaders, params.max_fetch_partitions, budget.step(request)
            )
        return snapshot

    async def _coordinator(self, cluster: KafkaCluster, group: str, timeout: float) -> int:
        cached = self._coordinators.get(group)
        if cached is not None:
            return cached
        response = await cluster.send_to(
            await cluster.pick_node(timeout), FindCoordinatorRequest(group, 0),
            "FindCoordinator", timeout,
        )
        if response.error_code:
            raise LagReadError(f"no coordinator: {_error_name(response.error_code)}")
        self._coordinators[group] = response.coordinator_id
        return int(response.coordinator_id)

    async def _group_offsets(
        self, cluster: KafkaCluster, group: str, timeout: float
    ) -> GroupReading:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in range(2):
            remembered = group in self._coordinators
            try:
                node = await self._coordinator(cluster, group, deadline - loop.time())
                left = max(0.0, deadline - loop.time())
                # A coordinator remembered from an earlier run may have moved off a hung
                # broker since: it gets half the time, so a fresh lookup still fits.
                response = await cluster.send_to(
                    node, OffsetFetchRequest(group, None), "OffsetFetch",
                    left / 2 if remembered and attempt == 0 else left,
                )
            except LagReadError as exc:
                return GroupReading(error=f"cannot read committed offsets: {exc}")
            except KafkaPlumbingError as exc:  # the broker asked did not answer: named
                self._coordinators.pop(group, None)
                if attempt == 0 and remembered:
                    continue
                return GroupReading(error=f"cannot read committed offsets: {exc}")
            except (KafkaError, TimeoutError) as exc:
                self._coordinators.pop(group, None)
                if attempt == 0 and not isinstance(exc, TimeoutError):
                    continue
                return GroupReading(
                    error=f"cannot read committed offsets: {type(exc).__name__}: {exc}"
                )
            code = getattr(response, "error_code", 0)
            if code in _COORDINATOR_ERRORS:
                self._coordinators.pop(group, None)
                if attempt == 0:
                    continue
            if code == _GROUP_AUTHORIZATION_FAILED:
                return GroupReading(error="not authorized to read the group's offsets")
            if code:
                return GroupReading(
                    error=f"cannot read committed offsets: {cluster.broker_name(node)} answered "
                    f"{_error_name(code)}"
                )
            committed: dict[TopicPartition, int] = {}
            for topic, parts in response.topics:
                for part in parts:
                    partition, offset, _meta, error_code = part[:4]
                    if not error_code and offset >= 0:
                        committed[(topic, partition)] = offset
            return GroupReading(committed=committed)
        return GroupReading(error="cannot read committed offsets: coordinator kept moving")

    async def _describe_groups(
        self, cluster: KafkaCluster, readings: dict[str, GroupReading], timeout: float
    ) -> None:
        """Membership (active consumers or not) tells Burrow's STOP from STALL; one request
        per coordinator. Failures here only make membership unknown."""
        by_node: dict[int, list[str]] = defaultdict(list)
        for group, reading in readings.items():
            node = self._coordinators.get(group)
            if reading.error is None and node is not None:
                by_node[node].append(group)

        async def one(node: int, names: list[str]) -> None:
            try:
                response = await cluster.send_to(
                    node, _DescribeGroups(names), "DescribeGroups", timeout
                )
            except (KafkaError, KafkaPlumbingError, TimeoutError, ValueError):
                return  # ValueError: an undecodable answer
            for row in response.groups:
                error_code, name, state, members = row[0], row[1], row[2], row[5]
                reading = readings.get(name)
                if reading is None or error_code:
                    continue
                reading.state = state
                # A group on the new consumer protocol (KIP-848) answers "Dead" to this
                # classic request even while it consumes: membership is then unknown.
                if state != "Dead":
                    reading.members_active = len(members) > 0

        await asyncio.gather(*(one(node, names) for node, names in by_node.items()))

    async def _log_ends(
        self,
        cluster: KafkaCluster,
        leaders: Mapping[TopicPartition, int],
        unreadable: dict[TopicPartition, str],
        timeout: float,
    ) -> dict[TopicPartition, int]:
        by_node: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for (topic, partition), node in leaders.items():
            by_node[node][topic].append((partition, -1))  # -1: latest offset
        log_end: dict[TopicPartition, int] = {}

        async def one(node: int, topics: Mapping[str, list[tuple[int, int]]]) -> None:
            request = OffsetRequest(-1, 0, list(topics.items()))
            try:
                response = await cluster.send_to(node, request, "ListOffsets", timeout)
            except (KafkaError, KafkaPlumbingError, TimeoutError) as exc:
                why = (
                    str(exc) if isinstance(exc, KafkaPlumbingError)
                    else f"{cluster.broker_name(node)}: {type(exc).__name__}"
                )
                for topic, parts in topics.items():
                    for partition, _ in parts:
                        unreadable[(topic, partition)] = why
                return
            for topic, parts in response.topics:
                for part in parts:
                    partition, error_code = part[0], part[1]
                    if error_code:
                        unreadable[(topic, partition)] = _error_name(error_code)
                    else:
                        log_end[(topic, partition)] = int(part[-1])

        await asyncio.gather(*(one(node, topics) for node, topics in by_node.items()))
        return log_end

    async def _first_unconsumed(
        self,
        cluster: KafkaCluster,
        snapshot: LagSnapshot,
        leaders: Mapping[TopicPartition, int],
        limit: int,
        timeout: float,
    ) -> dict[tuple[str, int, int], float]:
        """Write times of the first message each lagging group has not consumed."""
        wanted: dict[tuple[str, int, int], int] = {}
        for reading in snapshot.groups.values():
            for tp, committed in reading.committed.items():
                end = snapshot.log_end.get(tp)
                if end is not None and committed < end:
                    key = (tp[0], tp[1], committed)
                    wanted[key] = max(wanted.get(key, 0), end - committed)
        chosen = sorted(wanted, key=lambda k: wanted[k], reverse=True)[:limit]
        # A Fetch names each partition once, so offsets of one partition go in rounds.
        rounds: list[dict[int, dict[str, list[tuple[int, int, int]]]]] = []
        taken: list[set[TopicPartition]] = []
        for topic, partition, offset in chosen:
            node = leaders.get((topic, partition))
            if node is None:
                continue
            i = next((n for n, used in enumerate(taken) if (topic, partition) not in used), None)
            if i is None:
                rounds.append(defaultdict(lambda: defaultdict(list)))
                taken.append(set())
                i = len(rounds) - 1
            taken[i].add((topic, partition))
            rounds[i][node][topic].append((partition, offset, _FETCH_PARTITION_BYTES))
        asked = {
            (round_no, node, topic, partition): offset
            for round_no, by_node in enumerate(rounds)
            for node, topics in by_node.items()
            for topic, parts in topics.items()
            for partition, offset, _ in parts
        }
        found: dict[tuple[str, int, int], float] = {}

        async def one(round_no: int, node: int, topics: Mapping[str, list[Any]]) -> None:
            request = FetchRequest(0, 0, _FETCH_MAX_BYTES, 0, list(topics.items()))
            try:
                response = await cluster.send_to(node, request, "Fetch", timeout)
            except (KafkaError, KafkaPlumbingError, TimeoutError):
                return  # estimates stand in
            for topic, parts in response.topics:
                for part in parts:
                    partition, error_code, data = part[0], part[1], part[-1]
                    offset = asked.get((round_no, node, topic, partition))
                    if error_code or not data or offset is None:
                        continue
                    written = _first_record_time(data, offset)
                    if written is not None:
                        found[(topic, partition, offset)] = written

        await asyncio.gather(
            *(
                one(round_no, node, topics)
                for round_no, by_node in enumerate(rounds)
                for node, topics in by_node.items()
            )
        )
        return found


def _first_record_time(data: bytes, offset: int) -> float | None:
    """Timestamp (unix seconds) of the first data record at or after ``offset``."""
    try:
        records = MemoryRecords(bytes(data))
        while True:
            batch = records.next_batch()
            if batch is None:
                return None
            if getattr(batch, "is_control_batch", False):
                continue
            for record in batch:
                if record.offset >= offset and record.timestamp is not None:
                    if record.timestamp < 0:
                        return None
                    return float(record.timestamp) / 1000.0
    except (KafkaError, ValueError, IndexError, struct.error):
        return None  # a corrupt or truncated answer: the estimate stands in


# --------------------------------------------------------------------------------------------
# CloudWatch source (MSK's own lag metrics)
# --------------------------------------------------------------------------------------------

_CW_NAMESPACE = "AWS/Kafka"
_CW_METRICS = ("MaxOffsetLag", "EstimatedMaxTimeLag", "SumOffsetLag")
_CW_DIMENSIONS = frozenset({"Cluster Name", "Consumer Group", "Topic"})
_CW_MAX_QUERIES = 500  # GetMetricData's limit per call

GroupTopic = tuple[str, str]


def aligned_range(now: float, period: int, periods: int) -> tuple[float, float]:
    """A [start, end) range on period boundaries, ending at the last complete period."""
    end = math.floor(now / period) * period
    return end - periods * period, end


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
            group, topic, None, offset_lag,
            float(time_lag[-1]) if time_lag else None,
            "cloudwatch" if time_lag else None,
            state, why, thresholds,
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
    """Reads ``AWS/Kafka`` lag metrics: ListMetrics to find (group, topic) pairs, then
    GetMetricData in batches of up to 500 queries."""

    async def read(
        self, client: Any, source: CloudWatchLagSource, params: KafkaConsumerLagParams,
        now: float,
    ) -> dict[GroupTopic, dict[str, list[float]]]:
        pattern = _compile(params.group_pattern)
        wanted_topic = params.topic_wanted()
        named = set(params.groups)
        pairs: set[GroupTopic] = set()
        paginator = client.get_paginator("list_metrics")
        async for page in paginator.paginate(
            Namespace=_CW_NAMESPACE,
            MetricName="SumOffsetLag",
            Dimensions=[{"Name": "Cluster Name", "Value": source.cluster_name}],
        ):
            for metric in page.get("Metrics", []):
                dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                if set(dims) != _CW_DIMENSIONS:
                    continue  # per-partition series (PER_TOPIC_PER_PARTITION) and others
                group, topic = dims["Consumer Group"], dims["Topic"]
                if not wanted_topic(topic):
                    continue
                if group in named or (pattern is not None and pattern.fullmatch(group)):
                    pairs.add((group, topic))
        start, end = aligned_range(now, source.period, source.lookback_periods)
        queries: list[dict[str, Any]] = []
        keys: dict[str, tuple[GroupTopic, str]] = {}
        for n, (group, topic) in enumerate(sorted(pairs)):
            for m, metric in enumerate(_CW_METRICS):
                query_id = f"q{n}_{m}"
                keys[query_id] = ((group, topic), metric)
                queries.append(
                    {
                        "Id": query_id,
                        "MetricStat": {
                            "Metric": {
                                "Namespace": _CW_NAMESPACE,
                                "MetricName": metric,
                                "Dimensions": [
                                    {"Name": "Cluster Name", "Value": source.cluster_name},
                                    {"Name": "Consumer Group", "Value": group},
                                    {"Name": "Topic", "Value": topic},
                                ],
                            },
                            "Period": source.period,
                            "Stat": "Maximum",
                        },
                        "ReturnData": True,
                    }
                )
        series: dict[GroupTopic, dict[str, list[float]]] = {pair: {} for pair in pairs}
        for i in range(0, len(queries), _CW_MAX_QUERIES):
            chunk = queries[i : i + _CW_MAX_QUERIES]
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {
                    "MetricDataQueries": chunk,
                    "StartTime": start,
                    "EndTime": end,
                    "ScanBy": "TimestampAscending",
                }
                if token:
                    kwargs["NextToken"] = token
                response = await client.get_metric_data(**kwargs)
                for row in response.get("MetricDataResults", []):
                    key = keys.get(row.get("Id", ""))
                    if key is None:
                        continue
                    points = sorted(
                        zip(row.get("Timestamps", []), row.get("Values", []), strict=False)
                    )
                    series[key[0]].setdefault(key[1], []).extend(v for _, v in points)
                token = response.get("NextToken")
                if not token:
                    break
        return series


# --------------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------------


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
        Observable("degraded_partitions", "Group-partitions judged degraded (e.g. falling "
                   "behind, lag over max_lag_seconds)."),
        Observable("down_partitions", "Group-partitions judged down (stopped, stalled)."),
        Observable("time_lag_unknown_partitions",
                   "Lagging group-partitions whose time lag is not known yet."),
        Observable("max_offset_lag_messages", "Largest offset lag of any group-partition."),
        Observable("sum_offset_lag_messages", "Offset lag summed over all group-partitions."),
        Observable("max_time_lag_seconds", "Largest time lag of any group-partition."),
        Observable("group_max_offset_lag_messages", "Largest offset lag in the group.",
                   ("group",)),
        Observable("group_sum_offset_lag_messages", "Offset lag summed over the group.",
                   ("group",)),
        Observable("group_max_time_lag_seconds", "Largest time lag in the group.", ("group",)),
        Observable("partition_offset_lag_messages", "Offset lag of one group-partition.",
                   ("group", "topic", "partition")),
        Observable("partition_time_lag_seconds", "Time lag of one group-partition.",
                   ("group", "topic", "partition")),
        Observable("topic_offset_lag_messages",
                   "Offset lag of one group's topic (CloudWatch source).", ("group", "topic")),
        Observable("topic_time_lag_seconds",
                   "Time lag of one group's topic (CloudWatch source).", ("group", "topic")),
    )

    def __init__(self, context: CheckContext, params: KafkaConsumerLagParams) -> None:
        super().__init__(context, params)
        self._evaluator = LagEvaluator(params.window, params.thresholds())
        self._reader = KafkaLagReader()
        self._cloudwatch = CloudWatchLagReader()

    async def probe(self) -> ProbeResult:
        if self.params.source == "cloudwatch":
            return await self._probe_cloudwatch()
        return await self._probe_kafka()

    async def _probe_kafka(self) -> ProbeResult:
        conn = self.params.cluster
        assert conn is not None  # the params validator guarantees it
        cluster = self.context.plumbing.kafka.cluster(conn)
        try:
            snapshot = await self._reader.read(
                cluster, self.params, RunBudget.for_check(self.context.timeout)
            )
        except KafkaAuthFailed as exc:
            return ProbeResult.unknown(f"cannot authenticate to the cluster: {exc}")
        except KafkaPlumbingError as exc:
            return ProbeResult.unknown(f"cannot read consumer lag: {exc}")
        except (KafkaError, OSError, TimeoutError) as exc:
            await cluster.reset()  # a half-broken connection is rebuilt on the next run
            return ProbeResult.unknown(
                f"cannot read consumer lag from {conn.describe()}: {type(exc).__name__}: {exc}"
            )
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
            client = await self.context.plumbing.aws.client("cloudwatch", source.aws)
            series = await self._cloudwatch.read(client, source, self.params, time.time())
        except (BotoCoreError, ClientError) as exc:
            kind = aws_error_kind(exc)
            return ProbeResult.unknown(
                f"cannot read MSK lag metrics ({kind}): {aws_error_summary(exc)}"
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
