"""The cluster layer's Kafka clients, built from the ``cluster.kafka`` connection block.

Connection settings (bootstrap or MSK ARN, TLS, SCRAM, MSK IAM tokens) come from the same
plumbing the Kafka probes use, so the cluster reaches Kafka exactly as they do. This module is
the cluster layer's only door to aiokafka: the other cluster modules get clients from here and
catch :class:`KafkaError` (aiokafka's base error, re-exported) at their own boundary.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaError
from aiokafka.errors import for_code as error_for_code

from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import KafkaClusterClient
from alivemcp.plumbing.kafka_settings import KafkaConnection

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ClusterKafka",
    "ConsumerRebalanceListener",
    "KafkaError",
    "NewTopic",
    "StickyPartitionAssignor",
    "TopicPartition",
    "error_for_code",
]


class ClusterKafka:
    """Builds (unstarted) aiokafka clients for the cluster's Kafka; the caller starts and
    stops them."""

    def __init__(self, conn: KafkaConnection, plumbing: Plumbing) -> None:
        self.conn = conn
        self._client = KafkaClusterClient(conn, plumbing)

    async def options(self) -> dict[str, Any]:
        """Connection keyword arguments shared by every client (raises the plumbing's
        ``KafkaPlumbingError`` when the settings are unusable or an MSK ARN cannot be
        resolved)."""
        return await self._client.client_options()

    async def consumer(self, *topics: str, **settings: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(*topics, **(await self.options()), **settings)

    async def producer(self, **settings: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(**(await self.options()), **settings)

    async def admin(self) -> AIOKafkaAdminClient:
        options = await self.options()
        options.pop("metadata_max_age_ms", None)
        return AIOKafkaAdminClient(**options)

    def describe(self) -> str:
        """The cluster for logs (no credentials)."""
        return self.conn.describe()

    async def aclose(self) -> None:
        await self._client.aclose()
