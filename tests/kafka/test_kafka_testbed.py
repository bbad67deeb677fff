"""The local Kafka harness never mistakes another cluster's broker for its own.

Ports are picked free and bound later by the JVM, so another test process's broker can own
one by then. Readiness once took that broker's answer for the new cluster's: the new node
failed to bind and exited, and every later test of the session talked to the other
process's broker (a pause of the exited node then paused nothing). Now readiness asks for
the cluster id the storage was formatted with, and a node that finds its port taken is
started again on new ports.
"""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient

import alivemcp.testbed.kafka as testbed
from alivemcp.testbed.kafka import KafkaCluster


async def test_a_port_owned_by_another_cluster_is_left_to_it_and_new_ports_are_picked(
    kafka_single: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = kafka_single.nodes[0].port
    handed: list[int] = []
    real = testbed._free_port

    def free_port() -> int:  # the first port handed out is the running cluster's
        handed.append(taken if not handed else real())
        return handed[-1]

    monkeypatch.setattr(testbed, "_free_port", free_port)
    late = KafkaCluster(size=1)
    try:
        await late.start(ready_within=90)
        assert handed[0] == taken  # (the collision this test is about did happen)
        assert late.nodes[0].port != taken
        admin = AIOKafkaAdminClient(bootstrap_servers=late.bootstrap)
        await admin.start()
        try:
            info = await admin.describe_cluster()
        finally:
            await admin.close()
        assert info["cluster_id"] == late.cluster_id != kafka_single.cluster_id
        late.pause(1)  # its own node, alive: pausing it is possible
        late.resume(1)
    finally:
        late.stop()
    owner = kafka_single.nodes[0].process
    assert owner is not None and owner.poll() is None  # the port's own cluster runs on
