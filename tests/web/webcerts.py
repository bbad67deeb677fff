"""Throwaway certificates for the web config tests: a CA, server certificates it signs (one per
rotation, each with its own serial) and client certificates with chosen SANs.

Nothing here is trusted anywhere: a client trusts a certificate only by being given the CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    serial: int


class TestCa:
    """A CA (ECDSA P-256) writing what it signs under ``directory``."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, directory: Path, name: str = "alivemcp-web-test-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / f"{name}.crt"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        *,
        sans: tuple[str, ...] = ("127.0.0.1", "localhost"),
        client: bool = False,
        cert_path: Path | None = None,
        key_path: Path | None = None,
    ) -> Issued:
        """A certificate for ``sans`` (IP addresses, DNS names, ``uri:...``) signed by this CA,
        written to ``cert_path``/``key_path`` (default: ``stem``.crt/.key in the directory)."""
        names: list[x509.GeneralName] = []
        for san in sans:
            if san.startswith("uri:"):
                names.append(x509.UniformResourceIdentifier(san[4:]))
                continue
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                names.append(x509.DNSName(san))
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        cert_path = cert_path or self.directory / f"{stem}.crt"
        key_path = key_path or self.directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return Issued(cert_path, key_path, serial)


def serial_of(der: bytes) -> int:
    """The serial number of a DER certificate (what a TLS client was shown)."""
    return x509.load_der_x509_certificate(der).serial_number
