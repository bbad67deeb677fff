"""The global view against a real 3-broker Kafka: other replicas' results in this replica's
status (with their owner), every result in history once (across a restart, from the saved
position), garbage in the topic dropped and counted, a bounded replay on first start, and a gained
shard read to its end (bounded) before its checks are scheduled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry

from alivemcp.cluster.config import ClusterConfig
from alivemcp.cluster.probing import ProbingListener
from alivemcp.cluster.shards import ShardMap, shard_of
from alivemcp.cluster.stream import ResultsStream, result_record
from alivemcp.cluster.view import POSITION_FILE, ResultsView
from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.plumbing import Plumbing
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import DaemonProcess, write_daemon_config
from tests.support.cluster import cluster_section, first_runs_planned, unique_prefix
from tests.support.results_stream import (
    Parts,
    cluster_config,
    cluster_route,
    create_topics,
    info,
    metric,
    parts,
    pipeline_feed,
    result,
    unique,
    wait_for,
)

INFOS = [info(f"mcp/server-{i}") for i in range(24)]


class Replica:
    """What a replica has for the view and the stream: a status store, maybe history, its
    stream (producing its own results) and its view."""

    def __init__(
        self,
        config: ClusterConfig,
        data_dir: Path,
        *,
        history: bool = True,
        replay: float | None = None,
        infos: list[CheckInfo] = INFOS,
    ) -> None:
        self.config = config
        self.parts: Parts = parts(config)
        self.store = StatusStore(config.replica_id)
        self.store.set_checks(infos)
        self.history = HistoryStore(data_dir, HistoryConfig()) if history else None
        if self.history is not None:
            self.history.set_checks(infos)
            self.history.start()
        self.stream = ResultsStream(config, self.parts.kafka, self.parts.registry)
        self.route = cluster_route(self.store, self.stream)
        self.view = ResultsView(
            config,
            self.parts.kafka,
            self.store,
            self.history,
            data_dir,
            self.parts.registry,
            replay=replay,
            save_every=0.5,
        )

    @property
    def registry(self) -> CollectorRegistry:
        return self.parts.registry

    async def start(self) -> None:
        await self.view.start()
        await self.stream.start()

    async def stop(self) -> None:
        await self.stream.stop(5)
        await self.view.stop(5)
        if self.history is not None:
            await self.history.stop()
        await self.parts.aclose()

    def run(self, check: CheckInfo, status: Status = Status.UP, **kw: Any) -> None:
        """A run of this replica, through the cluster pipeline (stream, then store)."""
        pipeline_feed(self.route, [result(check, status, **kw)])

    def row(self, name: str) -> dict[str, Any]:
        doc = self.store.snapshot(only=[name])
        assert doc["replica"] == self.config.replica_id
        row: dict[str, Any] = doc["checks"][0]
        return row

    async def runs(self, name: str) -> dict[str, int]:
        assert self.history is not None
        doc = await self.history.uptime(name, "24h")
        runs: dict[str, int] = doc["runs"]
        return runs

    def taken(self, outcome: str) -> float:
        return metric(self.registry, "alivemcp_cluster_view_records_total", {"outcome": outcome})

    def dropped(self, reason: str) -> float:
        return metric(
            self.registry, "alivemcp_cluster_view_dropped_records_total", {"reason": reason}
        )


@pytest.fixture
async def topics(kafka3: KafkaCluster) -> str:
    prefix = unique("view")
    await create_topics(kafka3.bootstrap, cluster_config(kafka3.bootstrap, prefix=prefix))
    return prefix


def config_for(kafka3: KafkaCluster, prefix: str, replica: str) -> ClusterConfig:
    return cluster_config(kafka3.bootstrap, prefix=prefix, replica=replica)


@pytest.fixture
async def pair(
    kafka3: KafkaCluster, topics: str, tmp_path: Path
) -> AsyncIterator[tuple[Replica, Replica]]:
    a = Replica(config_for(kafka3, topics, "replica-a"), tmp_path / "a")
    b = Replica(config_for(kafka3, topics, "replica-b"), tmp_path / "b")
    for replica in (a, b):
        await replica.start()
    try:
        yield a, b
    finally:
        for replica in (a, b):
            await replica.stop()


async def test_another_replicas_result_shows_in_status_with_its_owner(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    check = INFOS[3]
    b.run(check, Status.DOWN, reason="connection refused")
    await wait_for(lambda: a.row(check.name)["status"] == "down", 20, "b's result in a's view")
    row = a.row(check.name)
    assert row["owner"] == "replica-b"
    assert row["reason"] == "connection refused"
    assert row["labels"] == {"team": "core"}
    # a's own runs show as its own, and their echo from the topic is not counted again.
    a.run(INFOS[4], Status.UP)
    await wait_for(lambda: a.taken("own") == 1, 20, "a reads its own result back")
    assert a.row(INFOS[4].name)["owner"] == "replica-a"
    assert a.store.get(INFOS[4].name).runs == (1, 0, 0, 0)  # type: ignore[union-attr]
    await wait_for(lambda: b.row(INFOS[4].name)["owner"] == "replica-a", 20, "a's in b's view")
    assert a.taken("status") == 1 and b.taken("status") == 1


async def test_an_older_result_from_another_replica_does_not_replace_a_newer_one(
    pair: tuple[Replica, Replica],
) -> None:
    """Across a handover the old owner's last result can arrive after the new owner's."""
    a, b = pair
    check = INFOS[5]
    now = time.time()
    a.run(check, Status.UP, started_at=now)
    b.run(check, Status.DOWN, started_at=now - 30)
    await wait_for(lambda: a.taken("status") == 1, 20, "b's late result read")
    assert a.row(check.name)["status"] == "up"
    assert a.row(check.name)["owner"] == "replica-a"


async def test_history_has_every_result_once_across_a_restart(
    kafka3: KafkaCluster, topics: str, tmp_path: Path
) -> None:
    config_a, config_b = (config_for(kafka3, topics, r) for r in ("replica-a", "replica-b"))
    a = Replica(config_a, tmp_path / "a")
    b = Replica(config_b, tmp_path / "b", history=False)
    await a.start()
    await b.start()
    mine, theirs = INFOS[0], INFOS[1]
    try:
        t0 = time.time() - 60
        for n in range(3):
            a.run(mine, Status.UP, started_at=t0 + n)
            b.run(theirs, Status.DOWN, started_at=t0 + n)
        await wait_for(lambda: a.taken("own") + a.taken("status") == 6, 20, "6 results read")
        assert await a.runs(mine.name) == {"up": 3, "degraded": 0, "down": 0, "unknown": 0}
        assert (await a.runs(theirs.name))["down"] == 3
        await a.stop()
        saved = json.loads((tmp_path / "a" / POSITION_FILE).read_text())
        assert sum(saved["offsets"]) == 6

        # While a is away, b goes on; then a new process of a starts on the same data_dir.
        b.run(theirs, Status.UP, started_at=t0 + 10)
        assert await b.stream.flush(None, 20) == 0  # on the brokers before a starts
        a = Replica(config_a, tmp_path / "a")
        await a.start()
        assert a.view.caught_up.is_set()
        # The replay refilled the status of every check, its own earlier runs included...
        assert a.row(mine.name)["status"] == "up" and a.row(mine.name)["owner"] == "replica-a"
        assert a.row(theirs.name)["status"] == "up" and a.row(theirs.name)["owner"] == "replica-b"
        # ...and history got only what the earlier process had not read. (Caught up: every
        # record to the end went to history; a history query first waits for its writes.)
        assert await a.runs(mine.name) == {"up": 3, "degraded": 0, "down": 0, "unknown": 0}
        assert await a.runs(theirs.name) == {"up": 1, "degraded": 0, "down": 3, "unknown": 0}
        a.run(mine, Status.DEGRADED)  # a run of the new process: after its view started
        await wait_for(lambda: a.taken("own") == 1, 20, "the new process's own result read")
        assert (await a.runs(mine.name))["degraded"] == 1
    finally:
        await a.stop()
        await b.stop()


async def test_garbage_in_the_topic_is_dropped_and_counted(
    kafka3: KafkaCluster, topics: str, tmp_path: Path
) -> None:
    config = config_for(kafka3, topics, "replica-a")
    a = Replica(config, tmp_path / "a")
    await a.start()
    check = INFOS[7]
    good = json.loads(result_record(result(check, Status.DEGRADED, reason="slow"), "replica-x"))

    def variant(**change: Any) -> bytes:
        return json.dumps({**good, **change}).encode()

    garbage: list[bytes | None] = [
        b"\xff\xfe not json",
        b"[1, 2, 3]",
        b"null",
        b"[" * 100_000 + b"]" * 100_000,  # nesting deeper than the parser's recursion
        json.dumps({"check": 5}).encode(),
        variant(status="exploded"),
        variant(status=None),
        variant(started_at="yesterday"),
        variant(duration_seconds=True),
        variant(started_at=10**400),  # an int no float can hold
        variant(finished_at=-1e400),  # -inf once parsed
        variant(replica=""),
        variant(replica=["r"]),
        variant(reason={"nested": 1}),
        variant(observations={"Bad Name": 1.0}),
        variant(observations={f"o{i}": 1.0 for i in range(1000)}),
        variant(observations={"fine": "NaN"}),
        variant(labeled_observations=[{"name": "x", "value": 1, "labels": {"k": 2}}]),
        good_json_with_nan(good),
        None,  # a tombstone
    ]
    unknown = variant(check="not/configured")
    elsewhere = variant()
    # acks=all: the high watermark (what a reader sees as the end) covers the record at once.
    producer = AIOKafkaProducer(bootstrap_servers=kafka3.bootstrap, acks="all")
    await producer.start()
    try:
        shard = shard_of(check.name, config.shards)
        for value in garbage:
            await producer.send_and_wait(config.topics.results, value, key=b"x", partition=shard)
        await producer.send_and_wait(config.topics.results, unknown, partition=0)
        await producer.send_and_wait(
            config.topics.results, elsewhere, partition=(shard + 1) % config.shards
        )
        await producer.send_and_wait(
            config.topics.results, json.dumps(good).encode(), partition=shard
        )
        await wait_for(lambda: a.taken("status") == 1, 20, "the one good record taken")
        assert a.dropped("invalid") == len(garbage)
        assert a.dropped("unknown_check") == 1
        assert a.dropped("wrong_partition") == 1
        assert a.dropped("error") == 0
        row = a.row(check.name)
        assert (row["status"], row["owner"], row["reason"]) == ("degraded", "replica-x", "slow")
        # Labels and probe type come from this replica's config, not from the record.
        assert row["labels"] == {"team": "core"} and row["probe"] == "http"
        assert a.store.get("not/configured") is None
        assert (await a.runs(check.name))["degraded"] == 1
        assert a.view._task is not None and not a.view._task.done()  # still reading
    finally:
        await producer.stop()
        await a.stop()


def good_json_with_nan(good: dict[str, Any]) -> bytes:
    """Python's parser accepts the NaN token; the view must not."""
    return json.dumps({**good, "duration_seconds": float("nan")}).encode()


