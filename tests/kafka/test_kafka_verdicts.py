"""The Kafka verdicts the README's table promises, on a real three-broker KRaft cluster with a
SASL_SSL (SCRAM) listener, at the probes' default budgets.

- The prober's own credentials refused (a wrong SCRAM password) never make the cluster
  ``down``: every Kafka probe type says ``unknown``, "cannot authenticate to the cluster".
- A hung broker (SIGSTOP: it still accepts TCP and stays registered and leading until its
  session expires) is a detail of the partition verdict, never a replacement for it: the
  verdict and the reason's first words come from the partitions (under min ISR, then
  under-replicated, naming the broker missing from each ISR), the silent broker after them.
- When the broker resumes, the first run after the ISR is full again is ``up``.

Each case asserts the status and the reason's leading words: the two regressed together once
without any test noticing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.kafka import ClusterMetadata, KafkaConnection
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster, SaslSslListener
from alivemcp.testbed.mcp_servers import make_test_ca
from tests.support import run_until
from tests.support.kafka import RELAXED, Check, unique

PASSWORD = "verdict-pass-5b7d02"
WRONG = "not-the-password-91c3"
HUNG = 2
#: Kafka's own broker session timeout: a hung broker stays registered, leading and in every
#: ISR this long (the testbed's default is shorter, for tests that only need it fenced).
SESSION_TIMEOUT_MS = 9000
HEARTBEAT_MS = 2000
#: Fencing waits for the session to expire, then a controller's turn, on a loaded machine.
FENCED_WITHIN = SESSION_TIMEOUT_MS / 1000 * 3 + 10
HEALTH_TIMEOUT = 8.0
#: Check timeouts as configured by default: partition health at a 10 s interval (min(10 s,
#: 80 % of it)) and at 5 s; the canary's and consumer lag's own defaults.
TIMEOUTS = {
    "kafka_partition_health": (8.0, 4.0),
    "kafka_canary": (30.0, 8.0),
    "kafka_consumer_lag": (30.0, 8.0),
}


@pytest.fixture(scope="module")
async def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("verdicts-tls")
    ca = make_test_ca(directory, name="verdicts")
    listener = SaslSslListener(keystore_pem=ca.server_pem, users={"prober": PASSWORD})
    cluster = await KafkaCluster(
        size=3,
        sasl_ssl=listener,
        extra_properties={
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
        },
    ).start()
    try:
        yield {"cluster": cluster, "ca_file": str(ca.ca_file)}
    finally:
        cluster.stop()


def scram(broker: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The ``cluster:`` params of a check on the SASL_SSL listener (default request timeout)."""
    cluster: KafkaCluster = broker["cluster"]
    return {
        "bootstrap_servers": cluster.sasl_ssl_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "prober",
        "password": PASSWORD,
        "ca_file": broker["ca_file"],
        **overrides,
    }


def _params(probe: str, cluster: dict[str, Any]) -> dict[str, Any]:
    if probe == "kafka_canary":
        return {"cluster": cluster, "topic": unique("auth-canary"), **RELAXED}
    if probe == "kafka_consumer_lag":
        return {"cluster": cluster, "groups": [unique("auth-group")]}
    return {"cluster": cluster}


@pytest.mark.parametrize("probe", sorted(TIMEOUTS))
async def test_wrong_password_is_unknown_on_every_kafka_probe(
    sasl_cluster: dict[str, Any], probe: str
) -> None:
    for timeout in TIMEOUTS[probe]:
        check = Check(probe, _params(probe, scram(sasl_cluster, password=WRONG)), timeout=timeout)
        try:
            # The first run bootstraps from nothing; the second finds the clients dropped.
            for run in (1, 2):
                result = await check.run()
                where = f"{probe} at {timeout:g}s, run {run}"
                assert result.status == Status.UNKNOWN, (where, result.reason)
                assert result.reason.startswith("cannot authenticate to the cluster"), (
                    where,
                    result.reason,
                )
                assert result.duration_seconds < timeout, (where, result)
                assert WRONG not in result.reason and PASSWORD not in result.reason
        finally:
            await check.close()


async def test_wrong_password_with_a_hung_broker_is_still_unknown(
    sasl_cluster: dict[str, Any],
) -> None:
    """A refused password is heard from the brokers that answer, whatever another broker
    does: a client bootstrapping from the list would reach the silent one sooner or later and
    wait there, turning the refusal into a timeout (``down``) unless the refusal ends it."""
    cluster: KafkaCluster = sasl_cluster["cluster"]
    results: list[tuple[str, CheckResult]] = []
    with cluster.paused(3):
        for probe in sorted(TIMEOUTS):
            timeout = TIMEOUTS[probe][0]
            check = Check(
                probe, _params(probe, scram(sasl_cluster, password=WRONG)), timeout=timeout
            )
            try:
                results.append((probe, await check.run()))
            finally:
                await check.close()
    for probe, result in results:
        assert result.status == Status.UNKNOWN, (probe, result.reason)
        assert result.reason.startswith("cannot authenticate to the cluster"), (
            probe,
            result.reason,
        )
        assert "refused the prober's credentials" in result.reason, (probe, result.reason)


