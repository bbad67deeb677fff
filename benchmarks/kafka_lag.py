"""Consumer-lag benchmark: one kafka_consumer_lag check over 2,000 partitions and 20 groups.

Run by hand (not a test):  .venv/bin/python benchmarks/kafka_lag.py
Starts a single-node Kafka broker (alivemcp/testbed/kafka.py), creates 20 topics of 100
partitions, writes a few messages to each partition and commits offsets for 20 groups (half
of the partitions lagging), then runs the check repeatedly through the engine's runner and
prints seconds per run and Kafka requests per run (counted by wrapping the shared client's
``send``). Goal: under 1 s per run.

``--layout spread``: each group consumes one topic (2,000 group-partitions in all);
``--layout shared``: every group consumes every topic (40,000 group-partitions).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from alivemcp.config import load_config_text  # noqa: E402
from alivemcp.engine.checks import build_handle  # noqa: E402
from alivemcp.plumbing import Plumbing  # noqa: E402
from alivemcp.plumbing.kafka import KafkaConnection  # noqa: E402
from alivemcp.testbed.kafka import KafkaCluster  # noqa: E402

MESSAGES_PER_PARTITION = 3


async def prepare(
    bootstrap: str, topics: int, partitions: int, groups: int, layout: str
) -> dict[str, list[str]]:
    """Topics, messages and commits; returns the topics each group consumes."""
    names = [f"bench-lag-{i:02d}" for i in range(topics)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    await admin.start()
    try:
        for name in names:  # one at a time: kinder to a small broker
            response = await admin.create_topics([NewTopic(name, partitions, 1)])
            for _topic, code, *_ in response.topic_errors:
                if code not in (0, 36):  # 36: already exists
                    raise RuntimeError(f"creating {name}: error {code}")
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        futures = [
            await producer.send(name, b"x" * 100, partition=p)
            for name in names
            for p in range(partitions)
            for _ in range(MESSAGES_PER_PARTITION)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()

    group_topics: dict[str, list[str]] = {}
    for g in range(groups):
        group = f"bench-group-{g:02d}"
        mine = names if layout == "shared" else [names[g % topics]]
        group_topics[group] = mine
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(t, p) for t in mine for p in range(partitions)]
            consumer.assign(tps)
            # Even partitions are caught up, odd ones lag by two messages.
            await consumer.commit(
                {tp: MESSAGES_PER_PARTITION if tp.partition % 2 == 0 else 1 for tp in tps}
            )
        finally:
            await consumer.stop()
    return group_topics


def time_phases(probe: Any, phases: dict[str, float]) -> None:
    """Accumulate seconds spent reading the cluster and evaluating, per run."""
    reader, evaluator = probe._reader, probe._evaluator
    read, evaluate = reader.read, evaluator.evaluate

    async def timed_read(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await read(*args, **kwargs)
        finally:
            phases["read"] += time.perf_counter() - started

    def timed_evaluate(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return evaluate(*args, **kwargs)
        finally:
            phases["evaluate"] += time.perf_counter() - started

    reader.read = timed_read
    evaluator.evaluate = timed_evaluate


def count_requests(client: Any, counter: Counter[str]) -> None:
    send: Callable[..., Awaitable[Any]] = client.send

    async def counted(node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        counter[type(request).__name__.removesuffix("Request")] += 1
        return await send(node_id, request, *args, **kwargs)

    client.send = counted


async def bench(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    cluster = await KafkaCluster(size=1, heap="768m").start()
    print(f"broker started in {time.perf_counter() - started:.1f}s at {cluster.bootstrap}")
    try:
        started = time.perf_counter()
        group_topics = await prepare(
            cluster.bootstrap, args.topics, args.partitions, args.groups, args.layout
        )
        group_partitions = sum(len(t) for t in group_topics.values()) * args.partitions
        print(
            f"prepared {args.topics} topics x {args.partitions} partitions, {args.groups} groups "
            f"({group_partitions} group-partitions, layout {args.layout}) in "
            f"{time.perf_counter() - started:.1f}s"
        )
        params = {
            "cluster": {"bootstrap_servers": cluster.bootstrap, "request_timeout": 30},
            "group_pattern": "bench-group-.*" if args.pattern else None,
            "groups": [] if args.pattern else sorted(group_topics),
            "time_lag": args.time_lag,
            "window": 10,
        }
        params = {k: v for k, v in params.items() if v is not None}
        doc = {
            "checks": [
                {"name": "lag", "probe": "kafka_consumer_lag", "timeout": 60, "params": params}
            ]
        }
        loaded = load_config_text(yaml.safe_dump(doc), env={})
        plumbing = Plumbing()
        handle = build_handle(loaded.checks[0], plumbing)
        kafka = plumbing.kafka.cluster(KafkaConnection(**params["cluster"]))
        admin = await kafka.admin()  # built before the first run so every request is counted
        counter: Counter[str] = Counter()
        count_requests(admin._client, counter)
        phases: dict[str, float] = {"read": 0.0, "evaluate": 0.0}
        time_phases(handle.probe, phases)
        durations: list[float] = []
        requests: list[Counter[str]] = []
        profiler = cProfile.Profile() if args.profile else None
        try:
            for run in range(args.runs + 1):
                counter.clear()
                if run == 1:
                    phases.update(read=0.0, evaluate=0.0)
                if profiler is not None and run == 1:
                    profiler.enable()
                started = time.perf_counter()
                result = await handle.run()
                durations.append(time.perf_counter() - started)
                requests.append(Counter(counter))
                if result.status.value == "unknown":
                    raise SystemExit(f"check could not run: {result.reason}")
        finally:
            await handle.teardown()
            await plumbing.aclose()
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        obs = result.observations
        print(f"last verdict: {result.status.value}: {result.reason[:160]}")
        print(
            f"evaluated {obs['partitions']:.0f} group-partitions, "
            f"{obs['lagging_partitions']:.0f} lagging, "
            f"max time lag {obs.get('max_time_lag_seconds', float('nan')):.1f}s"
        )
        cold, warm = durations[0], durations[1:]
        print(
            f"first run (coordinator discovery): {cold:.3f}s, "
            f"{sum(requests[0].values())} requests {dict(requests[0])}"
        )
        print(
            f"steady runs ({len(warm)}): median {statistics.median(warm):.3f}s, "
            f"mean {statistics.fmean(warm):.3f}s, max {max(warm):.3f}s per run"
        )
        runs = max(1, len(warm))
        print(
            f"per steady run: reading the cluster {phases['read'] / runs:.3f}s, evaluating "
            f"{phases['evaluate'] / runs:.3f}s, the rest (summary, runner) "
            f"{statistics.fmean(warm) - (phases['read'] + phases['evaluate']) / runs:.3f}s"
        )
        steady = requests[-1]
        print(f"requests per steady run: {sum(steady.values())} {dict(sorted(steady.items()))}")
        verdict = "met" if max(warm) < 1.0 else "NOT met"
        print(f"goal under 1 s per run: {verdict}")
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--layout", choices=("spread", "shared"), default="spread")
    parser.add_argument("--time-lag", choices=("fetch", "estimate"), default="fetch")
    parser.add_argument("--pattern", action="store_true", help="select groups by regex")
    parser.add_argument("--profile", action="store_true", help="cProfile the steady runs")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
