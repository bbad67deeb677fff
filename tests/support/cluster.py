"""Cluster test support: a three-broker Kafka with a gate a test can shut on one client.

Each broker has a second listener, ``GATED``, whose advertised address is a forwarder on
loopback (:class:`Gate`) run by the test process in a thread of its own. A client bootstrapped
through :attr:`GatedKafkaCluster.gated_bootstrap` is told only the gated addresses, so every
connection it makes goes through the gates; :meth:`GatedKafkaCluster.cut` silences them (bytes
are swallowed, new connections accepted and left hanging: a network partition between that
client and Kafka, while the other clients and the brokers among themselves carry on).

The cluster is started once per test process (session scope) with the harness's fast failure
detection (a silent broker is fenced after 3 s). Tests that pause brokers or cut the gates
resume and heal before they finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from alivemcp.engine.scheduler import Scheduler
from alivemcp.testbed.kafka import KafkaCluster, KafkaNode

if TYPE_CHECKING:
    from tests.support import DaemonProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gate:
    """A loopback TCP forwarder ``listen_port`` → ``target_port`` that can be cut and healed,
    on an event loop of its own (a test's blocking waits never stall it)."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.open = True
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name=f"gate-{listen_port}"
        )

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            while not self.open:  # cut: accepted, never answered
                if await reader.read(65536) == b"":
                    return
            up_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
            self._writers.add(upstream_writer)
            await asyncio.gather(self._pump(reader, upstream_writer), self._pump(up_reader, writer))
        except OSError:
            pass
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.open:  # cut: swallowed, like packets dropped on the way
                    writer.write(data)
                    await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self.open = False

    def heal(self) -> None:
        """Forward again. Connections that lost bytes while cut are closed (their stream is
        broken): clients reconnect, as after a real partition."""

        def reset() -> None:
            self.open = True
            for writer in list(self._writers):
                writer.close()

        self._loop.call_soon_threadsafe(reset)

    def stop(self) -> None:
        def shut() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.call_later(0.2, self._loop.stop)  # let the cancelled tasks unwind

        if self._loop.is_running():
            self._loop.call_soon_threadsafe(shut)
            self._thread.join(5)


@dataclass
class GatedKafkaCluster(KafkaCluster):
    """:class:`KafkaCluster` plus a ``GATED`` listener per broker, reached through gates."""

    gates: dict[int, Gate] = field(default_factory=dict)
    _gated_ports: dict[int, tuple[int, int]] = field(default_factory=dict)  # inner, gate

    def _properties(self, node: KafkaNode) -> str:
        props = dict(line.split("=", 1) for line in super()._properties(node).splitlines())
        inner, outer = self._gated_ports.setdefault(node.node_id, (_free_port(), _free_port()))
        props["listeners"] += f",GATED://127.0.0.1:{inner}"
        props["advertised.listeners"] += f",GATED://127.0.0.1:{outer}"
        props["listener.security.protocol.map"] += ",GATED:PLAINTEXT"
        return "".join(f"{key}={value}\n" for key, value in props.items())

    async def start(self, ready_within: float = 120.0) -> GatedKafkaCluster:
        await super().start(ready_within)
        for node_id, (inner, outer) in self._gated_ports.items():
            gate = self.gates[node_id] = Gate(outer, inner)
            gate.start()
        return self

    @property
    def gated_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{outer}" for _, outer in self._gated_ports.values())

    def cut(self) -> None:
        for gate in self.gates.values():
            gate.cut()

    def heal(self) -> None:
        for gate in self.gates.values():
            gate.heal()

    @contextlib.contextmanager
    def all_paused(self) -> Iterator[None]:
        """Every broker frozen (Kafka fully down); all resumed at the end, even on failure."""
        for node in self.nodes:
            self.pause(node.node_id)
        try:
            yield
        finally:
            for node in self.nodes:
                self.resume(node.node_id)

    def stop(self) -> None:
        for gate in self.gates.values():
            gate.stop()
        self.gates.clear()
        super().stop()


_topic_sets = iter(range(1, 1_000_000))


