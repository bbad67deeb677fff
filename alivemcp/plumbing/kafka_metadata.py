"""What the brokers say about the cluster: brokers, controller, topics and partitions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BrokerInfo", "ClusterMetadata", "PartitionState", "TopicState", "parse_metadata"]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: int

    @property
    def offline(self) -> bool:
        """No leader: nothing can be read or written."""
        return self.leader < 0

    @property
    def missing_from_isr(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.isr)


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    error_code: int
    internal: bool
    partitions: tuple[PartitionState, ...]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: Mapping[int, BrokerInfo]
    controller_id: int
    topics: Mapping[str, TopicState]


def parse_metadata(response: Any) -> ClusterMetadata:
    obj = response.to_object()
    brokers = {
        int(b["node_id"]): BrokerInfo(int(b["node_id"]), str(b["host"]), int(b["port"]))
        for b in obj.get("brokers", [])
    }
    topics: dict[str, TopicState] = {}
    for t in obj.get("topics", []):
        name = str(t["topic"])
        parts = tuple(
            PartitionState(
                topic=name,
                partition=int(p["partition"]),
                leader=int(p["leader"]),
                replicas=tuple(int(r) for r in p["replicas"]),
                isr=tuple(int(r) for r in p["isr"]),
                offline_replicas=tuple(int(r) for r in p.get("offline_replicas", ())),
                error_code=int(p["error_code"]),
            )
            for p in sorted(t.get("partitions", []), key=lambda p: int(p["partition"]))
        )
        topics[name] = TopicState(
            name=name,
            error_code=int(t["error_code"]),
            internal=bool(t.get("is_internal", False)),
            partitions=parts,
        )
    return ClusterMetadata(
        brokers=brokers, controller_id=int(obj.get("controller_id", -1)), topics=topics
    )