async def _topics(cluster: KafkaCluster) -> dict[str, str]:
    """Topics placed so that broker HUNG follows two partitions, leads one, and is a replica of
    one whose min.insync.replicas is its replication factor."""
    names = {"follower": unique("follows"), "leader": unique("leads"), "strict": unique("strict")}
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
        await kc.create_topic(
            names["follower"],
            assignments={0: [1, HUNG, 3], 1: [3, HUNG, 1]},
            configs={"min.insync.replicas": "2"},
        )
        await kc.create_topic(
            names["leader"], assignments={0: [HUNG, 1, 3]}, configs={"min.insync.replicas": "2"}
        )
        await kc.create_topic(
            names["strict"], assignments={0: [1, 3, HUNG]}, configs={"min.insync.replicas": "3"}
        )
    finally:
        await plumbing.aclose()
    return names


async def _metadata(cluster: KafkaCluster, topics: list[str]) -> ClusterMetadata:
    """What the brokers say, asked on the plain listener by a client of its own."""
    plumbing = Plumbing()
    try:
        kc = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=cluster.bootstrap))
        return await kc.metadata(topics, timeout=5)
    finally:
        await plumbing.aclose()


async def _until_metadata(
    cluster: KafkaCluster, topics: list[str], done: Any, what: str, within: float
) -> None:
    # The controller changes what metadata says once per broker heartbeat at most.
    await run_until(
        lambda: _metadata(cluster, topics), done, what, within, pause=HEARTBEAT_MS / 1000 / 4
    )


#: (check, its topics, production?, status, the reason's first words) while HUNG hangs.
EXPECTED = {
    "follower": (
        ["follower"],
        False,
        Status.DEGRADED,
        f"2 under-replicated (broker {HUNG} missing from ISR)",
    ),
    "leader": (
        ["leader"],
        False,
        Status.DEGRADED,
        f"1 under-replicated (broker {HUNG} missing from ISR)",
    ),
    "production": (
        ["follower", "leader"],
        True,
        Status.DOWN,
        f"3 under-replicated (broker {HUNG} missing from ISR)",
    ),
    "strict": (["strict"], False, Status.DOWN, "1 under min ISR (acks=all producers fail)"),
}


def _assert_hung_verdict(name: str, result: CheckResult, hung_at: str, when: str) -> None:
    _topics_of, _production, status, first_words = EXPECTED[name]
    where = f"{name} check, {when}"
    assert result.status == status, (where, result.reason)
    assert result.reason.startswith(first_words), (where, result.reason)
    if hung_at in result.reason:  # the silent broker is a detail, after the partitions
        assert result.reason.index(hung_at) > len(first_words), (where, result.reason)


async def test_hung_broker_never_hides_the_partitions(sasl_cluster: dict[str, Any]) -> None:
    cluster: KafkaCluster = sasl_cluster["cluster"]
    names = await _topics(cluster)
    every = list(names.values())
    conn = scram(sasl_cluster)

    def check(name: str) -> Check:
        topics, production, _status, _words = EXPECTED[name]
        return Check(
            "kafka_partition_health",
            {"cluster": conn, "topics": [names[t] for t in topics]},
            timeout=HEALTH_TIMEOUT,
            labels={"env": "production"} if production else {},
        )

    # Kept checks (as the daemon runs them: clients and suspicions kept between runs).
    kept = {name: check(name) for name in EXPECTED}
    hung_at = f"broker {HUNG} (127.0.0.1:{cluster.node(HUNG).sasl_ssl_port})"
    try:
        for name, one in kept.items():
            await run_until(one.run, lambda r: r.status == Status.UP, f"{name} before the hang")
        with cluster.paused(HUNG):
            # Still registered, leading and listed in every ISR until its session expires:
            # the first runs see a cluster whose metadata says all is well.
            for name, one in kept.items():
                result = await one.run()
                _assert_hung_verdict(name, result, hung_at, "first run after the hang")
                assert result.details is not None
                if HUNG in result.details["brokers_alive"]:  # registered: asked, and named
                    assert hung_at in result.reason, (name, result.reason)
                assert result.duration_seconds < HEALTH_TIMEOUT, (name, result)
            for name in EXPECTED:  # a fresh process (the CLI): bootstrapping with it hung
                fresh = check(name)
                try:
                    _assert_hung_verdict(name, await fresh.run(), hung_at, "fresh, hung")
                finally:
                    await fresh.close()
            # Fenced: the controller drops it from every ISR and leadership moves.
            await _until_metadata(
                cluster,
                every,
                lambda m: HUNG not in m.brokers,
                "the hung broker fenced",
                within=FENCED_WITHIN,
            )
            for name, one in kept.items():
                _assert_hung_verdict(name, await one.run(), hung_at, "after fencing")
        await _until_metadata(
            cluster,
            every,
            lambda m: all(
                len(p.isr) == len(p.replicas) for t in m.topics.values() for p in t.partitions
            ),
            "every ISR full after resume",
            within=FENCED_WITHIN + 60,
        )
        for name, one in kept.items():
            # Full in the metadata the test read; the broker a probe asks may learn of it a
            # moment later (each broker's metadata cache follows the controller's log), and
            # until then under-replicated is what that broker truthfully says: never down.
            seen: list[Status] = []

            async def run(one: Check = one, seen: list[Status] = seen) -> CheckResult:
                result = await one.run()
                seen.append(result.status)
                return result

            await run_until(run, lambda r: r.status == Status.UP, f"{name} after the ISR is full")
            assert set(seen) <= {Status.UP, Status.DEGRADED}, (name, seen)
    finally:
        for one in kept.values():
            await one.close()
