"""The ``kafka_consumer_lag`` params: which groups and topics, which source, the limits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.plumbing.aws import AwsSettings
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Duration, ProbeParams
from probes.kafka_consumer_lag.judge import Thresholds

__all__ = [
    "CloudWatchLagSource",
    "KafkaConsumerLagParams",
    "TopicFilter",
    "compile_pattern",
]


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
        return TopicFilter(frozenset(self.topics), compile_pattern(self.topic_pattern))


def compile_pattern(pattern: str | None) -> re.Pattern[str] | None:
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
