"""Helpers for the results stream and view tests (on the shared 3-broker Kafka of
tests/cluster/conftest.py): topics per test, results as the engine makes them, reading a topic
back, and the record batches as the brokers stored them."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import CollectorRegistry

from alivemcp.app.route import result_route
from alivemcp.cluster._kafka import ClusterKafka
from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.stream import ResultsStream
from alivemcp.engine.pipeline import ResultPipeline
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.plumbing import Plumbing
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


def cluster_config(
    bootstrap: str,
    *,
    shards: int = 6,
    replica: str = "replica-a",
    buffer: int = 100_000,
    compression: str = "lz4",
    request_timeout: float = 3.0,
    prefix: str | None = None,
) -> ClusterConfig:
    base = prefix or unique("t")
    return ClusterConfig.model_validate(
        {
            "kafka": {"bootstrap_servers": bootstrap, "request_timeout": request_timeout},
            "shards": shards,
            "replica_id": replica,
            "produce_buffer": buffer,
            "compression": compression,
            "topics": {
                "results": f"{base}-results",
                "status_changes": f"{base}-changes",
                "alert_state": f"{base}-alerts",
            },
        }
    )


@dataclass
class Parts:
    config: ClusterConfig
    kafka: ClusterKafka
    registry: CollectorRegistry
    plumbing: Plumbing

    async def aclose(self) -> None:
        await self.kafka.aclose()
        await self.plumbing.aclose()


def parts(config: ClusterConfig) -> Parts:
    plumbing = Plumbing()
    return Parts(config, ClusterKafka(config.kafka, plumbing), CollectorRegistry(), plumbing)


async def create_topics(bootstrap: str, config: ClusterConfig, *, min_insync: int = 2) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        settings = {"min.insync.replicas": str(min_insync)}
        await admin.create_topics(
            [
                NewTopic(config.topics.results, config.shards, 3, topic_configs=settings),
                NewTopic(config.topics.status_changes, config.shards, 3, topic_configs=settings),
            ]
        )
        # Leaders elected on every partition before the test produces.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = await admin.describe_topics(
                [config.topics.results, config.topics.status_changes]
            )
            parts_ok = [p for t in described for p in t["partitions"] if p["leader"] >= 0]
            if len(parts_ok) == 2 * config.shards:
                return
            await asyncio.sleep(0.2)
        raise AssertionError("topic partitions got no leaders")
    finally:
        await admin.close()


async def read_topic(
    bootstrap: str, topic: str, partitions: int, at_least: int = 0, within: float = 20.0
) -> list[Any]:
    """Every record of ``topic`` (group-less, from the beginning to the end), waiting until
    there are ``at_least``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + within
        while True:
            end = await consumer.end_offsets(tps)
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                batches = await consumer.getmany(timeout_ms=500)
                for batch in batches.values():
                    records.extend(batch)
            if len(records) >= at_least or time.monotonic() > deadline:
                return records
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


def info(name: str, probe: str = "http", labels: dict[str, str] | None = None) -> CheckInfo:
    return CheckInfo(name=name, probe_type=probe, labels=labels or {"team": "core"})


def result(
    check: CheckInfo,
    status: Status = Status.UP,
    *,
    started_at: float | None = None,
    replica: str = "",
    reason: str = "ok",
    observations: dict[str, float] | None = None,
) -> CheckResult:
    start = time.time() if started_at is None else started_at
    return CheckResult(
        check=check,
        status=status,
        reason=reason,
        duration_seconds=0.012,
        started_at=start,
        finished_at=start + 0.012,
        observations=observations or {"http_status": 200.0},
        replica=replica,
    )


def metric(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


@dataclass
class BatchHeader:
    """The fields of a Kafka record batch (format v2) the tests look at."""

    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int

    @property
    def compression(self) -> str:
        return {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}[self.attributes & 7]


def batch_headers(cluster: KafkaCluster, topic: str) -> list[BatchHeader]:
    """Record batches as the brokers stored them: every log segment of every partition of
    ``topic`` on every node (replicas included)."""
    headers: list[BatchHeader] = []
    for node in cluster.nodes:
        for segment in (node.directory / "data").glob(f"{topic}-*/*.log"):
            headers.extend(_read_segment(segment))
    return headers


def _read_segment(path: Path) -> Iterable[BatchHeader]:
    data = path.read_bytes()
    at = 0
    while at + 61 <= len(data):
        _base_offset, length = struct.unpack_from(">qi", data, at)
        if length <= 0:
            break
        # partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, lastOffsetDelta i32,
        # baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16,
        # baseSequence i32, records count i32
        (_epoch, magic, _crc, attributes, _delta, _t0, _t1, pid, pepoch, seq, count) = (
            struct.unpack_from(">ibIhiqqqhii", data, at + 12)
        )
        if magic == 2:
            headers = BatchHeader(attributes, pid, pepoch, seq, count)
            yield headers
        at += 12 + length


async def wait_for(predicate: Any, within: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(step)


def cluster_route(store: StatusStore, stream: ResultsStream) -> ResultPipeline:
    """The daemon's cluster-mode route (:func:`alivemcp.app.route.result_route`) without
    alerting and admission: the status store, whose changes of status the stream watches,
    then the stream."""
    return result_route(
        store=store, alerts=None, history=None, registry=CollectorRegistry(), stream=stream
    )


def pipeline_feed(route: ResultPipeline, results: Iterable[CheckResult]) -> None:
    """Results along ``route``, one at a time as the scheduler hands them over."""
    for item in results:
        route(item)


async def not_controller(cluster: KafkaCluster) -> int:
    """A node that is not the active controller (pausing the controller delays ISR changes by
    tens of seconds)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        controller = (await admin.describe_cluster())["controller_id"]
    finally:
        await admin.close()
    return next(n.node_id for n in cluster.nodes if n.node_id != controller)


async def wait_isr(bootstrap: str, topic: str, size: int, within: float = 60.0) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        deadline = time.monotonic() + within
        while True:
            try:
                described = await admin.describe_topics([topic])
                sizes = {len(p["isr"]) for p in described[0]["partitions"]}
                leaders = {p["leader"] for p in described[0]["partitions"]}
                if sizes == {size} and -1 not in leaders:
                    return
            except Exception:  # a paused broker may be asked: ask again
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"ISR of {topic} not {size} within {within}s")
            await asyncio.sleep(0.3)
    finally:
        await admin.close()
