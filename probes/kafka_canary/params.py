"""The ``kafka_canary`` params: the cluster, the canary topic, and the limits."""

from __future__ import annotations

from pydantic import Field, model_validator

from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Duration, ProbeParams

__all__ = ["KafkaCanaryParams"]


class KafkaCanaryParams(ProbeParams):
    cluster: KafkaConnection = Field(
        description="The cluster to write to (bootstrap servers or MSK ARN, security)."
    )
    topic: str = Field(
        "alivemcp-canary", min_length=1, max_length=249, description="The canary topic."
    )
    create_topic: bool = Field(
        True,
        description="Create the canary topic if it is missing, and add a partition for each new "
        "broker that leads none (needs CreateTopics/Alter on the topic).",
    )
    partitions: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Partitions when creating the topic (default: one per live broker).",
    )
    replication_factor: int | None = Field(
        None, ge=1, le=32, description="Replication factor when creating (default min(3, brokers))."
    )
    min_insync_replicas: int | None = Field(
        None, ge=1, description="min.insync.replicas when creating (default 2 where RF >= 3)."
    )
    retention: Duration = Field(3600.0, gt=0, description="retention.ms of a created canary topic.")
    produce_timeout: Duration = Field(
        10.0, gt=0, description="A produce not acknowledged within this time counts as failed."
    )
    produce_latency_threshold: Duration = Field(
        1.0, gt=0, description="Produce latency above this (any partition) is degraded."
    )
    roundtrip_timeout: Duration = Field(
        5.0, gt=0, description="How long to wait for the messages to be read back."
    )
    roundtrip_latency_threshold: Duration = Field(
        2.0, gt=0, description="Produce-to-read latency above this is degraded."
    )
    per_partition_max: int = Field(
        32,
        ge=0,
        le=1000,
        description="Per-partition latency series only when the topic has at most this many "
        "partitions (bounded cardinality; 0 disables).",
    )
    max_listed: int = Field(10, ge=1, le=200, description="At most this many partitions named.")

    @model_validator(mode="after")
    def _sane(self) -> KafkaCanaryParams:
        if (
            self.min_insync_replicas is not None
            and self.replication_factor is not None
            and self.min_insync_replicas > self.replication_factor
        ):
            raise ValueError("min_insync_replicas cannot exceed replication_factor")
        return self
