"""SASL/SCRAM over TLS against a real broker with a SASL_SSL listener.

The test makes its own CA and server certificate; the broker reads the PEM key store
directly and has SCRAM users created at storage-format time.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster, SaslSslListener
from tests.kafka.kafka_support import RELAXED
from tests.support import run_check

PASSWORD = "scram-pass-8f2e1c"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(directory: Path, label: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"alivemcp test CA {label}"))
        .issuer_name(_name(f"alivemcp test CA {label}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path = directory / f"ca-{label}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def _server_keystore(directory: Path, ca_key: Any, ca_cert: x509.Certificate) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    path = directory / "broker-keystore.pem"
    # Kafka's PEM key store: an unencrypted PKCS#8 key followed by the certificate chain.
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
        + cert.public_bytes(serialization.Encoding.PEM)
        + ca_cert.public_bytes(serialization.Encoding.PEM)
    )
    return path


@pytest.fixture(scope="module")
async def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("scram-tls")
    ca_key, ca_cert, ca_file = _ca(directory, "trusted")
    _k, _c, other_ca = _ca(directory, "other")
    listener = SaslSslListener(
        keystore_pem=_server_keystore(directory, ca_key, ca_cert),
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
        {"cluster": _conn(scram_broker, sasl_mechanism="SCRAM-SHA-256"),
         "topics": ["scram-canary"]},
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
        "kafka_canary", {"cluster": _conn(scram_broker), "topic": "plain-listener-canary",
                         **RELAXED}, timeout=30)
    assert made.status == Status.UP, made.reason
    result = await run_check(
        "kafka_partition_health",
        {"cluster": {"bootstrap_servers": scram_broker["cluster"].bootstrap},
         "topics": ["plain-listener-canary"]},
    )
    assert result.status == Status.UP, result.reason
