"""The local Kafka harness never mistakes another cluster's broker for its own.

Ports are picked free and bound later by the JVM, so another test process's broker can own
one by then. Readiness once took that broker's answer for the new cluster's: the new node
failed to bind and exited, and every later test of the session talked to the other
process's broker (a pause of the exited node then paused nothing).
"""

from __future__ import annotations

import pytest

import alivemcp.testbed.kafka as testbed
from alivemcp.testbed.kafka import KafkaCluster, KafkaHarnessError


async def test_a_port_owned_by_another_cluster_fails_start_up_by_name(
        kafka_single: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = kafka_single.nodes[0].port
    ports = iter([taken])
    real = testbed._free_port
    monkeypatch.setattr(testbed, "_free_port", lambda: next(ports, None) or real())
    late = KafkaCluster(size=1)
    with pytest.raises(KafkaHarnessError, match=r"exited .* during startup") as raised:
        await late.start(ready_within=90)
    assert late.nodes[0].port == taken  # (the collision this test is about did happen)
    assert "Address already in use" in str(raised.value)  # the node's log says why
    owner = kafka_single.nodes[0].process
    assert owner is not None and owner.poll() is None  # the port's own cluster runs on
