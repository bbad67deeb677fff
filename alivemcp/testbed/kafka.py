"""Real Apache Kafka (KRaft) brokers on loopback, run from Maven Central jars.

No tarball: one Maven dependency (``kafka_2.13``) plus a log4j2 backend is the broker's whole
runtime classpath. :func:`fetch_kafka_libs` copies it into a cache folder once;
:class:`KafkaCluster` formats storage and starts N combined broker+controller JVMs tuned for a
small shared machine and fast failure detection (a paused broker is fenced within seconds).

``python -m alivemcp.testbed.kafka fetch`` fills the cache (``make deps`` runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "KAFKA_VERSION",
    "LOG4J_VERSION",
    "KafkaCluster",
    "KafkaHarnessError",
    "KafkaNode",
    "SaslSslListener",
    "default_libs_dir",
    "fetch_kafka_libs",
    "java_available",
]

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"
REPO = Path(__file__).resolve().parents[2]
LIBS_ENV = "ALIVEMCP_KAFKA_LIBS"
_STAMP = ".alivemcp-kafka-libs"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>alivemcp.testbed</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
      <version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{LOG4J_VERSION}</version></dependency>
    <!-- Kafka's runtime brings slf4j-api 1.7, so the binding is the 1.x one. -->
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""

# WARN keeps the brokers quiet (and cheap) while startup errors still reach the node's log.
_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


class KafkaHarnessError(RuntimeError):
    """Java or Maven is missing, the jars could not be fetched, or a broker would not start."""


def java_available() -> bool:
    return shutil.which("java") is not None


def default_libs_dir() -> Path:
    override = os.environ.get(LIBS_ENV)
    return Path(override) if override else REPO / ".cache" / "kafka" / "lib"


def fetch_kafka_libs(dest: Path | None = None, *, timeout: float = 900) -> Path:
    """Copy the broker's runtime classpath into ``dest`` (once; a stamp marks completion)."""
    dest = dest or default_libs_dir()
    stamp = dest / _STAMP
    wanted = f"kafka_2.13 {KAFKA_VERSION} log4j-slf4j-impl {LOG4J_VERSION}\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaHarnessError(
            "Maven (`mvn`) is needed once to fetch the Kafka broker jars from Maven Central; "
            f"install it (apt-get install maven) or point {LIBS_ENV} at a filled folder"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("*.jar"):  # a different version set: never mix two classpaths
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="alivemcp-kafka-pom-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={dest}",
            "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise KafkaHarnessError(f"mvn did not finish within {timeout:g}s") from exc
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise KafkaHarnessError(
            f"mvn failed to fetch the Kafka jars (rc {proc.returncode}):\n{tail}"
        )
    if not any(dest.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
        raise KafkaHarnessError(f"mvn ran but {dest} has no kafka_2.13-{KAFKA_VERSION}.jar")
    stamp.write_text(wanted)
    return dest


#: Start-ups tried when a node finds its port taken (see KafkaCluster.start).
_START_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _cluster_id() -> str:
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):  # the storage tool would read it as an option
            return value


def _until_every_thread(pid: int, *, stopped: bool, within: float = 10.0) -> None:
    """Until the kernel reports every thread of ``pid`` stopped (or none stopped): a signal
    is queued when ``kill`` returns, and a test must not send its first request to a broker
    that may still be answering. Linux's /proc; elsewhere, or once the process is gone, no
    wait."""
    deadline = time.monotonic() + within
    while True:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            return
        states = []
        for task in tasks:
            with contextlib.suppress(OSError, IndexError):  # a thread that ended meanwhile
                states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
        # (A thread ending as it is stopped is neither: Z or X, and counts as done.)
        if all(state in "ZX" or (state in "Tt") == stopped for state in states):
            return
        if time.monotonic() > deadline:
            raise KafkaHarnessError(
                f"process {pid}: threads not {'stopped' if stopped else 'running'} within "
                f"{within:g}s of the signal: {sorted(set(states))}"
            )
        time.sleep(0.005)  # why: the kernel offers no event for a group stop's completion


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the broker gets SIGKILL when the process that started it dies, so a crashed
    test run never leaves JVMs behind on a shared machine."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class SaslSslListener:
    """An extra SASL_SSL listener with SCRAM users, for authenticated-client tests.

    ``keystore_pem`` holds the server's unencrypted PKCS#8 private key followed by its
    certificate chain (Kafka reads PEM key stores directly).
    """

    keystore_pem: Path
    users: Mapping[str, str]
    mechanisms: Sequence[str] = ("SCRAM-SHA-512", "SCRAM-SHA-256")


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    sasl_ssl_port: int | None
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


