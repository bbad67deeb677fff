"""Cluster-mode benchmark (issue #15): shard balance, the results stream's cost per result, the
view's cost per record, handover after kill -9, and the throughput of 3 replicas.

Run by hand (not a test), one part at a time or all:

  .venv/bin/python benchmarks/cluster.py balance
  .venv/bin/python benchmarks/cluster.py produce      [--results 200000] [--rate 1000]
  .venv/bin/python benchmarks/cluster.py handover     [--checks 300] [--session-timeout 10]
  .venv/bin/python benchmarks/cluster.py throughput   [--checks 30000] [--seconds 60]

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

throughput: 3 daemon replicas, ``--checks`` test_noop checks at ``--interval``; results per
second on the topic and CPU per replica over ``--seconds``; the projection to 1,000,000 checks
at 60 s uses the measured per-run and per-view-record costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from alivemcp.cluster._kafka import ClusterKafka  # noqa: E402
from alivemcp.cluster.config import ClusterConfig  # noqa: E402
from alivemcp.cluster.shards import shard_of  # noqa: E402
from alivemcp.cluster.stream import ResultsStream, result_record  # noqa: E402
from alivemcp.cluster.view import ResultsView  # noqa: E402
from alivemcp.history.config import HistoryConfig  # noqa: E402
from alivemcp.history.store import HistoryStore  # noqa: E402
from alivemcp.plumbing import Plumbing  # noqa: E402
from alivemcp.probe import Status  # noqa: E402
from alivemcp.results import CheckInfo, CheckResult  # noqa: E402
from alivemcp.status import StatusStore  # noqa: E402
from alivemcp.testbed.kafka import KafkaCluster  # noqa: E402

TARGET_CHECKS = 1_000_000
TARGET_INTERVAL = 60.0


def check_names(count: int) -> list[str]:
    """Names shaped like a large fleet's: registry host / server slug / transport."""
    transports = ("mcp", "sse", "tools")
    return [f"registry-{i % 97}.example/{i:07d}-server/{transports[i % 3]}"
            for i in range(count)]


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
    print(f"balance: {args.checks:,} checks over {args.shards} shards "
          f"(shard_of: {hashing / args.checks * 1e6:.2f} us a name)")
    print(f"  checks per shard: min {min(counts):,}  max {max(counts):,}  mean {mean:,.0f}  "
          f"stdev {statistics.pstdev(counts):,.1f}  max/mean {max(counts) / mean:.4f}")
    topics = _Topics("results", args.shards)
    names_of = [f"replica-{i:02d}" for i in range(args.replicas)]
    per_replica = args.checks / args.replicas
    for assignor in node_assignors():
        members = {m: assignor.metadata(["results"]) if hasattr(assignor, "member_assignment")
                   else ConsumerProtocolMemberMetadata(0, ["results"], b"") for m in names_of}
        assignment = assignor.assign(topics, members)
        shards_of = {m: _shards_of(assignment[m]) for m in names_of}
        loads = [sum(counts[s] for s in shards) for shards in shards_of.values()]
        sizes = [len(shards) for shards in shards_of.values()]
        label = getattr(assignor, "name", assignor.__name__)
        print(f"  {label} assignor, {args.replicas} replicas: {min(sizes)}-{max(sizes)} shards "
              f"each; checks per replica min {min(loads):,} max {max(loads):,} "
              f"(max/mean {max(loads) / per_replica:.4f})")
        if args.replicas < 2:
            continue
        # One replica gone (kill -9, after the session timeout): the survivors rejoin,
        # each saying what it held (the sticky assignor's user data).
        survivors = names_of[1:]
        if hasattr(assignor, "_metadata"):
            from aiokafka.structs import TopicPartition

            again = {m: assignor._metadata(
                ["results"], [TopicPartition("results", p) for p in shards_of[m]], 1)
                for m in survivors}
        else:
            again = {m: ConsumerProtocolMemberMetadata(0, ["results"], b"") for m in survivors}
        after = assignor.assign(topics, again)
        moved = sum(1 for m in survivors for p in _shards_of(after[m]) if p not in shards_of[m])
        loads = [sum(counts[p] for p in _shards_of(after[m])) for m in survivors]
        print(f"    one replica gone: {moved} shards change owner "
              f"({len(shards_of[names_of[0]])} were the lost replica's); checks per replica "
              f"max {max(loads):,} (max/mean {max(loads) / (args.checks / len(survivors)):.4f})")


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
        await admin.create_topics([
            NewTopic(config.topics.results, config.shards, 3, topic_configs=settings),
            NewTopic(config.topics.status_changes, config.shards, 3, topic_configs=settings),
        ])
        while True:
            described = await admin.describe_topics([config.topics.results,
                                                     config.topics.status_changes])
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
        out.append(CheckResult(
            check=check, status=status,
            reason="HTTP 200, 12 tools" if status is Status.UP else "connection refused",
            duration_seconds=0.0123, started_at=t, finished_at=t + 0.0123,
            observations={"http_status": 200.0, "tools_count": 12.0,
                          "response_seconds": 0.0123}))
    return out


