"""What one run of ``kafka_canary`` did, and the verdict on it.

A run produces to every partition (:class:`Produced`, :class:`Failed`) and reads its messages
back (:class:`Outcome`); :func:`verdict` is ``down`` when a produce failed, naming partitions
and leaders, ``degraded`` for slow produces or round trips and messages not read back, else
``up``, with the run's observations and details.

A run whose producer could get no producer id (every broker answered "not yet": the
controller they get ids from does not answer) writes with a plain ``acks=all`` producer
instead, so the partitions are still judged; that no new idempotent producer can start is
``degraded`` on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from alivemcp.plumbing.kafka import format_list
from alivemcp.probe import ProbeResult, Status
from alivemcp.verdict import Findings
from probes.kafka_canary.params import KafkaCanaryParams

__all__ = ["Failed", "Outcome", "Produced", "failure_text", "verdict"]


@dataclass(slots=True)
class Produced:
    partition: int
    offset: int
    latency: float


@dataclass(slots=True)
class Failed:
    partition: int
    leader: int
    error: str


@dataclass(slots=True)
class Outcome:
    """What one run did: the partitions written, failed and read back."""

    partitions: Sequence[int]
    produced: list[Produced] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    #: Seconds from send to read, by partition (messages that came back in time).
    roundtrip: dict[int, float] = field(default_factory=dict)
    #: Why nothing could be read back at all.
    reader_error: str | None = None
    #: Partitions that could not be read back, with why.
    unread: dict[int, str] = field(default_factory=dict)
    #: Why the run wrote with a plain producer: no broker handed out a producer id in time.
    without_idempotence: str | None = None

    def lost(self) -> list[int]:
        """Produced but not read back in time (not counted when reading was impossible)."""
        if self.reader_error:
            return []  # nothing was read at all: said once
        return sorted(
            x.partition
            for x in self.produced
            if x.partition not in self.roundtrip and x.partition not in self.unread
        )

    def failed_in_order(self) -> list[Failed]:
        return sorted(self.failed, key=lambda f: f.partition)

    def produce_max(self) -> float:
        return max((x.latency for x in self.produced), default=0.0)

    def roundtrip_max(self) -> float:
        return max(self.roundtrip.values(), default=0.0)


def failure_text(f: Failed) -> str:
    """One failed produce, for reasons: the partition, its leader and what went wrong."""
    leader = f.leader if f.leader >= 0 else "none"
    return f"partition {f.partition} (leader broker {leader}): {f.error}"


def verdict(params: KafkaCanaryParams, run: Outcome) -> ProbeResult:
    """``down`` when a produce failed (naming partitions and leaders); ``degraded`` for
    slow produces or round trips, messages not read back, and no producer id to be had;
    else ``up``."""
    p = params
    found = Findings()
    _observe(params, found, run)
    found.details.update(_details(params, run))
    if run.failed:
        found.add(
            Status.DOWN,
            f"produce to {p.topic} failed on {len(run.failed)} of {len(run.partitions)} "
            "partitions: "
            + format_list([failure_text(f) for f in run.failed_in_order()], p.max_listed),
        )
    else:
        for problem in _read_problems(params, run):
            found.add(Status.DEGRADED, problem)
    if run.without_idempotence:
        found.add(
            Status.DEGRADED,
            f"new idempotent producers cannot start: {run.without_idempotence} "
            "(the canary wrote without idempotence)",
        )
    n = len(run.partitions)
    return found.result(
        f"produced to {'all ' if n > 1 else ''}{n} partition{'s' if n != 1 else ''} of "
        f"{p.topic} (max {run.produce_max() * 1000:.0f} ms), read back in max "
        f"{run.roundtrip_max() * 1000:.0f} ms"
    )


def _read_problems(params: KafkaCanaryParams, run: Outcome) -> list[str]:
    """What made a run without failed produces less than healthy."""
    p = params
    problems: list[str] = []
    slow = sorted(
        (x for x in run.produced if x.latency > p.produce_latency_threshold),
        key=lambda x: -x.latency,
    )
    if slow:
        problems.append(
            f"produce latency above {p.produce_latency_threshold:g}s on "
            + format_list(
                [f"partition {x.partition} ({x.latency:.2f}s)" for x in slow], p.max_listed
            )
        )
    slow_rt = sorted(
        ((k, v) for k, v in run.roundtrip.items() if v > p.roundtrip_latency_threshold),
        key=lambda kv: -kv[1],
    )
    if slow_rt:
        problems.append(
            f"round trip above {p.roundtrip_latency_threshold:g}s on "
            + format_list([f"partition {k} ({v:.2f}s)" for k, v in slow_rt], p.max_listed)
        )
    if run.reader_error:
        problems.append(f"cannot read the canary back: {run.reader_error}")
    if run.unread:
        problems.append(
            "cannot read back "
            + format_list(
                [f"partition {k} ({v})" for k, v in sorted(run.unread.items())],
                p.max_listed,
            )
        )
    lost = run.lost()
    if lost:
        problems.append(
            f"{len(lost)} message(s) not read back within {p.roundtrip_timeout:g}s: "
            + format_list([f"partition {x}" for x in lost], p.max_listed)
        )
    return problems


def _observe(params: KafkaCanaryParams, found: Findings, run: Outcome) -> None:
    found.observations.update(
        {
            "partitions": float(len(run.partitions)),
            "partitions_failed": float(len(run.failed)),
            "produce_latency_max_seconds": run.produce_max(),
            "roundtrip_latency_max_seconds": run.roundtrip_max(),
            "messages_not_read_back": float(len(run.lost())),
        }
    )
    if len(run.partitions) <= params.per_partition_max:
        for x in run.produced:
            found.labeled("produce_latency_seconds", x.latency, partition=str(x.partition))
        for part, seconds in run.roundtrip.items():
            found.labeled("roundtrip_latency_seconds", seconds, partition=str(part))


def _details(params: KafkaCanaryParams, run: Outcome) -> dict[str, Any]:
    return {
        "topic": params.topic,
        "failed": [
            {"partition": f.partition, "leader": f.leader, "error": f.error}
            for f in run.failed_in_order()
        ][:100],
        "produce_latency_seconds": {str(x.partition): round(x.latency, 4) for x in run.produced},
        "roundtrip_latency_seconds": {str(k): round(v, 4) for k, v in run.roundtrip.items()},
        "not_read_back": run.lost()[:100],
        "reader_error": run.reader_error,
        "unreadable": {str(k): v for k, v in sorted(run.unread.items())[:100]},
        "without_idempotence": run.without_idempotence,
    }