@dataclass
class KafkaCluster:
    """N combined broker+controller nodes (ids 1..N) on free loopback ports."""

    size: int = 1
    libs_dir: Path | None = None
    heap: str = "384m"
    sasl_ssl: SaslSslListener | None = None
    extra_properties: Mapping[str, str] = field(default_factory=dict)
    nodes: list[KafkaNode] = field(default_factory=list)
    workdir: Path | None = None
    _own_workdir: bool = False
    #: The id its storage was formatted with: readiness asks the answering broker for it.
    cluster_id: str = ""

    # -- addresses ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        if self.sasl_ssl is None:
            raise KafkaHarnessError("cluster was started without a SASL_SSL listener")
        return ",".join(f"127.0.0.1:{n.sasl_ssl_port}" for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id}")

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, ready_within: float = 120.0) -> KafkaCluster:
        """Format storage, start every node, and wait until the cluster reports all brokers."""
        if not java_available():
            raise KafkaHarnessError(
                "Java 17+ (`java` on PATH) is required to run the local Kafka broker"
            )
        libs = self.libs_dir or default_libs_dir()
        if not (libs / _STAMP).exists():
            libs = await asyncio.to_thread(fetch_kafka_libs, libs)
        self.libs_dir = libs
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="alivemcp-kafka-"))
            self._own_workdir = True
        atexit.register(self.stop)
        try:
            for attempt in range(1, _START_ATTEMPTS + 1):
                self._plan_nodes()
                await asyncio.to_thread(self._format_all)
                for node in self.nodes:
                    self._launch(node)
                try:
                    await self._wait_ready(ready_within)
                except KafkaHarnessError as exc:
                    # A port picked free was taken before the JVM bound it (by another
                    # process's broker or connection): new ports, new storage, once more.
                    if "Address already in use" not in str(exc) or attempt == _START_ATTEMPTS:
                        raise
                    self._kill_nodes()
                    for node in self.nodes:
                        shutil.rmtree(node.directory, ignore_errors=True)
                    continue
                break
        except BaseException:
            self.stop()
            raise
        return self

    def _plan_nodes(self) -> None:
        assert self.workdir is not None
        self.nodes = []
        for node_id in range(1, self.size + 1):
            directory = self.workdir / f"node{node_id}"
            (directory / "data").mkdir(parents=True, exist_ok=True)
            self.nodes.append(
                KafkaNode(
                    node_id=node_id,
                    port=_free_port(),
                    controller_port=_free_port(),
                    sasl_ssl_port=_free_port() if self.sasl_ssl else None,
                    directory=directory,
                )
            )
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        for node in self.nodes:
            node.properties_file.write_text(self._properties(node))

    def _properties(self, node: KafkaNode) -> str:
        n = self.size
        replication = min(3, n)
        min_isr = 2 if n >= 3 else 1
        voters = ",".join(f"{x.node_id}@127.0.0.1:{x.controller_port}" for x in self.nodes)
        listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
        advertised = list(listeners)
        protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.directory / "data"),
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.replica.fetchers": "1",
            "background.threads": "2",
            "log.cleaner.threads": "1",
            "num.recovery.threads.per.data.dir": "1",
            "offsets.topic.num.partitions": "3",
            "offsets.topic.replication.factor": str(replication),
            "transaction.state.log.num.partitions": "3",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(replication),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "default.replication.factor": str(replication),
            "min.insync.replicas": str(min_isr),
            # Fast failure detection: a paused broker is fenced and drops out of ISR in seconds.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "5000",
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
        }
        if self.sasl_ssl is not None:
            sasl_url = f"SASL_SSL://127.0.0.1:{node.sasl_ssl_port}"
            listeners.append(sasl_url)
            advertised.append(sasl_url)
            protocol_map.append("SASL_SSL:SASL_SSL")
            mechanisms = list(self.sasl_ssl.mechanisms)
            props["sasl.enabled.mechanisms"] = ",".join(mechanisms)
            props["listener.name.sasl_ssl.ssl.keystore.type"] = "PEM"
            props["listener.name.sasl_ssl.ssl.keystore.location"] = str(self.sasl_ssl.keystore_pem)
            for mechanism in mechanisms:
                props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        props["listeners"] = ",".join(listeners)
        props["advertised.listeners"] = ",".join(advertised)
        props["listener.security.protocol.map"] = ",".join(protocol_map)
        props.update(self.extra_properties)
        return "".join(f"{key}={value}\n" for key, value in props.items())

    def _java(self, main: str, *args: str) -> list[str]:
        assert self.libs_dir is not None and self.workdir is not None
        return [
            "java",
            "-Xms64m",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir}",
            "-cp",
            f"{self.libs_dir}/*",
            main,
            *args,
        ]

    def _format_all(self) -> None:
        cluster_id = self.cluster_id = _cluster_id()
        scram: list[str] = []
        if self.sasl_ssl is not None:
            for mechanism in self.sasl_ssl.mechanisms:
                for user, password in self.sasl_ssl.users.items():
                    scram += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        procs = []
        for node in self.nodes:
            cmd = self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(node.properties_file),
                *scram,
            )
            out = (node.directory / "format.log").open("wb")
            procs.append((node, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), out))
        failures = []
        for node, proc, out in procs:
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            out.close()
            if rc != 0:
                log = (node.directory / "format.log").read_text(errors="replace")[-3000:]
                failures.append(f"node {node.node_id} (rc {rc}):\n{log}")
        if failures:
            raise KafkaHarnessError("formatting Kafka storage failed: " + "\n".join(failures))

    def _launch(self, node: KafkaNode) -> None:
        cmd = self._java("kafka.Kafka", str(node.properties_file))
        out = node.log_file.open("ab")
        on_main_thread = threading.current_thread() is threading.main_thread()
        node.process = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if on_main_thread else None,
        )
        out.close()
        node.paused = False

    async def _wait_ready(self, ready_within: float) -> None:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.errors import KafkaError

        deadline = time.monotonic() + ready_within
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            for node in self.nodes:
                assert node.process is not None
                if node.process.poll() is not None:
                    raise KafkaHarnessError(
                        f"Kafka node {node.node_id} exited with {node.process.returncode} "
                        f"during startup; log {node.log_file}:\n{node.log_tail()}"
                    )
            if not all(_listening(node.port) for node in self.nodes):
                last_error = "listeners not open yet"
                await asyncio.sleep(0.3)
                continue
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
            try:
                await admin.start()
                info = await admin.describe_cluster()
                brokers = {b["node_id"] for b in info.get("brokers", [])}
                if info.get("cluster_id") != self.cluster_id:
                    # Another Kafka owns a port picked as free (another test process's): its
                    # answer must not pass for this cluster's. This one's node then fails to
                    # bind and exits, which the check above reports.
                    last_error = (
                        f"a Kafka of another cluster ({info.get('cluster_id')}) "
                        f"answers on {self.bootstrap}"
                    )
                elif len(brokers) >= self.size and info.get("controller_id", -1) >= 0:
                    return
                else:
                    last_error = f"{len(brokers)} of {self.size} brokers registered"
            except (TimeoutError, KafkaError, OSError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            finally:
                await admin.close()
            await asyncio.sleep(0.5)
        tails = "\n".join(
            f"--- node {n.node_id} ({n.log_file}):\n{n.log_tail(1500)}" for n in self.nodes
        )
        raise KafkaHarnessError(
            f"Kafka cluster of {self.size} not ready after {ready_within:g}s "
            f"({last_error})\n{tails}"
        )

    def pause(self, node_id: int) -> None:
        """Freeze a node (SIGSTOP): sockets stay open but nothing answers, like a hung broker."""
        node = self.node(node_id)
        assert node.process is not None
        if node.process.poll() is not None:
            # Not yet reaped, an exited node's pid takes the signal without an error: the
            # test would go on against a broker that was never paused.
            raise KafkaHarnessError(
                f"Kafka node {node_id} exited with {node.process.returncode} before it could "
                f"be paused; log {node.log_file}:\n{node.log_tail()}"
            )
        os.kill(node.process.pid, signal.SIGSTOP)
        _until_every_thread(node.process.pid, stopped=True)
        node.paused = True

    def resume(self, node_id: int) -> None:
        node = self.node(node_id)
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGCONT)
        _until_every_thread(node.process.pid, stopped=False)
        node.paused = False

    @contextlib.contextmanager
    def paused(self, node_id: int) -> Iterator[None]:
        """Freeze one node for the duration of the block; it is resumed even on failure."""
        self.pause(node_id)
        try:
            yield
        finally:
            self.resume(node_id)

    def stop(self) -> None:
        """Kill every node and remove the storage. Safe to call more than once."""
        self._kill_nodes()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _kill_nodes(self) -> None:
        for node in self.nodes:
            proc = node.process
            if proc is None:
                continue
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            node.process = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alivemcp.testbed.kafka")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="copy the Kafka broker jars from Maven Central")
    fetch.add_argument("--dest", type=Path, default=None, help=f"default: ${LIBS_ENV} or .cache")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        try:
            dest = fetch_kafka_libs(args.dest)
        except KafkaHarnessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"Kafka {KAFKA_VERSION} jars in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
