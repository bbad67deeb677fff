"""Hung brokers: the time budget of one probe run, the brokers suspected of not answering,
and the steering that keeps aiokafka's clients away from them.

A broker that accepts connections but answers nothing costs every request that reaches it a
whole request timeout, and aiokafka opens every connection of a client under one lock, so it
stalls requests to healthy brokers as well. The cluster client gives each step a slice of a
:class:`RunBudget`, records a broker that did not answer in :class:`BrokerHealth`, and steers
its clients (:class:`Steering`) to healthy brokers until the suspect answers again.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup

__all__ = [
    "BrokerHealth",
    "RunBudget",
    "Steering",
    "Suspicion",
    "broker_name",
    "inner_client",
    "seconds_text",
    "steering_of",
]


class RunBudget:
    """The time one probe run may spend on Kafka, handed out step by step.

    A broker that accepts connections but answers nothing costs every request that reaches it
    a whole request timeout. A probe makes one budget from its check's timeout
    (:meth:`for_check`) and gives each step (bootstrap, metadata, a produce, a fetch...) a slice
    of what is left, so a hung broker costs one step its slice and the run still ends with a
    verdict of its own, naming what hung, before the engine's timeout cancels it.
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.seconds = max(0.0, seconds)
        self._ends_at = clock() + self.seconds

    @classmethod
    def for_check(cls, timeout: float, *, share: float = 0.85, margin: float = 0.5) -> RunBudget:
        """Finish by ``share`` of the check's timeout and at least ``margin`` seconds before it:
        the rest is for building the verdict and for slow event loops."""
        return cls(max(0.0, min(timeout * share, timeout - margin)))

    def remaining(self) -> float:
        return max(0.0, self._ends_at - self._clock())

    def step(self, at_most: float | None = None, *, share: float = 1.0, keep: float = 0.0) -> float:
        """Seconds for the next step: ``share`` of what is left once ``keep`` seconds are set
        aside for the steps after it (if that leaves nothing, ``share`` of what is left), and
        never more than ``at_most``."""
        left = self.remaining()
        seconds = (left - keep if left > keep else left) * share
        return min(seconds, at_most) if at_most is not None else seconds


@dataclass(slots=True)
class Suspicion:
    """A broker that did not answer within its attempt, and what it did not answer."""

    address: str
    node_id: int | None
    reason: str  # e.g. "did not answer Metadata within 2s"
    since: float
    until: float

    @property
    def name(self) -> str:
        return broker_name(self.node_id, self.address)

    def describe(self) -> str:
        return f"{self.name} {self.reason}"


def broker_name(node_id: int | None, address: str | None) -> str:
    """How reasons name a broker: ``broker 2 (10.0.0.7:9092)``."""
    if node_id is None:
        return f"bootstrap server {address}"
    return f"broker {node_id} ({address})" if address else f"broker {node_id}"


