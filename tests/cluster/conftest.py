"""Fixtures of the cluster tests: one real three-broker Kafka per test process (session
scope), with gated listeners (tests/support/cluster.py). Tests that pause brokers or
cut the gates resume and heal before they finish."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.cluster import GatedKafkaCluster


@pytest.fixture(scope="session")
async def kafka3() -> AsyncIterator[GatedKafkaCluster]:
    """Three combined broker+controller nodes (RF 3, min ISR 2) with gated listeners."""
    cluster = await GatedKafkaCluster(size=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()
