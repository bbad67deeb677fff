"""Helpers shared by the Kafka tests (import as ``tests.support.kafka``).

General helpers (``run_check``, ``run_until``, ``free_port``...) live in ``tests.support``;
the real brokers are fixtures in ``tests/kafka/conftest.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import yaml
from aiokafka.conn import create_conn
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.results import CheckResult
from alivemcp.engine.runner import ProbeHandle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.kafka import KafkaCluster

#: Canary latency thresholds a busy 2-core machine always meets: latency is not under test.
RELAXED = {"produce_latency_threshold": 30, "roundtrip_latency_threshold": 30}


def unique(prefix: str) -> str:
    """A topic or group name no other test (or earlier run on a shared broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def conn(kafka: KafkaCluster, **extra: Any) -> dict[str, Any]:
    """The ``cluster:`` params of a check on the test broker(s)."""
    return {"bootstrap_servers": kafka.bootstrap, **extra}


class Check:
    """One check instance run repeatedly, as the daemon runs it: probe state (windows, the
    canary's reader) and the plumbing's clients are kept between runs."""

    def __init__(
        self,
        probe: str,
        params: dict[str, Any],
        *,
        timeout: float = 30.0,
        labels: dict[str, str] | None = None,
        plumbing: Plumbing | None = None,
    ) -> None:
        doc = {
            "checks": [
                {
                    "name": probe,
                    "probe": probe,
                    "interval": max(60.0, timeout),
                    "timeout": timeout,
                    "labels": labels or {},
                    "params": params,
                }
            ]
        }
        loaded = load_config_text(yaml.safe_dump(doc), env={})
        self.timeout = timeout
        self._own_plumbing = plumbing is None
        self.plumbing = plumbing or Plumbing()
        self.handle: ProbeHandle = build_handle(loaded.checks[0], self.plumbing)

    async def run(self) -> CheckResult:
        return await self.handle.run()

    async def close(self) -> None:
        await self.handle.teardown()
        if self._own_plumbing:
            await self.plumbing.aclose()


# -- the KRaft quorum ---------------------------------------------------------------------------
# aiokafka has no DescribeQuorum, and in KRaft the ``controller_id`` of Metadata and
# DescribeCluster answers is a random broker, not the active controller.

_REPLICA_STATE = (("replica_id", Int32), ("log_end_offset", Int64), ("tags", TaggedFields))


class _DescribeQuorumResponse_v0(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 55
    API_VERSION = 0
    SCHEMA = Schema(
        ("error_code", Int16),
        (
            "topics",
            CompactArray(
                ("topic_name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("high_watermark", Int64),
                        ("current_voters", CompactArray(*_REPLICA_STATE)),
                        ("observers", CompactArray(*_REPLICA_STATE)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _DescribeQuorumRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 55
    API_VERSION = 0
    RESPONSE_TYPE = _DescribeQuorumResponse_v0
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_name", CompactString("utf-8")),
                ("partitions", CompactArray(("partition_index", Int32), ("tags", TaggedFields))),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _DescribeQuorumRequest(Request[_DescribeQuorumRequest_v0]):  # type: ignore[misc]
    API_KEY = 55

    def build(self, request_struct_class: type[_DescribeQuorumRequest_v0]) -> Any:
        return request_struct_class([("__cluster_metadata", [(0, {})], {})], {})


async def active_controller(kafka: KafkaCluster, via: int = 1) -> int:
    """The node id of the active KRaft controller (the metadata quorum's leader), asked of
    broker ``via`` (which forwards DescribeQuorum to the controller)."""
    conn = await create_conn("127.0.0.1", kafka.node(via).port, request_timeout_ms=10000)
    try:
        response = await conn.send(_DescribeQuorumRequest())
    finally:
        conn.close()
    partition = response.topics[0][1][0]
    error_code, leader = partition[1], partition[2]
    assert error_code == 0 and leader >= 0, f"no quorum leader: {response}"
    return int(leader)


async def init_producer_id_error(kafka: KafkaCluster, node_id: int) -> int:
    """Ask broker ``node_id`` for a producer id (as an idempotent producer starts); the
    error code it answers (0: it handed one out)."""
    conn = await create_conn("127.0.0.1", kafka.node(node_id).port, request_timeout_ms=10000)
    try:
        response = await conn.send(InitProducerIdRequest(None, 2147483647))
    finally:
        conn.close()
    return int(response.error_code)
