"""The results stream against a real 3-broker Kafka: what a record looks like and where it
goes, how it is produced (idempotent, acks=all, compressed), status changes, the bounded
buffer, Kafka unreachable and back, and the flush when shards are revoked."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator

import pytest
import structlog

from alivemcp.cluster.shards import shard_of
from alivemcp.cluster.stream import ResultsStream, result_record
from alivemcp.engine.status import StatusStore
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import free_port, run_until
from tests.support.results_stream import (
    Parts,
    batch_headers,
    cluster_config,
    cluster_route,
    create_topics,
    info,
    metric,
    not_controller,
    parts,
    pipeline_feed,
    read_topic,
    result,
    wait_for,
    wait_isr,
)

RESULT_FIELDS = {
    "check",
    "probe",
    "labels",
    "status",
    "reason",
    "duration_seconds",
    "started_at",
    "finished_at",
    "observations",
    "replica",
    "location",
}


class Rig:
    """A stream and its store on fresh topics."""

    def __init__(self, parts: Parts, checks: int) -> None:
        self.parts = parts
        self.config = parts.config
        self.store = StatusStore(self.config.replica_id)
        self.infos = [info(f"svc-{i}/tools") for i in range(checks)]
        self.store.set_checks(self.infos)
        self.stream = ResultsStream(self.config, parts.kafka, parts.registry)
        self.route = cluster_route(self.store, self.stream)

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.parts.registry, name, labels)


@pytest.fixture
async def rig(kafka3: KafkaCluster, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    settings = getattr(request, "param", {})
    config = cluster_config(kafka3.bootstrap, **settings)
    await create_topics(kafka3.bootstrap, config)
    made = Rig(parts(config), 40)
    await made.stream.start()
    try:
        yield made
    finally:
        await made.stream.stop(5)
        await made.parts.aclose()


async def test_record_per_result_keyed_by_check_in_its_shards_partition(
    kafka3: KafkaCluster, rig: Rig
) -> None:
    results = [
        result(i, observations={"http_status": 200.0, "tools_count": float(n)})
        for n, i in enumerate(rig.infos)
    ]
    pipeline_feed(rig.route, results)
    assert await rig.stream.flush(None, 20) == 0
    records = await read_topic(kafka3.bootstrap, rig.config.topics.results, 6, len(results))
    assert len(records) == len(results)
    by_name = {r.key.decode(): r for r in records}
    assert set(by_name) == {i.name for i in rig.infos}
    assert len({r.partition for r in records}) > 1  # the checks spread over the shards
    for n, sent in enumerate(results):
        record = by_name[sent.check.name]
        assert record.partition == shard_of(sent.check.name, 6)
        assert record.timestamp == int(sent.finished_at * 1000)
        doc = json.loads(record.value)
        assert set(doc) == RESULT_FIELDS
        assert doc == {
            "check": sent.check.name,
            "probe": "http",
            "labels": {"team": "core"},
            "status": "up",
            "reason": "ok",
            "duration_seconds": 0.012,
            "started_at": sent.started_at,
            "finished_at": sent.finished_at,
            "observations": {"http_status": 200.0, "tools_count": float(n)},
            "replica": "replica-a",
            "location": "default",
        }
    assert rig.metric("alivemcp_cluster_produced_records_total", topic="results") == 40
    assert rig.metric("alivemcp_cluster_produce_lag_seconds_count") == 40


async def test_batches_on_the_brokers_are_idempotent_and_lz4(
    kafka3: KafkaCluster, rig: Rig
) -> None:
    pipeline_feed(rig.route, [result(i) for i in rig.infos])
    assert await rig.stream.flush(None, 20) == 0
    headers = batch_headers(kafka3, rig.config.topics.results)
    assert headers and sum(h.records for h in headers) == 3 * 40  # on all three replicas
    # An idempotent producer stamps every batch with its producer id and a sequence number;
    # a plain one writes -1.
    assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
    assert {h.compression for h in headers} == {"lz4"}


@pytest.mark.parametrize(
    "rig", [{"compression": "zstd"}, {"compression": "none"}], indirect=True, ids=["zstd", "none"]
)
async def test_compression_follows_the_config(kafka3: KafkaCluster, rig: Rig) -> None:
    pipeline_feed(rig.route, [result(i) for i in rig.infos])
    assert await rig.stream.flush(None, 20) == 0
    headers = batch_headers(kafka3, rig.config.topics.results)
    assert {h.compression for h in headers} == {rig.config.compression}


async def test_status_changes_go_to_the_status_changes_topic(
    kafka3: KafkaCluster, rig: Rig
) -> None:
    check = rig.infos[0]
    t0 = time.time()
    statuses = [Status.UP, Status.UP, Status.DOWN, Status.DOWN, Status.DEGRADED, Status.UP]
    runs = [result(check, s, started_at=t0 + n, reason=f"run {n}") for n, s in enumerate(statuses)]
    pipeline_feed(rig.route, runs)
    assert await rig.stream.flush(None, 20) == 0
    changes = await read_topic(kafka3.bootstrap, rig.config.topics.status_changes, 6, 3)
    docs = [json.loads(r.value) for r in sorted(changes, key=lambda r: r.offset)]
    # The first result has nothing to change from; the others change when the status does.
    assert [(d["from"], d["to"]) for d in docs] == [
        ("up", "down"),
        ("down", "degraded"),
        ("degraded", "up"),
    ]
    assert docs[0] == {
        "check": check.name,
        "probe": "http",
        "labels": {"team": "core"},
        "from": "up",
        "to": "down",
        "reason": "run 2",
        "at": runs[2].finished_at,
        "replica": "replica-a",
    }
    assert {r.key.decode() for r in changes} == {check.name}
    assert {r.partition for r in changes} == {shard_of(check.name, 6)}
    assert rig.metric("alivemcp_cluster_produced_records_total", topic="status_changes") == 3
    results = await read_topic(kafka3.bootstrap, rig.config.topics.results, 6, 6)
    assert len(results) == 6


async def test_acks_all_waits_for_the_in_sync_replicas(kafka3: KafkaCluster) -> None:
    """With min.insync.replicas 3 and one broker frozen, acks=all cannot be met: the record
    waits (acks=1 would have been written by the leader at once) and goes out when the broker
    is back."""
    config = cluster_config(kafka3.bootstrap, request_timeout=2.0)
    await create_topics(kafka3.bootstrap, config, min_insync=3)
    rig = Rig(parts(config), 4)
    await rig.stream.start()
    node = await not_controller(kafka3)
    try:
        with kafka3.paused(node):
            await wait_isr(kafka3.bootstrap, config.topics.results, 2)
            pipeline_feed(rig.route, [result(rig.infos[0])])
            assert await rig.stream.flush(None, 4) == 1
            assert rig.metric("alivemcp_cluster_produced_records_total", topic="results") == 0
            assert await read_topic(kafka3.bootstrap, config.topics.results, 6) == []
        assert await rig.stream.flush(None, 60) == 0
        records = await read_topic(kafka3.bootstrap, config.topics.results, 6, 1)
        assert [r.key.decode() for r in records] == [rig.infos[0].name]
    finally:
        await rig.stream.stop(5)
        await rig.parts.aclose()


async def test_revoke_returns_once_the_revoked_shards_results_are_acknowledged(
    kafka3: KafkaCluster, rig: Rig
) -> None:
    revoked = frozenset({shard_of(i.name, 6) for i in rig.infos[:5]})
    await rig.stream.on_assigned(frozenset(range(6)))
    # No turn for the event loop between consume and on_revoked: without the flush nothing
    # would have been sent yet.
    pipeline_feed(rig.route, [result(i) for i in rig.infos])
    await rig.stream.on_revoked(revoked)
    assert rig.stream.pending_for(revoked) == 0
    assert rig.stream.held == frozenset(range(6)) - revoked
    in_revoked = [i for i in rig.infos if shard_of(i.name, 6) in revoked]
    acked = rig.metric("alivemcp_cluster_produced_records_total", topic="results")
    assert acked >= len(in_revoked)


async def test_unreachable_kafka_never_blocks_and_the_buffer_drops_the_oldest() -> None:
    """Nothing listens on the port: consume stays instant, the buffer keeps the newest
    ``produce_buffer`` records, the drops are counted, one warning says why, and stop is
    bounded."""
    config = cluster_config(f"127.0.0.1:{free_port()}", buffer=100, request_timeout=1.0)
    rig = Rig(parts(config), 50)
    with structlog.testing.capture_logs() as logs:
        await rig.stream.start()
        started = time.monotonic()
        for _ in range(5):
            pipeline_feed(rig.route, [result(i) for i in rig.infos])
            # why: the feeds' pace: they come while the producer keeps failing to start
            await asyncio.sleep(0.5)
        assert time.monotonic() - started < 10  # a correctness bound, not a benchmark

        async def errors() -> float:
            return rig.metric("alivemcp_cluster_produce_errors_total")

        # The producer's start failed, and failed again when retried.
        await run_until(errors, lambda n: n >= 2, "produce errors", within=10, pause=0.05)
        assert rig.stream.pending() == 100
        assert (
            rig.metric("alivemcp_cluster_produce_dropped_records_total", reason="buffer_full")
            == 250 - 100
        )
        assert rig.metric("alivemcp_cluster_produce_buffered_records") == 100
        assert rig.metric("alivemcp_cluster_produce_kafka_reachable") == 0
        # A revocation while Kafka is known gone (a replica fencing itself) does not wait
        # out the flush for records that cannot go anywhere.
        revoking = time.monotonic()
        await rig.stream.on_revoked(frozenset(range(6)))
        assert time.monotonic() - revoking < rig.stream.flush_on_revoke / 2
        assert rig.stream.pending() == 100  # kept for when Kafka is back
        stopping = time.monotonic()
        await rig.stream.stop(2)
        assert time.monotonic() - stopping < 6
    await rig.parts.aclose()
    warnings = [e for e in logs if e["event"].startswith("Kafka unreachable")]
    assert len(warnings) == 1
    assert warnings[0]["buffer_limit"] == 100
    assert rig.metric("alivemcp_cluster_produce_dropped_records_total", reason="shutdown") == 100


async def test_kafka_down_then_back_one_line_each_nothing_lost_but_the_counted(
    kafka3: KafkaCluster,
) -> None:
    """All three brokers frozen: probing goes on (the event loop is never held up), results
    wait within the bound; when the brokers are back every result not counted as dropped is
    in the topic, the newest included."""
    config = cluster_config(kafka3.bootstrap, buffer=100, request_timeout=2.0)
    await create_topics(kafka3.bootstrap, config)
    rig = Rig(parts(config), 10)
    await rig.stream.start()
    sent: list[str] = []

    def feed() -> None:
        batch = [result(i, reason=f"run {len(sent) + n}") for n, i in enumerate(rig.infos)]
        sent.extend(r.reason for r in batch)
        pipeline_feed(rig.route, batch)

    late = 0.0

    async def ticker() -> None:
        nonlocal late
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.05)  # why: the subject: how late the loop wakes from it
            late = max(late, time.monotonic() - before - 0.05)

    try:
        feed()
        assert await rig.stream.flush(None, 20) == 0
        with structlog.testing.capture_logs() as logs:
            tick = asyncio.create_task(ticker())
            for node in kafka3.nodes:
                kafka3.pause(node.node_id)
            try:
                for _ in range(30):  # 3 s of results; the stall shows after 2 s
                    feed()
                    await asyncio.sleep(0.1)  # why: the results' pace, as probing makes them
                await wait_for(
                    lambda: rig.metric("alivemcp_cluster_produce_kafka_reachable") == 0,
                    10,
                    "the stream notices Kafka is gone",
                )
                for _ in range(5):
                    feed()
                    await asyncio.sleep(0.1)  # why: the results' pace, as probing makes them
                assert rig.stream.pending() <= 100 + len(rig.infos)  # buffer + in flight
            finally:
                for node in kafka3.nodes:
                    kafka3.resume(node.node_id)
            assert await rig.stream.flush(None, 60) == 0
            tick.cancel()
        # The loop kept running on time while Kafka was frozen: held up by a Kafka call, it
        # would wake a request timeout late.
        assert late < float(config.kafka.request_timeout) / 2
        dropped = rig.metric("alivemcp_cluster_produce_dropped_records_total", reason="buffer_full")
        assert dropped > 0
        records = await read_topic(
            kafka3.bootstrap, config.topics.results, 6, len(sent) - int(dropped)
        )
        reasons = [json.loads(r.value)["reason"] for r in records]
        assert len(reasons) == len(set(reasons)) == len(sent) - dropped
        assert sent[-1] in reasons and sent[0] in reasons
        events = [e["event"] for e in logs]
        assert sum(e.startswith("Kafka unreachable") for e in events) == 1
        assert sum(e.startswith("Kafka reachable again") for e in events) == 1
        back = next(e for e in logs if e["event"].startswith("Kafka reachable again"))
        # Counted from the warning on (the buffer of 100 was full before the stall showed).
        assert 0 < back["dropped"] <= dropped
        assert rig.metric("alivemcp_cluster_produce_kafka_reachable") == 1
    finally:
        await rig.stream.stop(5)
        await rig.parts.aclose()


def test_non_finite_numbers_are_left_out_of_the_json() -> None:
    check = info("svc/nan")
    value = result(check, observations={"ok": 1.0, "bad": math.nan, "worse": math.inf})
    doc = json.loads(result_record(value, "r1"))  # strict JSON: no NaN tokens
    assert doc["observations"] == {"ok": 1.0}
    assert doc["replica"] == "r1"