async def test_first_start_replays_only_the_window(
    kafka3: KafkaCluster, topics: str, tmp_path: Path
) -> None:
    config = config_for(kafka3, topics, "replica-a")
    old, recent = INFOS[8], INFOS[9]
    now = time.time()
    # acks=all: the high watermark (what a reader sees as the end) covers the record at once.
    producer = AIOKafkaProducer(bootstrap_servers=kafka3.bootstrap, acks="all")
    await producer.start()
    try:
        for check, at in ((old, now - 7200), (recent, now - 60)):
            value = result_record(result(check, Status.DOWN, started_at=at), "replica-b")
            await producer.send_and_wait(
                config.topics.results,
                value,
                key=check.name.encode(),
                partition=shard_of(check.name, config.shards),
                timestamp_ms=int(at * 1000),
            )
    finally:
        await producer.stop()
    a = Replica(config, tmp_path / "a", replay=3600)
    await a.start()
    try:
        assert a.view.caught_up.is_set()
        assert a.row(recent.name)["status"] == "down"
        assert a.row(old.name)["status"] == "pending"  # before the window: not read
        assert (await a.runs(recent.name))["down"] == 1
        assert (await a.runs(old.name))["down"] == 0
        assert a.taken("status") == 1
    finally:
        await a.stop()