def cluster_section(
    bootstrap: str,
    prefix: str,
    *,
    replica: str = "",
    shards: int = 12,
    session_timeout: float = 6.0,
    heartbeat_interval: float = 1.0,
    request_timeout: float = 3.0,
    **extra: Any,
) -> dict[str, Any]:
    """A ``cluster:`` config section on topics and a group of their own (``prefix``)."""
    return {
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout": request_timeout},
        "group": f"{prefix}-group",
        "shards": shards,
        "replica_id": replica,
        "session_timeout": session_timeout,
        "heartbeat_interval": heartbeat_interval,
        "topics": {
            "results": f"{prefix}-results",
            "status_changes": f"{prefix}-changes",
            "alert_state": f"{prefix}-alerts",
        },
        **extra,
    }


def paging_replica(
    root: Path,
    name: str,
    *,
    checks: list[dict[str, Any]],
    defaults: dict[str, Any],
    receivers: list[dict[str, Any]],
    cluster: dict[str, Any],
) -> Path:
    """The config file of one replica that pages at once (no grouping waits) through
    ``receivers``, all of them by default, with its own data directory under ``root``."""
    doc = {
        "logging": {"format": "json"},
        "data_dir": str(root / f"data-{name}"),
        "defaults": defaults,
        "checks": checks,
        "alerting": {
            "group_wait": 0,
            "group_interval": 0,
            "receivers": receivers,
            "default_receivers": [r["name"] for r in receivers],
        },
        "cluster": cluster,
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def alive(daemons: Iterable[DaemonProcess]) -> list[DaemonProcess]:
    """Those of ``daemons`` whose process is running."""
    return [d for d in daemons if d.proc is not None and d.proc.poll() is None]


def unique_prefix(name: str) -> str:
    """Topics and group names no other test (or earlier run on this cluster) uses."""
    return f"{name}-{os.getpid()}-{next(_topic_sets)}"


def cluster_metric_names() -> set[str]:
    """Every sample name a cluster-mode replica adds to ``/metrics``: the cluster components
    built (not started: nothing connects) on a registry of their own and rendered."""
    from tempfile import TemporaryDirectory

    from prometheus_client import CollectorRegistry, generate_latest

    from alivemcp.alerting.config import AlertingConfig
    from alivemcp.alerting.manager import AlertManager
    from alivemcp.cluster._kafka import ClusterKafka
    from alivemcp.cluster.alert_state import AlertStateLog
    from alivemcp.cluster.config import ClusterConfig
    from alivemcp.cluster.node import ClusterNode
    from alivemcp.cluster.quorum import QuorumBoard
    from alivemcp.cluster.stream import ResultsStream
    from alivemcp.cluster.verdicts import Verdicts
    from alivemcp.cluster.view import ResultsView
    from alivemcp.engine.status import StatusStore
    from alivemcp.plumbing import Plumbing
    from tests.support.metric_names import sample_names_from_exposition

    config = ClusterConfig.model_validate(
        cluster_section("127.0.0.1:9", "metrics", replica="metrics")
    )
    registry = CollectorRegistry()
    kafka = ClusterKafka(config.kafka, Plumbing())
    store = StatusStore(replica=config.replica_id)
    with TemporaryDirectory() as tmp:
        alerts = AlertManager(AlertingConfig(), [], Path(tmp), CollectorRegistry(), shared=True)
        ResultsStream(config, kafka, registry)
        ResultsView(config, kafka, store, None, Path(tmp), registry)
        AlertStateLog(config, kafka, alerts, registry)
        ClusterNode(config, kafka, [], registry)
        ClusterNode(config, kafka, [], registry, group=config.verdict_group, role="verdict")
        board = QuorumBoard(config.location, config.freshness_intervals)
        Verdicts(board, store, None, None, lambda name: False, registry)
        return sample_names_from_exposition(generate_latest(registry).decode())


async def first_runs_planned(scheduler: Scheduler) -> None:
    """Until the scheduler has planned the first run of every check added (it does so soon
    after the add, a slice per loop turn)."""

    async def unplanned() -> int:
        return scheduler.unplanned

    from tests.support import run_until

    await run_until(unplanned, lambda left: left == 0, "first runs planned", within=5, pause=0)