class BrokerHealth:
    """Brokers that recently did not answer within their attempt ("suspects"), by address.

    A suspect is asked last, or not at all while another broker can answer, until it answers
    a re-test or ``hold`` seconds pass: one hung broker then costs one attempt, not one per
    request. (Kept by the cluster client across client rebuilds.)
    """

    def __init__(self, hold: float = 45.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold = hold
        self._clock = clock
        self._suspects: dict[str, Suspicion] = {}

    def hung(self, address: str, node_id: int | None, reason: str) -> Suspicion:
        """Record that ``address`` did not answer; a broker already suspect keeps its first
        reason (what it stopped answering) and is held longer."""
        now = self._clock()
        known = self.suspect(address)
        if known is not None:
            known.until = now + self.hold
            if node_id is not None:
                known.node_id = node_id
            return known
        suspicion = Suspicion(address, node_id, reason, now, now + self.hold)
        self._suspects[address] = suspicion
        return suspicion

    def answered(self, address: str) -> None:
        self._suspects.pop(address, None)

    def suspect(self, address: str | None) -> Suspicion | None:
        if address is None:
            return None
        suspicion = self._suspects.get(address)
        if suspicion is not None and self._clock() >= suspicion.until:
            del self._suspects[address]
            return None
        return suspicion

    def suspects(self) -> list[Suspicion]:
        """Current suspects, longest-suspected first."""
        for address in list(self._suspects):
            self.suspect(address)
        return sorted(self._suspects.values(), key=lambda s: s.since)


class Steering:
    """Makes one aiokafka client avoid suspect brokers.

    aiokafka asks a random broker for cluster-wide requests (InitProducerId, FindCoordinator,
    metadata refreshes) and opens every connection under one client-wide lock, so a broker
    that accepts TCP but never answers stalls requests to healthy brokers as well, for a whole
    request timeout. Steered, the client picks healthy brokers first and neither connects to
    nor reuses a connection to a suspect while another broker is healthy.
    """

    def __init__(
        self, client: AIOKafkaClient, health: BrokerHealth, bootstrap: Sequence[str] = ()
    ) -> None:
        self.client = client
        self.health = health
        #: The servers this client bootstraps from.
        self.bootstrap = list(bootstrap)
        #: Brokers this client is opening a connection to right now (with a count of callers).
        self.connecting: Counter[Any] = Counter()
        self._get_conn = client._get_conn
        client._get_conn = self.get_conn
        client.get_random_node = self.get_random_node
        client._alivemcp_steering = self

    def address(self, node_id: Any) -> str | None:
        broker = self.client.cluster.broker_metadata(node_id) if isinstance(node_id, int) else None
        return f"{broker.host}:{broker.port}" if broker is not None else None

    def name(self, node_id: int) -> str:
        return broker_name(node_id, self.address(node_id))

    def suspect(self, node_id: Any) -> Suspicion | None:
        return self.health.suspect(self.address(node_id))

    def nodes(self) -> list[int]:
        return [b.nodeId for b in self.client.cluster.brokers() if isinstance(b.nodeId, int)]

    def order(self, nodes: Iterable[int]) -> list[int]:
        """Healthy brokers first, in random order; suspects last, longest-suspected last."""
        healthy: list[tuple[float, int]] = []
        suspect: list[tuple[float, int]] = []
        for node_id in nodes:
            found = self.suspect(node_id)
            (suspect if found else healthy).append((-(found.since if found else 0.0), node_id))
        random.shuffle(healthy)
        return [n for _, n in healthy] + [n for _, n in sorted(suspect)]

    def skipped(self, node_id: Any) -> Suspicion | None:
        """The suspicion that keeps this broker out of use now (None when it may be used: not
        suspect, or no other broker is healthy)."""
        found = self.suspect(node_id)
        if found is None:
            return None
        others = (n for n in self.nodes() if n != node_id)
        return found if any(self.suspect(n) is None for n in others) else None

    async def get_conn(
        self,
        node_id: Any,
        *,
        group: ConnectionGroup = ConnectionGroup.DEFAULT,
        no_hint: bool = False,
    ) -> Any:
        if self.skipped(node_id) is not None:
            return None  # the caller sees "node not ready" at once, not a hung request
        self.connecting[node_id] += 1
        try:
            return await self._get_conn(node_id, group=group, no_hint=no_hint)
        finally:
            self.connecting[node_id] -= 1
            if self.connecting[node_id] <= 0:
                del self.connecting[node_id]

    def get_random_node(self) -> int | None:
        ordered = self.order(self.nodes())
        return ordered[0] if ordered else None

    def stuck(self) -> list[int]:
        """Brokers this client is waiting on right now: a connection being opened, or a
        request sent and not answered. (Meaningful for clients without long polls: the admin
        client and the producer.)"""
        nodes = {n for n in self.connecting if isinstance(n, int)}
        for (node_id, _group), conn in list(self.client._conns.items()):
            if isinstance(node_id, int) and getattr(conn, "_requests", None):
                nodes.add(node_id)
        return sorted(nodes)


def steering_of(client: Any) -> Steering | None:
    """The steering of a client the cluster client built (admin, producer, consumer), or of
    the aiokafka client inside one of the plumbing's own wrappers."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None) or client
    steering = getattr(inner, "_alivemcp_steering", None)
    return steering if isinstance(steering, Steering) else None


def inner_client(client: Any) -> AIOKafkaClient:
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    assert isinstance(inner, AIOKafkaClient)
    return inner


def seconds_text(value: float) -> str:
    return f"{round(value, 1):g}s"
