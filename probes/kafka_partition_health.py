"""``kafka_partition_health``: under-replicated, under-min-ISR and offline partitions.

A cluster can look green in the console while a broker has silently dropped out of the ISR of
half its partitions: one more failure and those partitions lose data or go offline. This probe
reads partition state the way the brokers report it (one metadata request plus one
DescribeConfigs for ``min.insync.replicas``) and classifies every partition:

- offline: no leader, nothing can be read or written (``down``);
- under min ISR: ISR below ``min.insync.replicas``, so every ``acks=all`` producer is failing
  (``down``);
- under-replicated: ISR smaller than the replica set (``down`` on production clusters, where
  it pages immediately, ``degraded`` elsewhere).

The reason names the partitions and the brokers missing from their ISR.

A broker that accepts connections but answers nothing (hung: still registered, maybe still
leading, listed in ISRs until its session expires or its followers fall behind) is found by
asking every broker directly on each run; other requests avoid a silent one until it answers
again. It never hides the partitions: a replica the ISR lists but that does not answer is in
sync in name only, so every partition is judged on the replicas that answer (under-replicated,
or under min ISR where that leaves too few), and the verdict and the reason's first words come
from the partitions, as they will once the controller drops the broker; the silent broker is
named after them. Every request gets a slice of the check's timeout, so a hung broker never
turns the verdict into the engine's anonymous timeout; when no broker answers at all the
cluster is ``down`` with the brokers that did not answer named.

For clusters the prober cannot reach, the alternative source reads MSK's CloudWatch metrics
(``AWS/Kafka`` ``OfflinePartitionsCount``, ``UnderReplicatedPartitions``,
``UnderMinIsrPartitionCount``) instead.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.aws import AwsSettings
from alivemcp.plumbing.kafka import (
    KafkaConnection,
    PartitionState,
    RunBudget,
    Suspicion,
    cluster_failure,
    format_list,
)
from alivemcp.plumbing.kafka_cloudwatch import list_series, series_values
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings

__all__ = ["CloudWatchPartitionSource", "KafkaPartitionHealthParams", "KafkaPartitionHealthProbe"]

#: Label values (on the check) that mark a production cluster.
_PRODUCTION_VALUES = frozenset({"true", "yes", "1", "production", "prod"})
#: Kafka error codes that mean "this partition has no usable leader".
_LEADER_NOT_AVAILABLE = 5
#: Every line of a run's findings goes into the reason (each names a bounded list).
_REASON_LINES = 10
_CLOUDWATCH_METRICS = (
    "OfflinePartitionsCount",
    "UnderMinIsrPartitionCount",
    "UnderReplicatedPartitions",
)


class CloudWatchPartitionSource(BaseModel):
    """Read MSK's CloudWatch partition metrics instead of asking the brokers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster_name: str = Field(
        min_length=1, description="The MSK cluster name (CloudWatch dimension 'Cluster Name')."
    )
    aws: AwsSettings = Field(default_factory=AwsSettings, description="AWS identity and region.")
    lookback: Duration = Field(
        600.0, gt=0, description="How far back to look for the latest datapoint."
    )
    period: int = Field(60, ge=1, description="Datapoint period in seconds.")


class KafkaPartitionHealthParams(ProbeParams):
    cluster: KafkaConnection | None = Field(
        None, description="The cluster to ask (bootstrap servers or MSK ARN, security)."
    )
    cloudwatch: CloudWatchPartitionSource | None = Field(
        None, description="Alternative source: MSK CloudWatch metrics (no broker access)."
    )
    topics: list[str] = Field(
        default_factory=list, description="Only these topics (default: all topics)."
    )
    topic_pattern: str | None = Field(
        None, description="Only topics whose full name matches this regular expression."
    )
    exclude_pattern: str | None = Field(
        None, description="Skip topics whose full name matches this regular expression."
    )
    include_internal: bool = Field(
        True, description="Include internal topics (__consumer_offsets, __transaction_state)."
    )
    production: bool | None = Field(
        None,
        description="Under-replicated is down (not degraded). Default: the check's "
        "`production` label is true, or its `env` label is production/prod.",
    )
    expected_brokers: int | None = Field(
        None, ge=1, description="Brokers the cluster should have; fewer alive is reported."
    )
    max_listed: int = Field(
        10, ge=1, le=200, description="At most this many partitions named in the reason."
    )

    @model_validator(mode="after")
    def _one_source(self) -> KafkaPartitionHealthParams:
        if (self.cluster is None) == (self.cloudwatch is None):
            raise ValueError("set exactly one of cluster or cloudwatch")
        if self.cloudwatch is not None and (self.topics or self.topic_pattern):
            raise ValueError("CloudWatch metrics are cluster-wide: topic filters do not apply")
        return self

    @field_validator("topic_pattern", "exclude_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression: {exc}") from exc
        return value