def test_two_daemons_serve_every_check_with_its_owner_and_history(
    kafka3: KafkaCluster, tmp_path: Path
) -> None:
    """Two real replicas: each one's /status has every check with the replica that probed it,
    and each one's history counts the other's runs (fed by its view)."""
    prefix = unique_prefix("view-daemons")
    names = [f"svc-{i:02d}" for i in range(24)]
    status_of = {name: ("down" if i % 2 else "up") for i, name in enumerate(names)}
    daemons = {}
    checks = [
        {
            "name": n,
            "probe": "test_static",
            "interval": 1.0,
            "params": {"status": status_of[n], "reason": f"{status_of[n]} by design"},
        }
        for n in names
    ]
    for replica in ("view-a", "view-b"):
        (tmp_path / replica).mkdir()
        path = write_daemon_config(  # history is on by default
            tmp_path / replica / "alivemcp.yaml",
            checks,
            cluster=cluster_section(kafka3.bootstrap, prefix, replica=replica, shards=6),
        )
        daemons[replica] = DaemonProcess(path, start_timeout=120)

    def rows(replica: str) -> dict[str, dict[str, Any]]:
        doc = daemons[replica].get_json("/status")
        assert doc["replica"] == replica
        return {row["check"]: row for row in doc["checks"]}

    def agreed() -> dict[str, str] | None:
        a, b = rows("view-a"), rows("view-b")
        owners = {n: a[n]["owner"] for n in names}
        if any(a[n]["status"] != status_of[n] or b[n]["status"] != status_of[n] for n in names):
            return None
        if owners != {n: b[n]["owner"] for n in names} or set(owners.values()) != set(daemons):
            return None
        return owners

    try:
        for daemon in daemons.values():
            daemon.start()
        owners = daemons["view-a"].wait_for(
            agreed, 90, "both replicas show every check, each probed by one of them"
        )
        for name in names:
            assert owners[name] == daemons[owners[name]].get_json("/status")["replica"]
        for theirs in (n for n in names if owners[n] == "view-b"):
            row = rows("view-a")[theirs]
            expected = status_of[theirs]
            assert (row["status"], row["reason"]) == (expected, f"{expected} by design")

            def runs_at_a(name: str = theirs, expected: str = expected) -> dict[str, int] | None:
                status, body = daemons["view-a"].get(f"/api/v1/checks/{name}/uptime?window=24h")
                runs: dict[str, int] = json.loads(body)["runs"] if status == 200 else {}
                return runs if runs.get(expected, 0) >= 2 else None

            runs = daemons["view-a"].wait_for(runs_at_a, 30, f"b's runs of {theirs} in a's history")
            assert sum(runs.values()) == runs[expected]  # nothing else counted for it
    finally:
        for daemon in daemons.values():
            daemon.stop()


