"""The ``cluster:`` section of the config. Absent: standalone (one process, every check)."""

from __future__ import annotations

import re
import socket
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.durations import Duration
from alivemcp.plumbing.kafka_settings import KafkaConnection

__all__ = [
    "DEFAULT_LOCATION",
    "LOCATION_NAME",
    "LOCATION_NAME_RULE",
    "ClusterConfig",
    "ClusterTopics",
    "check_locations",
    "check_quorum",
]

DAY = 86400.0
#: Kafka topic names: at most 249 of [a-zA-Z0-9._-], not "." or "..".
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: A location's name: it goes into consumer group ids, metric labels and the User-Agent.
LOCATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
LOCATION_NAME_RULE = "1-63 of A-Z a-z 0-9 _ -, starting with a letter or digit"
DEFAULT_LOCATION = "default"


def check_locations(value: list[str] | None) -> list[str] | None:
    """A check's (or discovery template's) ``locations``: names, at least one, none twice."""
    if value is None:
        return None
    if not value:
        raise ValueError("at least one location (leave it out for every location)")
    for name in value:
        if not LOCATION_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a location name ({LOCATION_NAME_RULE})")
    if len(set(value)) != len(value):
        raise ValueError("a location is listed twice")
    return value


def check_quorum(quorum: int | None, locations: list[str] | None) -> None:
    if quorum is not None and locations is not None and quorum > len(locations):
        raise ValueError(f"quorum {quorum} exceeds the {len(locations)} locations listed")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterTopics(_Strict):
    results: str = Field(
        "mcp-probe-results",
        description="Every result, keyed by check name, one partition per "
        "shard; its partitions are the shards the consumer group hands out.",
    )
    status_changes: str = Field(
        "mcp-status-changes", description="Status transitions only, keyed by check name."
    )
    alert_state: str = Field(
        "alivemcp-alert-state",
        description="Alert state per check (compacted), keyed by check "
        "name with the results topic's partitioning.",
    )

    @field_validator("results", "status_changes", "alert_state")
    @classmethod
    def _topic_name(cls, value: str) -> str:
        if not _TOPIC.fullmatch(value) or value in {".", ".."}:
            raise ValueError("a Kafka topic name: 1-249 characters of a-z A-Z 0-9 . _ -")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> ClusterTopics:
        if len({self.results, self.status_changes, self.alert_state}) != 3:
            raise ValueError("results, status_changes and alert_state must be three topics")
        return self


class ClusterConfig(_Strict):
    kafka: KafkaConnection = Field(
        description="The Kafka/MSK cluster the replicas coordinate through (the same block the "
        "Kafka probes take: bootstrap_servers or cluster_arn, TLS, SCRAM, MSK IAM)."
    )
    group: str = Field(
        "alivemcp", min_length=1, max_length=249, description="Consumer group of the replicas."
    )
    shards: int = Field(
        60,
        ge=1,
        le=10_000,
        description="Shards = partitions of the results, status-change "
        "and alert-state topics. Changing it re-homes most checks: stop all replicas first.",
    )
    replica_id: str = Field(
        "",
        max_length=249,
        description="This replica's id, unique in the whole deployment (empty: the host "
        "name, after the location and a dot when it is not `default`): the owner shown in "
        "/status, and its static group membership (a replica restarted with the same id within the "
        "session timeout gets its shards back without a rebalance).",
    )
    location: str = Field(
        DEFAULT_LOCATION,
        description="Where this replica probes from (a region, a data centre, a private "
        "location inside a network). Replicas of one location share its checks by shards; "
        "every location probes each of its checks, and a check's verdict is the quorum of its "
        "locations (docs/cluster.md). Named in the probes' User-Agent.",
    )
    freshness_intervals: float = Field(
        2.0,
        ge=1.0,
        le=100.0,
        description="A location's latest result of a check votes while it is younger than "
        "this many of the check's intervals; older, the location does not vote.",
    )
    topics: ClusterTopics = Field(default_factory=ClusterTopics, description="Topic names.")
    session_timeout: Duration = Field(
        10.0,
        ge=6,
        le=300,
        description="Consumer-group session timeout: a replica silent this "
        "long loses its shards to the others; one that cannot reach the group coordinator this "
        "long stops probing (see docs/cluster.md, split brain). Within the brokers' "
        "group.min/max.session.timeout.ms (6 s - 30 min by default).",
    )
    heartbeat_interval: Duration = Field(
        1.0, le=60, description="Group heartbeats; at most a third of session_timeout."
    )
    create_topics: bool = Field(
        True,
        description="Create missing topics with the settings below (needs CreateTopics "
        "permission); false: they must exist (docs/cluster.md lists them).",
    )
    replication_factor: int = Field(3, ge=1, le=32, description="For created topics.")
    min_insync_replicas: int = Field(2, ge=1, le=32, description="For created topics.")
    results_retention: Duration = Field(
        7 * DAY, description="Results topic retention (the SLA window in the seed's design)."
    )
    status_changes_retention: Duration = Field(30 * DAY, description="Status-changes retention.")
    compression: Literal["lz4", "zstd", "gzip", "snappy", "none"] = Field(
        "lz4", description="Producer compression of results and status changes."
    )
    view_replay: Duration = Field(
        600.0,
        description="How far back a starting replica reads the results topic to fill "
        "its status page (and, on its first start, its history); a restart resumes history "
        "where it stopped.",
    )
    produce_buffer: int = Field(
        100_000,
        ge=100,
        le=10_000_000,
        description="Results waiting to be produced; beyond it "
        "the oldest are dropped and counted (probing never waits for Kafka).",
    )

    @field_validator("location")
    @classmethod
    def _location_name(cls, value: str) -> str:
        if not LOCATION_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a location name ({LOCATION_NAME_RULE})")
        return value

    @property
    def probing_group(self) -> str:
        """The consumer group of this location's replicas: they share its checks by shards.
        The default location keeps the group's own name (a deployment from before locations
        goes on as it was)."""
        if self.location == DEFAULT_LOCATION:
            return self.group
        return f"{self.group}.location.{self.location}"

    @property
    def verdict_group(self) -> str:
        """The consumer group of every replica of every location: the holder of a shard
        decides its checks' verdicts, pages and keeps their alert state."""
        return f"{self.group}.verdict"

    @model_validator(mode="after")
    def _consistent(self) -> ClusterConfig:
        if not self.replica_id.strip():
            # Host names repeat across locations (a StatefulSet's pod-0 in each cluster), and
            # every location's replicas meet in the verdict group.
            host = socket.gethostname()
            self.replica_id = (
                host if self.location == DEFAULT_LOCATION else f"{self.location}.{host}"
            )
        if self.heartbeat_interval * 3 > self.session_timeout:
            raise ValueError("heartbeat_interval must be at most a third of session_timeout")
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError("min_insync_replicas cannot exceed replication_factor")
        return self
