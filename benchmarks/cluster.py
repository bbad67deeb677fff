"""Cluster-mode benchmark (issue #15): shard balance, the results stream's cost per result, the
view's cost per record, handover after kill -9, and the throughput of 3 replicas.

Run by hand (not a test), one part at a time or all:

  .venv/bin/python benchmarks/cluster.py balance
  .venv/bin/python benchmarks/cluster.py produce      [--results 200000] [--rate 1000]
  .venv/bin/python benchmarks/cluster.py handover     [--checks 300] [--session-timeout 10]
  .venv/bin/python benchmarks/cluster.py throughput   [--levels 3000,30000] [--seconds 60]
  .venv/bin/python benchmarks/cluster.py locations    [--checks 100000] [--rounds 3]

balance: 1,000,000 check names hashed to 60 shards with the node's own ``shard_of`` (Kafka's
murmur2 partitioning), and the 60 shards assigned to 20 members by the group's assignor (the
class the node configures; aiokafka's, called exactly as the group leader calls it). Computed,
nothing runs.

produce: a 3-broker KRaft cluster on this machine, a 60-partition results topic (RF 3,
min.insync.replicas 2). CPU of this process per result (``time.process_time``: every thread)
for (a) serialising alone, (b) ``ResultsStream.consume`` plus producing until acknowledged
(acks=all, idempotent, lz4), at full speed and at a steady ``--rate``; the brokers' CPU per
result (from /proc); then (c) ``ResultsView`` reading them all back into a status store, with
and without history: the per-record cost every replica pays for every check in the cluster.

handover: 3 daemon replicas (real processes), ``--checks`` test_noop checks at a 1 s interval;
kill -9 of one replica; from the results topic, per check of the killed replica the gap
between its last result there and the first result by the new owner, against the session
timeout. Needs the daemon's cluster wiring (alivemcp/cluster/node.py).

throughput: 3 daemon replicas (history off), test_noop checks at ``--interval`` (10 s), once
per load in ``--levels``: results per second on the topic and CPU per replica over
``--seconds``. Two loads give a replica's fixed CPU and its CPU per own result; the projection
to 1,000,000 checks at 60 s adds the view's cost per record (the produce part's figure, which
every replica pays for every result of the cluster) and, for real MCP probes, a probe's CPU.

locations (issue #37): the 3-broker cluster of produce; ``--checks`` checks probed from three
locations (eu-west, us-east, ap-south), each location's results written by a real
``ResultsStream`` of that location, ``--rounds`` rounds of every check in every location (one an
interval of 60 s, in record time). Most checks are up everywhere; 2 % are down from one location
(degraded), 0.2 % down everywhere, 1 % go down everywhere in odd rounds and back up in even ones
(an incident, location by location). One ``ResultsView`` of a replica that wrote none of them
(eu-west-2) reads them all back, once as today's view (``votes=None``: every record into the
status store, the pre-locations path) and once wired to the quorum stage (a real ``Verdicts``:
board, status store, history off, no alerting; the replica decides a third of the shards). CPU
of this process per record (``time.process_time``, every thread: fetch, decompression, decode,
vote, verdict, status store), for the first round (the board and store fill) and the rounds
after (the steady state), and the projection: the fraction of a core each replica spends on its
view at 3 locations x 100,000 checks at 60 s (5,000 records/s). Each read is made ``--repeat``
times, the two views taking turns, and the one that took the least CPU counts (other tenants of
the machine only ever add to a run's CPU time); the steady state is the difference between
reading every round and reading the first. The records are read minutes after they were
written, so the board's freshness window is widened (``--freshness`` intervals): every vote
counts, as in a steady state where a record is read within a second of being written. Then
the memory kept by the status store (today) and by the status store and the quorum board
(locations) after the first round (every check with a vote from each location), with
``tracemalloc``, and the process's RSS. Status-change log lines are filtered out (structlog at
warning): the terminal is not what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from alivemcp.cluster._kafka import ClusterKafka  # noqa: E402
from alivemcp.cluster.config import ClusterConfig  # noqa: E402
from alivemcp.cluster.quorum import QuorumBoard  # noqa: E402
from alivemcp.cluster.shards import ShardMap, shard_of  # noqa: E402
from alivemcp.cluster.stream import ResultsStream, result_record  # noqa: E402
from alivemcp.cluster.verdicts import Verdicts  # noqa: E402
from alivemcp.cluster.view import DROP_REASONS, ResultsView  # noqa: E402
from alivemcp.engine.results import CheckInfo, CheckResult  # noqa: E402
from alivemcp.engine.status import StatusStore  # noqa: E402
from alivemcp.history.config import HistoryConfig  # noqa: E402
from alivemcp.history.store import HistoryStore  # noqa: E402
from alivemcp.plumbing import Plumbing  # noqa: E402
from alivemcp.probe import Status  # noqa: E402
from alivemcp.testbed.kafka import KafkaCluster  # noqa: E402

TARGET_CHECKS = 1_000_000
TARGET_INTERVAL = 60.0


def check_names(count: int) -> list[str]:
    """Names shaped like a large fleet's: registry host / server slug / transport."""
    transports = ("mcp", "sse", "tools")
    return [f"registry-{i % 97}.example/{i:07d}-server/{transports[i % 3]}" for i in range(count)]


