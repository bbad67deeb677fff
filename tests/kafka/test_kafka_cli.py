"""The Kafka probes through the real CLI (``alivemcp check --json``) on three real brokers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support import check_json, run_check

CONFIG = """
checks:
  - name: msk-partitions
    probe: kafka_partition_health
    timeout: 30s
    labels: {env: production}
    params:
      cluster: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", request_timeout: 5}
      topics: [cli-orders, cli-solo]
  - name: msk-canary
    probe: kafka_canary
    timeout: 40s
    params:
      cluster: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", request_timeout: 5}
      topic: cli-canary
      produce_timeout: 10s
      produce_latency_threshold: 30s
      roundtrip_latency_threshold: 30s
"""


async def test_cli_reports_paused_broker(kafka_cluster3: KafkaCluster, tmp_path: Path) -> None:
    cluster = kafka_cluster3
    plumbing = Plumbing()
    conn = KafkaConnection(bootstrap_servers=cluster.bootstrap)
    try:
        kc = plumbing.kafka.cluster(conn)
        await kc.create_topic("cli-orders", partitions=3, replication_factor=3)
        await kc.create_topic(
            "cli-solo", assignments={0: [3]}, configs={"min.insync.replicas": "1"}
        )
    finally:
        await plumbing.aclose()
    config = tmp_path / "kafka.yaml"
    config.write_text(CONFIG)
    env = {"KAFKA_BOOTSTRAP": cluster.bootstrap}

    code, rows = await asyncio.to_thread(check_json, config, env=env)
    assert rows["msk-partitions"]["status"] == "up", rows["msk-partitions"]["reason"]
    assert rows["msk-canary"]["status"] == "up", rows["msk-canary"]["reason"]
    assert code == 0

    with cluster.paused(3):
        await _wait_health(cluster, lambda r: r.observations.get("offline_partitions") == 1)
        code, rows = await asyncio.to_thread(check_json, config, env=env)
        health = rows["msk-partitions"]
        assert health["status"] == "down"
        assert "1 offline (no leader): cli-solo/0 replicas [3]" in health["reason"]
        assert "3 under-replicated (broker 3 missing from ISR)" in health["reason"]
        assert health["observations"]["under_replicated_partitions"] == 3
        assert health["details"]["brokers_missing_from_isr"] == [3]
        # Leadership has moved and RF 3 / min ISR 2 holds: a fresh canary writes everywhere.
        assert rows["msk-canary"]["status"] in ("up", "degraded"), rows["msk-canary"]["reason"]
        assert code == 1

    await _wait_health(cluster, lambda r: r.status == Status.UP)


async def _wait_health(
    cluster: KafkaCluster, done: Callable[[CheckResult], bool], within: float = 60.0
) -> None:
    params = {
        "cluster": {"bootstrap_servers": cluster.bootstrap, "request_timeout": 5},
        "topics": ["cli-orders", "cli-solo"],
    }
    deadline = time.monotonic() + within
    while True:
        result = await run_check("kafka_partition_health", params)
        if done(result):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"cluster did not reach the state: {result.reason}")
        await asyncio.sleep(1.0)