@dataclass(frozen=True, slots=True)
class _Judged:
    """A partition as judged: its state, and the brokers its ISR lists that did not answer
    the prober this run (hung: in sync in name only)."""

    state: PartitionState
    silent: tuple[int, ...] = ()

    @property
    def in_sync(self) -> tuple[int, ...]:
        return tuple(b for b in self.state.isr if b not in self.silent)

    @property
    def missing(self) -> tuple[int, ...]:
        in_sync = self.in_sync
        return tuple(r for r in self.state.replicas if r not in in_sync)

    def named(self, text: str) -> str:
        """``orders/0 <text>``, and the listed brokers that did not answer."""
        x = self.state
        quiet = (
            f" (broker{'s' if len(self.silent) > 1 else ''} "
            f"{', '.join(map(str, self.silent))} in ISR, not answering)"
            if self.silent
            else ""
        )
        return f"{x.topic}/{x.partition} {text}{quiet}"


@dataclass
class _Findings:
    offline: list[PartitionState] = field(default_factory=list)
    under_min_isr: list[tuple[_Judged, int]] = field(default_factory=list)
    under_replicated: list[_Judged] = field(default_factory=list)
    missing_topics: list[str] = field(default_factory=list)
    #: Topics whose min.insync.replicas could not be read (not checked for under-min-ISR).
    min_isr_unknown: list[str] = field(default_factory=list)
    #: Why min.insync.replicas could not be read at all (a broker did not answer).
    configs_error: str | None = None
    #: Brokers that did not answer the prober (hung), as it last saw them.
    not_answering: list[Suspicion] = field(default_factory=list)
    partitions: int = 0
    topics: int = 0

    def missing_brokers(self) -> list[int]:
        counts: Counter[int] = Counter()
        for judged in self.under_replicated:
            counts.update(judged.missing)
        for part in self.offline:
            counts.update(part.replicas)
        return sorted(counts)