# -- balance -----------------------------------------------------------------------------------


class _Topics:
    """The one piece of cluster metadata an assignor reads."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.partitions)) if topic == self.topic else None

    def topics(self) -> set[str]:
        return {self.topic}


def node_assignors() -> list[Any]:
    """The assignor the node configures (its sticky assignor), then aiokafka's others."""
    found: list[Any] = []
    try:
        from alivemcp.cluster import node

        make = getattr(node, "_sticky_assignor", None)
        if make is not None:
            found.append(make())
    except ImportError:
        pass
    return [*found, RoundRobinPartitionAssignor, RangePartitionAssignor]


def _shards_of(assignment: Any) -> list[int]:
    return [p for _t, ps in assignment.assignment for p in ps]


def balance(args: argparse.Namespace) -> None:
    started = time.process_time()
    names = check_names(args.checks)
    per_shard = Counter(shard_of(n, args.shards) for n in names)
    hashing = time.process_time() - started
    counts = [per_shard.get(s, 0) for s in range(args.shards)]
    mean = args.checks / args.shards
    print(
        f"balance: {args.checks:,} checks over {args.shards} shards "
        f"(shard_of: {hashing / args.checks * 1e6:.2f} us a name)"
    )
    print(
        f"  checks per shard: min {min(counts):,}  max {max(counts):,}  mean {mean:,.0f}  "
        f"stdev {statistics.pstdev(counts):,.1f}  max/mean {max(counts) / mean:.4f}"
    )
    topics = _Topics("results", args.shards)
    names_of = [f"replica-{i:02d}" for i in range(args.replicas)]
    per_replica = args.checks / args.replicas
    for assignor in node_assignors():
        members = {
            m: assignor.metadata(["results"])
            if hasattr(assignor, "member_assignment")
            else ConsumerProtocolMemberMetadata(0, ["results"], b"")
            for m in names_of
        }
        assignment = assignor.assign(topics, members)
        shards_of = {m: _shards_of(assignment[m]) for m in names_of}
        loads = [sum(counts[s] for s in shards) for shards in shards_of.values()]
        sizes = [len(shards) for shards in shards_of.values()]
        label = getattr(assignor, "name", assignor.__name__)
        print(
            f"  {label} assignor, {args.replicas} replicas: {min(sizes)}-{max(sizes)} shards "
            f"each; checks per replica min {min(loads):,} max {max(loads):,} "
            f"(max/mean {max(loads) / per_replica:.4f})"
        )
        if args.replicas < 2:
            continue
        # One replica gone (kill -9, after the session timeout): the survivors rejoin,
        # each saying what it held (the sticky assignor's user data).
        survivors = names_of[1:]
        if hasattr(assignor, "_metadata"):
            from aiokafka.structs import TopicPartition

            again = {
                m: assignor._metadata(
                    ["results"], [TopicPartition("results", p) for p in shards_of[m]], 1
                )
                for m in survivors
            }
        else:
            again = {m: ConsumerProtocolMemberMetadata(0, ["results"], b"") for m in survivors}
        after = assignor.assign(topics, again)
        moved = sum(1 for m in survivors for p in _shards_of(after[m]) if p not in shards_of[m])
        loads = [sum(counts[p] for p in _shards_of(after[m])) for m in survivors]
        print(
            f"    one replica gone: {moved} shards change owner "
            f"({len(shards_of[names_of[0]])} were the lost replica's); checks per replica "
            f"max {max(loads):,} (max/mean {max(loads) / (args.checks / len(survivors)):.4f})"
        )


# -- produce and view ------------------------------------------------------------------------


def _cpu_of(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) of processes, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


async def _topics(bootstrap: str, config: ClusterConfig) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    await admin.start()
    try:
        settings = {"min.insync.replicas": "2"}
        await admin.create_topics(
            [
                NewTopic(config.topics.results, config.shards, 3, topic_configs=settings),
                NewTopic(config.topics.status_changes, config.shards, 3, topic_configs=settings),
            ]
        )
        while True:
            described = await admin.describe_topics(
                [config.topics.results, config.topics.status_changes]
            )
            if all(p["leader"] >= 0 for t in described for p in t["partitions"]):
                return
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


