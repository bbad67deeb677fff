"""Real Kafka brokers for the Kafka tests, each started on first use (the shared ones once per
session; the three-broker one is the session's ``kafka3``, shared with cluster mode's tests).

Startup costs CPU seconds on a small machine, so the single broker and the three-broker
cluster are session-scoped and shared; tests that pause a broker must resume it before they
finish (``with cluster.paused(node_id):``). A missing Java or Maven fails the test with
what is missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from alivemcp.testbed.kafka import KafkaCluster
from tests.support.cluster import GatedKafkaCluster


@pytest.fixture(scope="session")
async def kafka_single() -> AsyncIterator[KafkaCluster]:
    """One combined broker+controller node (replication factor 1 everywhere)."""
    cluster = await KafkaCluster(size=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_cluster3(kafka3: GatedKafkaCluster) -> KafkaCluster:
    """Three combined nodes (ids 1, 2, 3): replication factor 3, min.insync.replicas 2 (the
    session's, tests/conftest.py: cluster mode's tests use the same brokers)."""
    return kafka3


@pytest.fixture(scope="module")
async def kafka_cluster3_unfenced() -> AsyncIterator[KafkaCluster]:
    """Three nodes whose controllers fence a silent broker only after 10 minutes: a paused
    broker stays registered and keeps leading its partitions for the whole test, like a
    broker whose request threads hang while its heartbeat thread lives on."""
    cluster = await KafkaCluster(
        size=3, extra_properties={"broker.session.timeout.ms": "600000"}
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()
