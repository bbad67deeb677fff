"""SASL/SCRAM over TLS against a real broker with a SASL_SSL listener.

The test makes its own CA and server certificate; the broker reads the PEM key store
directly and has SCRAM users created at storage-format time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster, SaslSslListener
from alivemcp.testbed.mcp_servers import make_test_ca
from tests.support import run_check
from tests.support.kafka import RELAXED

PASSWORD = "scram-pass-8f2e1c"


@pytest.fixture(scope="module")
async def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("scram-tls")
    trusted = make_test_ca(directory, name="trusted")
    ca_file, other_ca = trusted.ca_file, make_test_ca(directory, name="other").ca_file
    listener = SaslSslListener(
        keystore_pem=trusted.server_pem,
        users={"prober": PASSWORD},
    )
    cluster = await KafkaCluster(size=1, sasl_ssl=listener).start()
    try:
        yield {"cluster": cluster, "ca_file": str(ca_file), "other_ca": str(other_ca)}
    finally:
        cluster.stop()


def _conn(broker: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": broker["cluster"].sasl_ssl_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "prober",
        "password": PASSWORD,
        "ca_file": broker["ca_file"],
        "request_timeout": 5,
        **overrides,
    }


async def test_probes_work_over_scram_and_tls(scram_broker: dict[str, Any]) -> None:
    canary = await run_check(
        "kafka_canary", {"cluster": _conn(scram_broker), "topic": "scram-canary", **RELAXED}
    )
    assert canary.status == Status.UP, canary.reason

    health = await run_check(
        "kafka_partition_health",
        {
            "cluster": _conn(scram_broker, sasl_mechanism="SCRAM-SHA-256"),
            "topics": ["scram-canary"],
        },
    )
    assert health.status == Status.UP, health.reason
    assert health.observations["partitions"] == 1


async def test_wrong_password_is_unknown_and_not_shown(scram_broker: dict[str, Any]) -> None:
    wrong = "wrong-pass-4d1a"
    result = await run_check(
        "kafka_partition_health",
        {"cluster": _conn(scram_broker, password=wrong)},
        timeout=30,
    )
    assert result.status == Status.UNKNOWN, result.reason
    assert "cannot authenticate" in result.reason
    assert wrong not in result.reason and PASSWORD not in result.reason


async def test_untrusted_certificate_is_reported(scram_broker: dict[str, Any]) -> None:
    result = await run_check(
        "kafka_partition_health",
        {"cluster": _conn(scram_broker, ca_file=scram_broker["other_ca"])},
        timeout=30,
    )
    assert result.status == Status.DOWN, result.reason
    assert "CERTIFICATE_VERIFY_FAILED" in result.reason or "certificate" in result.reason.lower()


async def test_plaintext_listener_still_serves_plain_clients(
    scram_broker: dict[str, Any],
) -> None:
    # The topic is made here, over SCRAM and TLS, so the test does not depend on another
    # test having run first on the same broker.
    made = await run_check(
        "kafka_canary",
        {"cluster": _conn(scram_broker), "topic": "plain-listener-canary", **RELAXED},
        timeout=30,
    )
    assert made.status == Status.UP, made.reason
    result = await run_check(
        "kafka_partition_health",
        {
            "cluster": {"bootstrap_servers": scram_broker["cluster"].bootstrap},
            "topics": ["plain-listener-canary"],
        },
    )
    assert result.status == Status.UP, result.reason