def _results(infos: Sequence[CheckInfo], count: int, start: float) -> list[CheckResult]:
    """Runs of the checks in turn; one in 50 changes status (an incident somewhere)."""
    out = []
    for i in range(count):
        check = infos[i % len(infos)]
        status = Status.DOWN if (i // len(infos)) % 50 == 1 and i % 7 == 0 else Status.UP
        t = start + i * 0.001
        out.append(
            CheckResult(
                check=check,
                status=status,
                reason="HTTP 200, 12 tools" if status is Status.UP else "connection refused",
                duration_seconds=0.0123,
                started_at=t,
                finished_at=t + 0.0123,
                observations={
                    "http_status": 200.0,
                    "tools_count": 12.0,
                    "response_seconds": 0.0123,
                },
            )
        )
    return out


async def _feed(
    stream: ResultsStream, store: StatusStore, results: Sequence[CheckResult], rate: float | None
) -> None:
    chunk = 500
    t0 = time.monotonic()
    for at in range(0, len(results), chunk):
        for result in results[at : at + chunk]:
            store.consume(result)  # the stream watches it for changes of status
            stream.consume(result)
        if rate:
            wait = t0 + (at + chunk) / rate - time.monotonic()
            await asyncio.sleep(max(0.0, wait))
        else:
            await asyncio.sleep(0)
    left = await stream.flush(None, 300)
    assert left == 0, f"{left} results never acknowledged"


def _config(bootstrap: str, replica: str, compression: str, **more: Any) -> ClusterConfig:
    return ClusterConfig.model_validate(
        {
            **more,
            "kafka": {"bootstrap_servers": bootstrap},
            "shards": 60,
            "replica_id": replica,
            "compression": compression,
            "produce_buffer": 10_000_000,
            "topics": {
                "results": "bench-results",
                "status_changes": "bench-changes",
                "alert_state": "bench-alerts",
            },
        }
    )


async def produce(args: argparse.Namespace) -> None:
    cluster = await KafkaCluster(size=3, heap="512m").start()
    brokers = [n.process.pid for n in cluster.nodes if n.process is not None]
    try:
        config = _config(cluster.bootstrap, "bench-a", args.compression)
        await _topics(cluster.bootstrap, config)
        infos = [
            CheckInfo(n, "mcp", {"team": f"t{i % 20}", "env": "prod"})
            for i, n in enumerate(check_names(args.checks))
        ]
        results = _results(infos, args.results, time.time() - 3600)
        print(
            f"produce: {args.results:,} results of {args.checks:,} checks, 60 partitions, "
            f"RF 3, min.insync.replicas 2, acks=all, idempotent, {args.compression}"
        )

        c0 = time.process_time()
        sizes = [len(result_record(r, "bench-a")) for r in results]
        serialise = (time.process_time() - c0) / len(results)
        print(
            f"  serialise alone: {serialise * 1e6:.1f} us CPU a result "
            f"(JSON value {statistics.mean(sizes):.0f} bytes)"
        )

        plumbing = Plumbing()
        kafka = ClusterKafka(config.kafka, plumbing)
        store = StatusStore("bench-a")
        store.set_checks(infos)
        stream = ResultsStream(config, kafka, CollectorRegistry())
        store.watch(stream.status_changed)
        await stream.start()
        await _feed(stream, store, results[:2000], None)  # producer started, metadata known

        b0 = _cpu_of(brokers)
        await asyncio.sleep(args.idle_seconds)
        idle_rate = (_cpu_of(brokers) - b0) / args.idle_seconds
        print(
            f"  brokers idle: {idle_rate * 100:.1f}% of a core (3 brokers together); "
            "subtracted below"
        )
        for label, rate, part in (
            ("full speed", None, results),
            (f"steady {args.rate:g}/s", args.rate, results[: int(args.rate * args.steady_seconds)]),
        ):
            c0, b0, w0 = time.process_time(), _cpu_of(brokers), time.monotonic()
            await _feed(stream, store, part, rate)
            wall = time.monotonic() - w0
            cpu = time.process_time() - c0
            broker_cpu = _cpu_of(brokers) - b0 - idle_rate * wall
            print(
                f"  consume + produce until acked, {label}: {cpu / len(part) * 1e6:.1f} us "
                f"CPU a result in this process; brokers {broker_cpu / len(part) * 1e6:.1f} "
                f"us a result (3 brokers, replication included); {len(part) / wall:,.0f} "
                f"results/s over {wall:.1f} s"
            )
        await stream.stop(10)
        await kafka.aclose()

        total = args.results + 2000 + int(args.rate * args.steady_seconds)
        for with_history in (False, True):
            view_config = _config(cluster.bootstrap, "bench-b", args.compression)
            reader_store = StatusStore("bench-b")
            reader_store.set_checks(infos)
            with tempfile.TemporaryDirectory() as tmp:
                history = HistoryStore(tmp, HistoryConfig()) if with_history else None
                if history is not None:
                    history.set_checks(infos)
                    history.start()
                view_kafka = ClusterKafka(view_config.kafka, plumbing)
                view = ResultsView(
                    view_config,
                    view_kafka,
                    reader_store,
                    history,
                    Path(tmp),
                    CollectorRegistry(),
                    replay=7200,
                    start_wait=600,
                )
                c0, w0 = time.process_time(), time.monotonic()
                await view.start()
                if history is not None:
                    await history.flush(120)
                cpu, wall = time.process_time() - c0, time.monotonic() - w0
                assert view.caught_up.is_set()
                await view.stop(10)
                if history is not None:
                    await history.stop()
                await view_kafka.aclose()
            print(
                f"  view reads {total:,} records into the status store"
                f"{' and history' if with_history else ''}: {cpu / total * 1e6:.1f} us CPU "
                f"a record; {total / wall:,.0f} records/s"
            )
        await plumbing.aclose()
    finally:
        cluster.stop()


# -- locations ---------------------------------------------------------------------------------

LOCATIONS = ("eu-west", "us-east", "ap-south")
#: Seconds between two runs of a check in one location (in record time).
LOCATION_INTERVAL = 60.0
#: The projection: every replica's view reads every location's results of these checks.
LOCATION_GOAL_CHECKS = 100_000
LOCATION_GOAL_SHARE = 0.10
#: today's view (every record into the status store) and the view wired to the quorum stage.
LOCATION_MODES = (("today", False), ("locations", True))


def _location_status(i: int, location: int, round_: int) -> Status:
    if i % 500 == 3 or (i % 100 == 11 and round_ % 2 == 1):
        return Status.DOWN  # down everywhere: for good, or an incident in odd rounds
    if i % 50 == 7 and location == 0:
        return Status.DOWN  # down from one location only: degraded
    return Status.UP


def _location_results(
    infos: Sequence[CheckInfo], location: int, round_: int, base: float, at: int, to: int
) -> list[CheckResult]:
    """Checks ``at``..``to`` of one round as ``LOCATIONS[location]`` ran them."""
    out = []
    count = len(infos)
    for i in range(at, to):
        status = _location_status(i, location, round_)
        duration = 0.0123 + (i % 13) * 0.001
        started = base + (round_ + i / count) * LOCATION_INTERVAL + location * 0.37
        out.append(
            CheckResult(
                check=infos[i],
                status=status,
                reason="HTTP 200, 12 tools"
                if status is Status.UP
                else ("connection refused" if location == 0 else "timeout after 10s"),
                duration_seconds=duration,
                started_at=started,
                finished_at=started + duration,
                observations={
                    "http_status": 200.0,
                    "tools_count": 12.0,
                    "response_seconds": duration,
                },
            )
        )
    return out


async def _write_locations(
    bootstrap: str,
    args: argparse.Namespace,
    infos: Sequence[CheckInfo],
    base: float,
    rounds: range,
) -> None:
    """``rounds`` of every check in every location, each location's through a ResultsStream
    of that location, until acknowledged."""
    plumbing = Plumbing()
    streams = []
    for location in LOCATIONS:
        config = _config(bootstrap, f"{location}-1", args.compression, location=location)
        stream = ResultsStream(config, ClusterKafka(config.kafka, plumbing), CollectorRegistry())
        await stream.start()
        streams.append(stream)
    chunk = 10_000
    try:
        for round_ in rounds:
            for at in range(0, len(infos), chunk):
                to = min(len(infos), at + chunk)
                for n, stream in enumerate(streams):
                    for result in _location_results(infos, n, round_, base, at, to):
                        stream.consume(result)
                await asyncio.sleep(0)
                if to % (3 * chunk) == 0 or to == len(infos):
                    for stream in streams:
                        left = await stream.flush(None, 300)
                        assert left == 0, f"{left} results never acknowledged"
    finally:
        for stream in streams:
            await stream.stop(10)
            await stream.kafka.aclose()
        await plumbing.aclose()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _read_locations(
    bootstrap: str,
    args: argparse.Namespace,
    infos: Sequence[CheckInfo],
    *,
    with_votes: bool,
    trace: bool = False,
) -> dict[str, float]:
    """A new view of a new replica reads every record in the topic: the CPU it took, the
    records, and with ``trace`` the memory left behind (tracemalloc: the status store's
    results, the board, the view's shard map)."""
    config = _config(
        bootstrap,
        "eu-west-2",
        args.compression,
        location="eu-west",
        freshness_intervals=args.freshness,
    )
    store = StatusStore(config.replica_id)
    store.set_checks(infos)
    plumbing = Plumbing()
    kafka = ClusterKafka(config.kafka, plumbing)
    gc.collect()
    if trace:
        tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0] if trace else 0
    registry = CollectorRegistry()
    votes = None
    if with_votes:
        board = QuorumBoard(config.location, config.freshness_intervals)
        board.name_locations(LOCATIONS)
        shards = ShardMap(config.shards)
        votes = Verdicts(board, store, None, None, lambda name: shards(name) % 3 == 0, registry)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        view = ResultsView(
            config,
            kafka,
            store,
            None,
            Path(tmp),
            registry,
            replay=(args.rounds + 2) * LOCATION_INTERVAL + 7200,
            save_every=3600,
            start_wait=900,
            votes=votes,
        )
        c0 = time.process_time()
        await view.start()
        out["cpu"] = time.process_time() - c0
        assert view.caught_up.is_set(), "the view did not catch up"
        out["records"] = sum(view._next or ())
        out["rss_mb"] = _rss_mb()
        await view.stop(10)
    await kafka.aclose()
    await plumbing.aclose()
    if trace:
        del view, kafka, plumbing
        gc.collect()
        out["kept_mb"] = (tracemalloc.get_traced_memory()[0] - traced0) / 1e6
        tracemalloc.stop()
    out["dropped"] = sum(
        registry.get_sample_value("alivemcp_cluster_view_dropped_records_total", {"reason": r})
        or 0.0
        for r in DROP_REASONS
    )
    del store, votes
    gc.collect()
    return out


