"""Test certificates for the local servers: a self-signed one, and a throwaway CA with a server
certificate it signed (TLS and mutual-TLS tests, the benchmark, the Kafka TLS tests).

Nothing here is trusted anywhere: a client trusts a certificate only by being given it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from alivemcp.testbed.mcp_process import ServerUnavailable

__all__ = ["LocalCa", "make_test_ca", "self_signed_cert"]


def self_signed_cert(directory: Path, days: int) -> Path:
    """A certificate for 127.0.0.1 valid for ``days`` (certificate and key in one PEM)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ServerUnavailable("openssl is not installed (needed to make a test certificate)")
    pem = directory / f"lab-{days}d.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            str(days),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(pem.with_suffix(".key")),
            "-out",
            str(pem.with_suffix(".crt")),
        ],
        check=True,
        capture_output=True,
    )
    pem.write_bytes(pem.with_suffix(".crt").read_bytes() + pem.with_suffix(".key").read_bytes())
    return pem


@dataclass(frozen=True)
class LocalCa:
    """A throwaway certificate authority and a server certificate it signed."""

    #: The CA certificate (PEM): what a client verifies the server with.
    ca_file: Path
    #: The server's certificate and key in one PEM (for ``start_server(tls_cert=...)``).
    server_pem: Path


def make_test_ca(
    directory: Path,
    *,
    days: int = 30,
    name: str = "alivemcp-test-ca",
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> LocalCa:
    """A new CA (ECDSA P-256) and a server certificate for ``hosts`` (IP addresses and DNS
    names) signed by it, valid for ``days``, written under ``directory``. Nothing is trusted
    anywhere: a client trusts it only by being given ``ca_file``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days + 1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_file = directory / f"{name}.crt"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    server_pem = directory / f"{name}-server.pem"
    server_pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return LocalCa(ca_file, server_pem)
