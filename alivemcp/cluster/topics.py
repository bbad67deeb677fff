"""The cluster's three topics: created when missing (if allowed), and their layout checked.

Every topic has one partition per shard: a check's results, status changes and alert state
all land in partition ``shard_of(check)``. A topic with another partition count would put a
check's records where its owner does not look, so it stops the start with one line saying
what to do. Settings of created topics: replication factor and ``min.insync.replicas`` from
the config, retention (results: the SLA window; status changes: longer), and
``cleanup.policy=compact`` for alert state (only the latest record of a check matters).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from alivemcp.cluster._kafka import (
    AIOKafkaAdminClient,
    ClusterKafka,
    KafkaError,
    NewTopic,
    error_for_code,
)
from alivemcp.cluster.config import ClusterConfig
from alivemcp.plumbing.kafka import KafkaPlumbingError

__all__ = ["ClusterTopicsError", "KafkaUnavailableError", "ensure_topics", "topic_specs"]

log = structlog.get_logger("alivemcp.cluster")

#: Kafka's error code for a topic that exists (another replica created it first).
_TOPIC_ALREADY_EXISTS = 36


class ClusterTopicsError(Exception):
    """The topics cannot serve this config (wrong partition count, missing and not to be
    created, creation refused). Retrying does not help: the daemon stops with this line."""


class KafkaUnavailableError(Exception):
    """Kafka could not be asked (unreachable, timed out): worth retrying."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str  # results | status_changes | alert_state
    configs: dict[str, str]


def topic_specs(config: ClusterConfig) -> list[TopicSpec]:
    """The topics and the settings they are created with."""
    common = {"min.insync.replicas": str(config.min_insync_replicas)}
    return [
        TopicSpec(
            config.topics.results,
            "results",
            {
                **common,
                "cleanup.policy": "delete",
                "retention.ms": str(int(config.results_retention * 1000)),
            },
        ),
        TopicSpec(
            config.topics.status_changes,
            "status_changes",
            {
                **common,
                "cleanup.policy": "delete",
                "retention.ms": str(int(config.status_changes_retention * 1000)),
            },
        ),
        # Hourly segments and an eager cleaner: compaction never touches the active segment,
        # and with the default week-long segments a takeover would read every superseded
        # record of the week before it may evaluate the shard's alerts.
        TopicSpec(
            config.topics.alert_state,
            "alert_state",
            {
                **common,
                "cleanup.policy": "compact",
                "segment.ms": "3600000",
                "min.cleanable.dirty.ratio": "0.1",
            },
        ),
    ]


async def ensure_topics(
    config: ClusterConfig, kafka: ClusterKafka, timeout: float = 30.0
) -> list[str]:
    """Create the missing topics (when ``create_topics``), then check that every topic has
    ``shards`` partitions. Returns the names created. Raises :class:`ClusterTopicsError`
    (fatal) or :class:`KafkaUnavailableError` (retry)."""
    try:
        async with asyncio.timeout(timeout):
            return await _ensure(config, kafka)
    except TimeoutError as exc:
        raise KafkaUnavailableError(f"no answer from Kafka within {timeout:g}s") from exc
    except (KafkaError, KafkaPlumbingError, OSError) as exc:
        raise KafkaUnavailableError(f"{type(exc).__name__}: {exc}") from exc


async def _ensure(config: ClusterConfig, kafka: ClusterKafka) -> list[str]:
    specs = topic_specs(config)
    admin = await kafka.admin()
    try:
        await admin.start()
        # All topics (no names): a metadata request naming a missing topic would create it
        # with the broker's defaults where auto-creation is on.
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        created: list[str] = []
        if missing and not config.create_topics:
            raise ClusterTopicsError(
                "cluster topics missing: "
                + ", ".join(s.name for s in missing)
                + f" (create them with {config.shards} partitions, see docs/cluster.md, "
                "or set cluster.create_topics: true)"
            )
        if missing:
            created = await _create(admin, config, missing)
        await _check_layout(admin, config, specs)
        return created
    finally:
        await admin.close()


async def _create(
    admin: AIOKafkaAdminClient, config: ClusterConfig, missing: list[TopicSpec]
) -> list[str]:
    new = [
        NewTopic(spec.name, config.shards, config.replication_factor, topic_configs=spec.configs)
        for spec in missing
    ]
    response = await admin.create_topics(new)
    created: list[str] = []
    for topic, code, *rest in response.topic_errors:
        if code == 0:
            created.append(topic)
        elif code != _TOPIC_ALREADY_EXISTS:  # a replica starting alongside made it first
            message = (rest[0] if rest else None) or error_for_code(code).__name__
            raise ClusterTopicsError(
                f"cannot create cluster topic {topic!r} ({config.shards} partitions, "
                f"replication factor {config.replication_factor}): {message}"
            )
    if created:
        log.info(
            "cluster topics created",
            topics=created,
            partitions=config.shards,
            replication_factor=config.replication_factor,
            min_insync_replicas=config.min_insync_replicas,
        )
    return created


async def _check_layout(
    admin: AIOKafkaAdminClient, config: ClusterConfig, specs: list[TopicSpec], settle: float = 10.0
) -> None:
    """Every topic has ``shards`` partitions. A topic just created may not be in every
    broker's metadata yet: asked again for up to ``settle`` seconds."""
    deadline = time.monotonic() + settle
    names = [spec.name for spec in specs]
    while True:
        described = await admin.describe_topics(names)
        counts = {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
        if len(counts) == len(names) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    for spec in specs:
        count = counts.get(spec.name)
        if count is None:
            raise KafkaUnavailableError(f"topic {spec.name!r} not in the cluster metadata yet")
        if count != config.shards:
            raise ClusterTopicsError(
                f"cluster topic {spec.name!r} ({spec.role}) has {count} partitions but "
                f"cluster.shards is {config.shards}: a check's records would land where its "
                "owner does not look (set cluster.shards to the partition count, or use new "
                "topics; docs/cluster.md)"
            )