async def _feed(stream: ResultsStream, store: StatusStore, results: Sequence[CheckResult],
                rate: float | None) -> None:
    chunk = 500
    t0 = time.monotonic()
    for at in range(0, len(results), chunk):
        for result in results[at:at + chunk]:
            stream.consume(result)
            store.record(result)
        if rate:
            wait = t0 + (at + chunk) / rate - time.monotonic()
            await asyncio.sleep(max(0.0, wait))
        else:
            await asyncio.sleep(0)
    left = await stream.flush(None, 300)
    assert left == 0, f"{left} results never acknowledged"


def _config(bootstrap: str, replica: str, compression: str) -> ClusterConfig:
    return ClusterConfig.model_validate({
        "kafka": {"bootstrap_servers": bootstrap}, "shards": 60, "replica_id": replica,
        "compression": compression, "produce_buffer": 10_000_000,
        "topics": {"results": "bench-results", "status_changes": "bench-changes",
                   "alert_state": "bench-alerts"},
    })


async def produce(args: argparse.Namespace) -> None:
    cluster = await KafkaCluster(size=3, heap="512m").start()
    brokers = [n.process.pid for n in cluster.nodes if n.process is not None]
    try:
        config = _config(cluster.bootstrap, "bench-a", args.compression)
        await _topics(cluster.bootstrap, config)
        infos = [CheckInfo(n, "mcp", {"team": f"t{i % 20}", "env": "prod"})
                 for i, n in enumerate(check_names(args.checks))]
        results = _results(infos, args.results, time.time() - 3600)
        print(f"produce: {args.results:,} results of {args.checks:,} checks, 60 partitions, "
              f"RF 3, min.insync.replicas 2, acks=all, idempotent, {args.compression}")

        c0 = time.process_time()
        sizes = [len(result_record(r, "bench-a")) for r in results]
        serialise = (time.process_time() - c0) / len(results)
        print(f"  serialise alone: {serialise * 1e6:.1f} us CPU a result "
              f"(JSON value {statistics.mean(sizes):.0f} bytes)")

        plumbing = Plumbing()
        kafka = ClusterKafka(config.kafka, plumbing)
        store = StatusStore("bench-a")
        store.set_checks(infos)
        stream = ResultsStream(config, kafka, store, CollectorRegistry())
        await stream.start()
        await _feed(stream, store, results[:2000], None)  # producer started, metadata known

        b0 = _cpu_of(brokers)
        await asyncio.sleep(args.idle_seconds)
        idle_rate = (_cpu_of(brokers) - b0) / args.idle_seconds
        print(f"  brokers idle: {idle_rate * 100:.1f}% of a core (3 brokers together); "
              "subtracted below")
        for label, rate, part in (("full speed", None, results),
                                  (f"steady {args.rate:g}/s", args.rate,
                                   results[:int(args.rate * args.steady_seconds)])):
            c0, b0, w0 = time.process_time(), _cpu_of(brokers), time.monotonic()
            await _feed(stream, store, part, rate)
            wall = time.monotonic() - w0
            cpu = time.process_time() - c0
            broker_cpu = _cpu_of(brokers) - b0 - idle_rate * wall
            print(f"  consume + produce until acked, {label}: {cpu / len(part) * 1e6:.1f} us "
                  f"CPU a result in this process; brokers {broker_cpu / len(part) * 1e6:.1f} "
                  f"us a result (3 brokers, replication included); {len(part) / wall:,.0f} "
                  f"results/s over {wall:.1f} s")
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
                view = ResultsView(view_config, view_kafka, reader_store, history, Path(tmp),
                                   CollectorRegistry(), replay=7200, start_wait=600)
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
            print(f"  view reads {total:,} records into the status store"
                  f"{' and history' if with_history else ''}: {cpu / total * 1e6:.1f} us CPU "
                  f"a record; {total / wall:,.0f} records/s")
        await plumbing.aclose()
    finally:
        cluster.stop()


# -- entry -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["balance", "produce", "handover", "throughput", "all"])
    parser.add_argument("--checks", type=int, default=None,
                        help="balance: 1,000,000; produce: 10,000; handover: 300; "
                        "throughput: 30,000")
    parser.add_argument("--shards", type=int, default=60)
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--results", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--compression", default="lz4")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    parts = ["balance", "produce", "handover", "throughput"] if args.part == "all" \
        else [args.part]
    defaults = {"balance": 1_000_000, "produce": 10_000, "handover": 300, "throughput": 30_000}
    for part in parts:
        args.checks = args.checks or defaults[part]
        if part == "balance":
            balance(args)
        elif part == "produce":
            asyncio.run(produce(args))
        elif part == "handover":
            asyncio.run(handover(args))
        else:
            asyncio.run(throughput(args))
        args.checks = None


async def handover(args: argparse.Namespace) -> None:  # filled in with the daemon wiring
    raise SystemExit("handover needs the daemon's cluster wiring")


async def throughput(args: argparse.Namespace) -> None:  # filled in with the daemon wiring
    raise SystemExit("throughput needs the daemon's cluster wiring")


if __name__ == "__main__":
    main()