# -- handover: the previous owner's last runs read before a gained shard's checks are scheduled


@contextlib.asynccontextmanager
async def probing_on(replica: Replica, view_wait: float | None) -> AsyncIterator[ProbingListener]:
    """``replica``'s probing of the INFOS checks (60 s interval, a static probe) on a running
    scheduler, its ``last_run`` from its status store, its view read before probing
    (``view_wait``: read_to_end's bound, None: the view's default)."""
    checks = [{"name": i.name, "probe": "test_static", "interval": 60} for i in INFOS]
    loaded = load_config_text(yaml.safe_dump({"checks": checks}))
    scheduler = Scheduler(
        lambda name: None,
        SchedulerMetrics(CollectorRegistry()),
        lambda result: None,
        loaded.config.scheduler,
    )
    plumbing = Plumbing()

    def last_run(name: str) -> float | None:
        state = replica.store.get(name)
        return state.last.started_at if state is not None and state.last is not None else None

    probing = ProbingListener(
        scheduler,
        ShardMap(replica.config.shards),
        lambda: loaded.checks,
        lambda c: build_handle(c, plumbing),
        lambda handles: None,
        last_run=last_run,
        before_probing=lambda shards: replica.view.read_to_end(shards, view_wait),
    )
    scheduler.start()
    try:
        yield probing
    finally:
        await scheduler.stop(1)
        await plumbing.aclose()