class KafkaPartitionHealthProbe(Probe[KafkaPartitionHealthParams]):
    Params = KafkaPartitionHealthParams
    summary = "Under-replicated, under-min-ISR and offline partitions (brokers or CloudWatch)"
    observables = (
        Observable("partitions", "Partitions the run covered."),
        Observable("topics", "Topics the run covered."),
        Observable("offline_partitions", "Partitions without a leader."),
        Observable(
            "under_min_isr_partitions",
            "Partitions with fewer in-sync replicas than min.insync.replicas.",
        ),
        Observable("under_replicated_partitions", "Partitions missing an in-sync replica."),
        Observable("brokers", "Brokers registered and answering."),
        Observable("brokers_not_answering", "Registered brokers that did not answer."),
    )

    def _production(self) -> bool:
        if self.params.production is not None:
            return self.params.production
        labels = self.context.labels
        return labels.get("production", "").lower() in _PRODUCTION_VALUES or labels.get(
            "env", ""
        ).lower() in ("production", "prod")

    async def probe(self) -> ProbeResult:
        if self.params.cloudwatch is not None:
            return await self._from_cloudwatch(self.params.cloudwatch)
        assert self.params.cluster is not None
        return await self._from_brokers(self.params.cluster)

    # -- brokers ------------------------------------------------------------------------------

    async def _from_brokers(self, conn: KafkaConnection) -> ProbeResult:
        p = self.params
        cluster = plumbing_of(self.context).kafka.cluster(conn)
        budget = RunBudget.for_check(self.context.timeout)
        found = _Findings()
        try:
            # Metadata is the verdict; min.insync.replicas only refines it, so it gets part
            # of what is left (and its failure is reported, not fatal).
            snapshot = await cluster.metadata(
                p.topics or None, timeout=budget.step(conn.request_timeout, share=0.6)
            )
        except ProbeError as err:
            return cluster_failure(err)
        selected = {
            name: topic for name, topic in snapshot.topics.items() if self._wanted(name, topic)
        }
        # Together (on separate connections): min.insync.replicas, and every broker asked
        # whether it answers at all (a hung broker's partitions can still look fine).
        step = budget.step(conn.request_timeout, share=0.5)
        configs_or_error, suspects = await asyncio.gather(
            cluster.topic_configs(
                [n for n, t in selected.items() if t.error_code == 0], timeout=step
            ),
            cluster.ask_every_broker(step),
            return_exceptions=True,
        )
        if isinstance(configs_or_error, ProbeError) and configs_or_error.kind is ErrorKind.AUTH:
            return cluster_failure(configs_or_error)
        if isinstance(configs_or_error, ProbeError):
            configs, found.configs_error = {}, str(configs_or_error)
        elif isinstance(configs_or_error, BaseException):
            raise configs_or_error
        else:
            configs = configs_or_error
        if isinstance(suspects, BaseException):
            raise suspects
        found.not_answering = suspects
        silent = {s.node_id for s in suspects if s.node_id is not None}

        for name, topic in sorted(selected.items()):
            if topic.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
                found.missing_topics.append(name)
                continue
            found.topics += 1
            min_isr = _int(configs.get(name, {}).get("min.insync.replicas"))
            if min_isr is None:
                found.min_isr_unknown.append(name)
            for part in topic.partitions:
                found.partitions += 1
                if part.offline or part.error_code == _LEADER_NOT_AVAILABLE:
                    found.offline.append(part)
                    continue
                judged = _Judged(part, tuple(b for b in part.isr if b in silent))
                if min_isr is not None and len(judged.in_sync) < min_isr:
                    found.under_min_isr.append((judged, min_isr))
                if judged.missing:
                    found.under_replicated.append(judged)

        brokers_alive = sorted(snapshot.brokers)
        observations = {
            "partitions": float(found.partitions),
            "topics": float(found.topics),
            "offline_partitions": float(len(found.offline)),
            "under_min_isr_partitions": float(len(found.under_min_isr)),
            "under_replicated_partitions": float(len(found.under_replicated)),
            "brokers": float(len(brokers_alive)),
            "brokers_not_answering": float(len(found.not_answering)),
        }
        details = self._details(found, brokers_alive, snapshot.controller_id)
        if p.topic_pattern and not selected and not p.topics:
            return ProbeResult.unknown(
                f"no topic matches {p.topic_pattern!r}",
                observations=observations,
                details=details,
            )
        return self._verdict(found, brokers_alive, observations, details)

    def _wanted(self, name: str, topic: Any) -> bool:
        p = self.params
        if topic.internal and not p.include_internal and name not in p.topics:
            return False
        if p.topic_pattern and not re.fullmatch(p.topic_pattern, name):
            return False
        return not (p.exclude_pattern and re.fullmatch(p.exclude_pattern, name))

    def _verdict(
        self,
        found: _Findings,
        brokers_alive: list[int],
        observations: Mapping[str, float],
        details: Mapping[str, Any],
    ) -> ProbeResult:
        p = self.params
        # Under-replication (and a broker that stopped answering) pages on production.
        replication = Status.DOWN if self._production() else Status.DEGRADED
        result = Findings()
        result.observations.update(observations)
        result.details.update(details)
        if found.offline:
            result.add(
                Status.DOWN,
                f"{len(found.offline)} offline (no leader): "
                + format_list(
                    [f"{x.topic}/{x.partition} replicas {_ids(x.replicas)}" for x in found.offline],
                    p.max_listed,
                ),
            )
        if found.under_min_isr:
            result.add(
                Status.DOWN,
                f"{len(found.under_min_isr)} under min ISR (acks=all producers fail): "
                + format_list(
                    [x.named(f"isr {_ids(x.in_sync)} < {m}") for x, m in found.under_min_isr],
                    p.max_listed,
                ),
            )
        if found.under_replicated:
            missing = sorted({b for x in found.under_replicated for b in x.missing})
            result.add(
                replication,
                f"{len(found.under_replicated)} under-replicated "
                f"(broker{'s' if len(missing) != 1 else ''} {', '.join(map(str, missing))} "
                "missing from ISR): "
                + format_list(
                    [
                        x.named(f"isr {_ids(x.in_sync)} of {_ids(x.state.replicas)}")
                        for x in found.under_replicated
                    ],
                    p.max_listed,
                ),
            )
        if found.not_answering:  # (after the partitions it affects: a detail of their verdict)
            result.add(
                replication, format_list([s.describe() for s in found.not_answering], p.max_listed)
            )
        if found.configs_error and found.min_isr_unknown:
            result.add(
                Status.DEGRADED,
                f"min.insync.replicas unread for {_count(len(found.min_isr_unknown), 'topic')} "
                f"(not checked for under-min-ISR): {found.configs_error}",
            )
        if found.missing_topics:
            result.add(
                Status.DOWN, "topic not found: " + format_list(found.missing_topics, p.max_listed)
            )
        if p.expected_brokers is not None and len(brokers_alive) < p.expected_brokers:
            result.add(
                Status.DEGRADED,
                f"{len(brokers_alive)} of {p.expected_brokers} brokers alive "
                f"({_ids(brokers_alive)})",
            )
        return result.result(
            f"{_count(found.partitions, 'partition')} in {_count(found.topics, 'topic')} fully "
            f"replicated on {_count(len(brokers_alive), 'broker')}",
            max_listed=_REASON_LINES,
        )

    def _details(
        self, found: _Findings, brokers_alive: list[int], controller_id: int
    ) -> dict[str, Any]:
        limit = 100  # details are for humans and the status API: bounded

        def row(x: PartitionState, **extra: Any) -> dict[str, Any]:
            return {
                "topic": x.topic,
                "partition": x.partition,
                "leader": x.leader,
                "replicas": list(x.replicas),
                "isr": list(x.isr),
                **extra,
            }

        def judged(x: _Judged, **extra: Any) -> dict[str, Any]:
            return row(x.state, isr_not_answering=list(x.silent), **extra)

        return {
            "brokers_alive": brokers_alive,
            "controller": controller_id,
            "brokers_missing_from_isr": found.missing_brokers(),
            "offline": [row(x) for x in found.offline[:limit]],
            "under_min_isr": [judged(x, min_isr=m) for x, m in found.under_min_isr[:limit]],
            "under_replicated": [judged(x) for x in found.under_replicated[:limit]],
            "missing_topics": found.missing_topics[:limit],
            "min_isr_unknown": found.min_isr_unknown[:limit],
            "configs_error": found.configs_error,
            "brokers_not_answering": [
                {"broker": x.node_id, "address": x.address, "reason": x.reason}
                for x in found.not_answering[:limit]
            ],
            "production": self._production(),
        }

    # -- CloudWatch ---------------------------------------------------------------------------

    async def _from_cloudwatch(self, source: CloudWatchPartitionSource) -> ProbeResult:
        now = datetime.now(UTC)
        start = now - timedelta(seconds=source.lookback)
        try:
            client = await plumbing_of(self.context).aws.client("cloudwatch", source.aws)
            series = [
                found
                for metric in _CLOUDWATCH_METRICS
                for found in await list_series(client, source.cluster_name, metric)
            ]
            if not series:
                return ProbeResult.unknown(
                    f"CloudWatch has no AWS/Kafka partition metrics for cluster "
                    f"{source.cluster_name!r}"
                )
            values = await series_values(client, series, start, now, source.period)
        except ProbeError as err:
            # Whatever failed, it was the prober's view that broke, not the cluster.
            what = "own credentials" if err.kind is ErrorKind.AUTH else "CloudWatch"
            return ProbeResult.unknown(f"{what}: {err.operation}: {err.detail}")

        totals: dict[str, float] = {}
        per_broker: dict[str, dict[str, float]] = {}
        for (metric, dimensions), points in zip(series, values, strict=True):
            if not points:
                continue
            value = points[-1]  # the latest
            totals[metric] = totals.get(metric, 0.0) + value
            broker = next((d["Value"] for d in dimensions if d["Name"] == "Broker ID"), None)
            if broker is not None and value > 0:
                per_broker.setdefault(metric, {})[broker] = value
        if not totals:
            return ProbeResult.unknown(
                f"no datapoints for cluster {source.cluster_name!r} in the last "
                f"{source.lookback:g}s"
            )
        offline = totals.get("OfflinePartitionsCount", 0.0)
        under_min = totals.get("UnderMinIsrPartitionCount", 0.0)
        under_rep = totals.get("UnderReplicatedPartitions", 0.0)
        found = Findings()
        found.observations.update(
            offline_partitions=offline,
            under_min_isr_partitions=under_min,
            under_replicated_partitions=under_rep,
        )
        found.details.update(
            source="cloudwatch",
            cluster_name=source.cluster_name,
            by_broker=per_broker,
            production=self._production(),
        )
        where = f" (CloudWatch, cluster {source.cluster_name})"
        if offline > 0:
            found.add(Status.DOWN, f"{offline:g} offline partitions")
        if under_min > 0:
            found.add(
                Status.DOWN,
                f"{under_min:g} partitions under min ISR"
                + _brokers_note(per_broker.get("UnderMinIsrPartitionCount")),
            )
        if under_rep > 0:
            found.add(
                Status.DOWN if self._production() else Status.DEGRADED,
                f"{under_rep:g} under-replicated partitions"
                + _brokers_note(per_broker.get("UnderReplicatedPartitions")),
            )
        result = found.result(
            "no offline, under-min-ISR or under-replicated partitions", max_listed=_REASON_LINES
        )
        return replace(result, reason=result.reason + where)


def _brokers_note(by_broker: Mapping[str, float] | None) -> str:
    if not by_broker:
        return ""
    return " on broker " + ", ".join(f"{b} ({v:g})" for b, v in sorted(by_broker.items()))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _ids(values: Sequence[int] | list[int]) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"