async def _read_each(
    bootstrap: str, args: argparse.Namespace, infos: Sequence[CheckInfo]
) -> dict[str, dict[str, float]]:
    """Today's view and the locations view, ``--repeat`` reads each, taking turns; of each,
    the read that took the least CPU (other tenants of the machine only ever add to it)."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in LOCATION_MODES}
    for _ in range(args.repeat):
        for label, with_votes in LOCATION_MODES:
            runs[label].append(await _read_locations(bootstrap, args, infos, with_votes=with_votes))
    return {label: min(reads, key=lambda read: read["cpu"]) for label, reads in runs.items()}


async def locations(args: argparse.Namespace) -> None:
    """The first round read by new views (cold: the store and the board fill), then every
    round: the rounds after the first cost the difference (the steady state)."""
    assert args.rounds >= 2, "--rounds: at least 2 (the steady state is after the first)"
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    cluster = await KafkaCluster(size=3, heap="512m").start()
    try:
        config = _config(cluster.bootstrap, "bench", args.compression)
        await _topics(cluster.bootstrap, config)
        infos = [
            CheckInfo(n, "mcp", {"team": f"t{i % 20}", "env": "prod"}, interval=LOCATION_INTERVAL)
            for i, n in enumerate(check_names(args.checks))
        ]
        base = time.time() - (args.rounds + 2) * LOCATION_INTERVAL
        modes = LOCATION_MODES
        w0 = time.monotonic()
        await _write_locations(cluster.bootstrap, args, infos, base, range(1))
        written = time.monotonic() - w0
        first = await _read_each(cluster.bootstrap, args, infos)
        for label, with_votes in modes:
            traced = await _read_locations(
                cluster.bootstrap, args, infos, with_votes=with_votes, trace=True
            )
            first[label]["kept_mb"] = traced["kept_mb"]
        w0 = time.monotonic()
        await _write_locations(cluster.bootstrap, args, infos, base, range(1, args.rounds))
        written += time.monotonic() - w0
        every = await _read_each(cluster.bootstrap, args, infos)
        records = every["today"]["records"]
        print(
            f"locations: {args.checks:,} checks x {len(LOCATIONS)} locations x {args.rounds} "
            f"rounds = {records:,.0f} records ({args.compression}, 60 partitions, RF 3), "
            f"written by 3 ResultsStreams in {written:.0f} s; read by the view of eu-west-2",
            flush=True,
        )
        rate = LOCATION_GOAL_CHECKS * len(LOCATIONS) / LOCATION_INTERVAL
        steady: dict[str, float] = {}
        print(f"  {'':44s}{'today (votes=None)':>22s}{'locations (Verdicts)':>24s}")
        cold = [first[m]["cpu"] / first[m]["records"] * 1e6 for m, _ in modes]
        for m, _ in modes:
            steady[m] = (
                (every[m]["cpu"] - first[m]["cpu"])
                / (every[m]["records"] - first[m]["records"])
                * 1e6
            )
        print(f"  {'CPU a record, first round (fill)':44s}{cold[0]:>19.1f} us{cold[1]:>21.1f} us")
        print(
            f"  {'CPU a record, later rounds (steady)':44s}{steady['today']:>19.1f} us"
            f"{steady['locations']:>21.1f} us"
        )
        print(
            f"  {'a core at 3 x 100,000 checks / 60 s':44s}"
            f"{steady['today'] * rate / 1e6:>22.3f}{steady['locations'] * rate / 1e6:>24.3f}"
            f"   (goal <= {LOCATION_GOAL_SHARE:g}; {rate:,.0f} records/s)"
        )
        scale = LOCATION_GOAL_CHECKS / args.checks
        print(
            f"  {'kept after the first round (tracemalloc)':44s}"
            f"{first['today']['kept_mb']:>19.1f} MB{first['locations']['kept_mb']:>21.1f} MB"
            + (f"   (x{scale:g} at {LOCATION_GOAL_CHECKS:,} checks)" if scale != 1 else "")
        )
        print(
            f"  {'process RSS after reading every round':44s}{every['today']['rss_mb']:>19.0f} MB"
            f"{every['locations']['rss_mb']:>21.0f} MB"
        )
        print(
            f"  {'records dropped by the view':44s}{every['today']['dropped']:>22.0f}"
            f"{every['locations']['dropped']:>24.0f}"
        )
    finally:
        cluster.stop()


# -- replicas as real daemon processes --------------------------------------------------------


class Replicas:
    """N ``alivemcp run`` processes in cluster mode on one config (each its own data_dir and
    replica id), and a reader of the results topic that keeps every record's essentials."""

    def __init__(
        self,
        cluster: KafkaCluster,
        work: Path,
        count: int,
        checks: int,
        interval: float,
        session_timeout: float,
    ) -> None:
        from tests.support import DaemonProcess, write_daemon_config

        self.cluster = cluster
        self.topic = "bench-probe-results"
        # Heartbeats a tenth of the session: the lease margin (2 heartbeats) stays small.
        section = {
            "kafka": {"bootstrap_servers": cluster.bootstrap},
            "session_timeout": session_timeout,
            "heartbeat_interval": max(0.5, session_timeout / 10),
            "topics": {
                "results": self.topic,
                "status_changes": "bench-status-changes",
                "alert_state": "bench-alert-state",
            },
        }
        checks_doc = [
            {"name": f"svc-{i:06d}/mcp", "probe": "test_noop", "interval": interval}
            for i in range(checks)
        ]
        self.daemons: list[Any] = []
        for n in range(count):
            folder = work / f"replica-{n}"
            folder.mkdir(parents=True)
            path = write_daemon_config(
                folder / "alivemcp.yaml",
                checks_doc,
                cluster={**section, "replica_id": f"replica-{n}"},
                history={"enabled": False},
            )
            self.daemons.append(DaemonProcess(path, start_timeout=120))
        #: (check, replica, started_at, finished_at) of every record read.
        self.records: list[tuple[str, str, float, float]] = []
        #: check -> start of its latest run read (the steady-state test looks only here).
        self.latest: dict[str, float] = {}
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        for daemon in self.daemons:
            daemon.start()

    def stop(self) -> None:
        for daemon in self.daemons:
            try:
                daemon.stop(30)
            except Exception:  # a benchmark tears down whatever it can
                daemon.kill()

    def pids(self) -> list[int]:
        return [d.proc.pid for d in self.daemons if d.proc is not None and d.proc.poll() is None]

    async def read(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while True:  # the daemons create the topic
                partitions = consumer.partitions_for_topic(self.topic)
                if partitions:
                    break
                await consumer._client.force_metadata_update()
                await asyncio.sleep(0.5)
            consumer.assign([TopicPartition(self.topic, p) for p in partitions])
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                for batch in batches.values():
                    for record in batch:
                        doc = json.loads(record.value)
                        check, started = doc["check"], doc["started_at"]
                        self.records.append((check, doc["replica"], started, doc["finished_at"]))
                        if started > self.latest.get(check, 0.0):
                            self.latest[check] = started
        finally:
            await consumer.stop()

    def reading(self) -> None:
        self._reader = asyncio.create_task(self.read())

    async def stop_reading(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def _wait(predicate: Any, within: float, what: str, progress: Any = None) -> None:
    deadline = time.monotonic() + within
    shown = time.monotonic()
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(
                f"not within {within:g}s: {what}" + (f" ({progress()})" if progress else "")
            )
        if progress is not None and time.monotonic() - shown > 15:
            print(f"    waiting: {progress()}", flush=True)
            shown = time.monotonic()
        await asyncio.sleep(0.5)


def _owners_since(
    records: Sequence[tuple[str, str, float, float]], since: float
) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = {}
    for check, replica, started, _finished in records:
        if started >= since:
            owners.setdefault(check, set()).add(replica)
    return owners


async def handover(args: argparse.Namespace) -> None:
    interval = 1.0
    cluster = await KafkaCluster(size=3, heap="512m").start()
    with tempfile.TemporaryDirectory(prefix="alivemcp-bench-") as tmp:
        replicas = Replicas(cluster, Path(tmp), 3, args.checks, interval, args.session_timeout)
        try:
            replicas.start()
            replicas.reading()
            print(
                f"handover: 3 replicas, {args.checks} test_noop checks at {interval:g}s, "
                f"session timeout {args.session_timeout:g}s, heartbeat "
                f"{max(0.5, args.session_timeout / 10):g}s"
            )

            def steady() -> bool:
                owners = _owners_since(replicas.records, time.time() - 3 * interval)
                return (
                    len(owners) == args.checks
                    and all(len(o) == 1 for o in owners.values())
                    and len({r for o in owners.values() for r in o}) == 3
                )

            await _wait(steady, 180, "every check probed by exactly one of 3 replicas")
            await asyncio.sleep(3 * interval)
            victim = replicas.daemons[0]
            window_start = time.time() - 3 * interval
            theirs = {
                c
                for c, o in _owners_since(replicas.records, window_start).items()
                if "replica-0" in o
            }
            killed_at = time.time()
            victim.kill()  # SIGKILL: no leave, no flush, no goodbye
            print(f"  killed replica-0 (kill -9); it owned {len(theirs)} checks")

            def resumed() -> bool:
                after = _owners_since(replicas.records, killed_at)
                return all(c in after for c in theirs)

            await _wait(resumed, args.session_timeout * 6 + 60, "its checks resume elsewhere")
            await asyncio.sleep(3 * interval)
            await replicas.stop_reading()
        finally:
            await replicas.stop_reading()
            replicas.stop()
            cluster.stop()
    last_by_victim: dict[str, float] = {}
    first_elsewhere: dict[str, float] = {}
    for check, replica, started, finished in replicas.records:
        if check not in theirs:
            continue
        if replica == "replica-0":
            last_by_victim[check] = max(last_by_victim.get(check, 0.0), finished)
        elif started >= killed_at - interval:
            first_elsewhere[check] = min(first_elsewhere.get(check, float("inf")), started)
    gaps = sorted(
        first_elsewhere[c] - last_by_victim[c]
        for c in theirs
        if c in first_elsewhere and c in last_by_victim
    )
    after_kill = sorted(first_elsewhere[c] - killed_at for c in theirs if c in first_elsewhere)
    # Double probing: results of one check from two replicas within one interval.
    doubles = 0
    by_check: dict[str, list[tuple[float, str]]] = {}
    for check, replica, started, _f in replicas.records:
        if started >= killed_at - 2 * interval:
            by_check.setdefault(check, []).append((started, replica))
    for runs in by_check.values():
        runs.sort()
        doubles += sum(
            1
            for (t1, r1), (t2, r2) in itertools.pairwise(runs)
            if r1 != r2 and t2 - t1 < interval * 0.5
        )
    print(
        f"  gap per check (its last result by replica-0 -> first by the new owner): "
        f"min {gaps[0]:.2f}s  median {statistics.median(gaps):.2f}s  max {gaps[-1]:.2f}s"
    )
    print(
        f"  first result elsewhere after the kill: min {after_kill[0]:.2f}s  median "
        f"{statistics.median(after_kill):.2f}s  max {after_kill[-1]:.2f}s  (session timeout "
        f"{args.session_timeout:g}s; bound session timeout + one interval = "
        f"{args.session_timeout + interval:g}s)"
    )
    print(f"  checks probed by two replicas within half an interval after the kill: {doubles}")


async def throughput(args: argparse.Namespace) -> None:
    """3 replicas at each load of ``--levels`` (checks at ``--interval``); then the fixed and
    per-result CPU of a replica, and the projection."""
    points = []
    for checks in args.levels:
        points.append(await _throughput_once(args, checks))
    if len(points) < 2:
        return
    (r1, c1), (r2, c2) = points[0], points[-1]
    per_own = (c2 - c1) / ((r2 - r1) / 3)  # each replica produces a third of the results
    fixed = c1 - per_own * r1 / 3
    print(
        f"  a replica: fixed {fixed * 100:.1f}% of a core (node, view and stream loops, "
        f"metrics) + {per_own * 1e6:.0f} us CPU per own result (its run, its produce, and "
        f"3 records read by its view), from the {r1:,.0f}/s and {r2:,.0f}/s runs"
    )
    _project(fixed, per_own, args)


async def _throughput_once(args: argparse.Namespace, checks: int) -> tuple[float, float]:
    """(results/s on the topic, mean CPU of a replica in cores)."""
    cluster = await KafkaCluster(size=3, heap="512m").start()
    brokers = [n.process.pid for n in cluster.nodes if n.process is not None]
    with tempfile.TemporaryDirectory(prefix="alivemcp-bench-") as tmp:
        replicas = Replicas(cluster, Path(tmp), 3, checks, args.interval, args.session_timeout)
        try:
            replicas.start()
            replicas.reading()
            rate = checks / args.interval
            print(
                f"throughput: 3 replicas, {checks:,} test_noop checks at "
                f"{args.interval:g}s ({rate:,.0f} results/s planned), history off",
                flush=True,
            )

            def recent() -> int:
                since = time.time() - args.interval * 1.5
                return sum(1 for t in replicas.latest.values() if t >= since)

            def steady() -> bool:
                return recent() == checks

            def progress() -> str:
                return (
                    f"{recent():,} checks with a result in the last 1.5 intervals, "
                    f"{len(replicas.records):,} records read"
                )

            await _wait(
                steady, 300 + args.interval * 3, "every check has a recent result", progress
            )
            await asyncio.sleep(2 * args.interval)  # start-up work (topics, rebalances) done
            pids = replicas.pids()
            c0 = [_cpu_of([p]) for p in pids]
            b0 = _cpu_of(brokers)
            t0 = time.time()
            seen0 = len(replicas.records)
            await asyncio.sleep(args.seconds)
            t1 = time.time()
            cpu = [(_cpu_of([p]) - c) / args.seconds for p, c in zip(pids, c0, strict=True)]
            broker_cpu = (_cpu_of(brokers) - b0) / args.seconds
            await asyncio.sleep(5)  # the last results of the window reach the reader
            window = [r for r in replicas.records[seen0:] if t0 <= r[2] < t1]
            span = t1 - t0
            per_replica = Counter(r[1] for r in window)
        finally:
            await replicas.stop_reading()
            replicas.stop()
            cluster.stop()
    total = len(window) / span
    print(
        f"  results on the topic: {total:,.0f}/s ("
        + ", ".join(f"{r} {n / span:,.0f}/s" for r, n in sorted(per_replica.items()))
        + ")"
    )
    print(
        "  CPU: "
        + ", ".join(f"replica-{n} {used * 100:.1f}%" for n, used in enumerate(cpu))
        + f" of a core; 3 brokers {broker_cpu * 100:.1f}%"
    )
    return total, sum(cpu) / len(cpu)


def _project(fixed: float, per_own: float, args: argparse.Namespace) -> None:
    """From 3 replicas to 1,000,000 checks at 60 s. A replica's CPU = fixed + its own results
    x their cost + every result of the cluster x the view's cost per record; the last term
    does not shrink with more replicas."""
    need = TARGET_CHECKS / TARGET_INTERVAL
    view = args.view_us / 1e6
    run = max(per_own - 3 * view, args.stream_us / 1e6)
    print(
        f"  projection to {TARGET_CHECKS:,} checks at {TARGET_INTERVAL:g}s = {need:,.0f} "
        f"results/s; view {args.view_us:g} us a record (produce part), run "
        f"{run * 1e6:.0f} us (per own result minus 3 view records, at least the stream's "
        f"{args.stream_us:g} us)"
    )
    budget = args.budget
    for label, view_cost in (("history off", view), ("history on", args.view_history_us / 1e6)):
        free = budget - fixed - need * view_cost
        if free <= 0:
            print(
                f"    {label}: reading every result costs {need * view_cost:.2f} core a "
                f"replica, over the {budget:g}-core budget: does not fit at this size"
            )
            continue
        print(
            f"    {label}: view {need * view_cost:.2f} core a replica; at {budget:g} core "
            f"a replica: {need * run / free:,.1f} replicas of no-op checks; with MCP probes "
            f"at {args.probe_ms:g} ms CPU each (notes/mcp-wire.md): "
            f"{need * (run + args.probe_ms / 1e3) / free:,.0f} replicas"
        )


# -- entry -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "part", choices=["balance", "produce", "handover", "throughput", "locations", "all"]
    )
    parser.add_argument(
        "--checks",
        type=int,
        default=None,
        help="balance: 1,000,000; produce: 10,000; handover: 300; locations: 100,000",
    )
    parser.add_argument("--shards", type=int, default=60)
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--results", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--compression", default="lz4")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="locations: runs of every check")
    parser.add_argument(
        "--repeat", type=int, default=3, help="locations: reads of each kind (the least counts)"
    )
    parser.add_argument(
        "--freshness",
        type=float,
        default=100.0,
        help="locations: the board's freshness window, in intervals (see the docstring)",
    )
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--levels",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[3000, 30000],
        help="throughput: checks per run",
    )
    parser.add_argument(
        "--budget", type=float, default=0.7, help="cores a replica may use in the projection"
    )
    parser.add_argument(
        "--view-us",
        type=float,
        default=25.5,
        help="the view's CPU per record (from the produce part)",
    )
    parser.add_argument(
        "--view-history-us",
        type=float,
        default=53.8,
        help="the view's CPU per record with history on (produce part)",
    )
    parser.add_argument(
        "--stream-us",
        type=float,
        default=41.5,
        help="the stream's CPU per result at a steady rate (produce part)",
    )
    parser.add_argument(
        "--probe-ms",
        type=float,
        default=0.87,
        help="CPU of one real MCP probe (aiohttp, notes/mcp-wire.md)",
    )
    args = parser.parse_args()
    parts = (
        ["balance", "produce", "handover", "throughput", "locations"]
        if args.part == "all"
        else [args.part]
    )
    defaults = {
        "balance": 1_000_000,
        "produce": 10_000,
        "handover": 300,
        "throughput": 30_000,
        "locations": LOCATION_GOAL_CHECKS,
    }
    for part in parts:
        args.checks = args.checks or defaults[part]
        if part == "balance":
            balance(args)
        elif part == "produce":
            asyncio.run(produce(args))
        elif part == "handover":
            asyncio.run(handover(args))
        elif part == "locations":
            asyncio.run(locations(args))
        else:
            asyncio.run(throughput(args))
        args.checks = None


if __name__ == "__main__":
    main()