@contextlib.contextmanager
def view_paused(replica: Replica, shard: int) -> Iterator[TopicPartition]:
    """The replica's view reads nothing of ``shard`` until resumed (or the block ends): a view
    behind, as on a loaded machine."""
    consumer = replica.view._consumer
    assert consumer is not None
    tp = TopicPartition(replica.view.topic, shard)
    consumer.pause(tp)
    try:
        yield tp
    finally:
        consumer.resume(tp)


async def previous_owner_ran(owner: Replica, shard: int, at: float) -> list[str]:
    """``owner`` ran every check of ``shard`` at ``at`` and gave the shard up: its results are
    flushed (acknowledged), as its ``on_revoked`` does."""
    names = [i.name for i in INFOS if shard_of(i.name, owner.config.shards) == shard]
    assert names
    for check in INFOS:
        if check.name in names:
            owner.run(check, Status.UP, started_at=at)
    assert await owner.stream.flush([shard], 20) == 0
    return names


def handover_reads(replica: Replica, outcome: str) -> float:
    return metric(
        replica.registry, "alivemcp_cluster_view_handover_reads_total", {"outcome": outcome}
    )


async def test_a_gained_shards_checks_just_run_elsewhere_wait_though_the_view_was_behind(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair  # b gives a shard up; a gains it
    shard = shard_of(INFOS[0].name, a.config.shards)
    assert a.view.handover_wait == min(2.0, a.config.session_timeout / 5)
    async with probing_on(a, None) as probing:
        with view_paused(a, shard) as tp:
            ran_at = time.time() - 0.5
            names = await previous_owner_ran(b, shard, ran_at)
            # a's view has not read them when the shard is assigned; it goes on 0.3 s later.
            assert all(a.store.get(n).last is None for n in names)  # type: ignore[union-attr]
            resume = asyncio.get_running_loop().call_later(0.3, a.view._consumer.resume, tp)  # type: ignore[union-attr]
            assigned_at = time.monotonic()
            await probing.on_assigned(frozenset({shard}))
            took = time.monotonic() - assigned_at
            resume.cancel()
        assert handover_reads(a, "read") == 1 and handover_reads(a, "timeout") == 0
        assert 0.25 < took < a.view.handover_wait, took
        assert all(a.row(n)["owner"] == "replica-b" for n in names)
        await first_runs_planned(probing._scheduler)
        for name in names:  # no early run: each waits for its grid point after that run
            entry = probing._scheduler.checks[name]
            assert entry.first_run is None, name
            assert entry.due == entry.next_after(ran_at), name
    print(f"\nhandover with the view 0.3 s behind: on_assigned took {took:.3f}s")


async def test_a_view_that_cannot_catch_up_does_not_stall_an_assignment(
    kafka3: KafkaCluster, topics: str, pair: tuple[Replica, Replica], tmp_path: Path
) -> None:
    a, b = pair
    shard = shard_of(INFOS[1].name, a.config.shards)
    async with probing_on(a, 0.5) as probing:
        with view_paused(a, shard):
            names = await previous_owner_ran(b, shard, time.time() - 0.5)
            assigned_at = time.monotonic()
            await probing.on_assigned(frozenset({shard}))
            took = time.monotonic() - assigned_at
        assert handover_reads(a, "timeout") == 1 and handover_reads(a, "read") == 0
        assert 0.5 <= took < 1.5, took
        # Scheduled on what the view knew (nothing): as before the wait, one run soon.
        await first_runs_planned(probing._scheduler)
        now = time.time()
        for name in names:
            assert probing._scheduler.checks[name].due <= now + 3, name
    # A view not reading (Kafka unreachable, or still replaying at start) is not waited for.
    idle = ResultsView(
        config_for(kafka3, topics, "replica-c"),
        a.parts.kafka,
        StatusStore("replica-c"),
        None,
        tmp_path / "c",
        CollectorRegistry(),
    )
    started = time.monotonic()
    assert not await idle.read_to_end({shard})
    assert time.monotonic() - started < 0.1
