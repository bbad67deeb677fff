"""TLS of the probe client: client certificates (mTLS) against a local server that requires
one, and clear errors for files that cannot be loaded."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from alivemcp.plumbing.http import (
    ClientConfigError,
    HttpClients,
    TlsError,
    read_capped,
)
from tests.support.http_client_stand_ins import Run
from tests.support.http_servers import Authority, HttpServer


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def mtls_server(authority: Authority) -> Iterator[HttpServer]:
    with HttpServer("127.0.0.1", tls=authority.server_context(require_client_cert=True)) as s:
        yield s


async def _get(clients: HttpClients, url: str, **tls: Any) -> int:
    session = clients.probe_session(proxy="direct", **tls)
    try:
        async with session.request("GET", url, timeout=5) as response:
            await read_capped(response)
            return response.status
    finally:
        await session.aclose()


def test_a_server_requiring_a_client_certificate(
    run: Run, authority: Authority, mtls_server: HttpServer
) -> None:
    cert_file, key_file = authority.issue("probe-client", client=True)
    clients = HttpClients(environ={})
    ca = str(authority.ca_file)
    with pytest.raises(TlsError) as caught:
        run(_get(clients, mtls_server.url(), ca_file=ca))
    assert "certificate" in str(caught.value).lower(), caught.value
    assert (
        run(
            _get(
                clients,
                mtls_server.url(),
                ca_file=ca,
                cert_file=str(cert_file),
                key_file=str(key_file),
            )
        )
        == 200
    )
    assert (
        run(
            _get(
                clients,
                mtls_server.url(host="localhost"),
                ca_file=ca,
                cert_file=str(cert_file),
                key_file=str(key_file),
            )
        )
        == 200
    )


def test_a_certificate_from_another_authority_is_rejected(
    run: Run, authority: Authority, mtls_server: HttpServer, tmp_path: Path
) -> None:
    stranger = Authority(tmp_path)
    cert_file, key_file = stranger.issue("stranger", client=True)
    clients = HttpClients(environ={})
    with pytest.raises(TlsError):
        run(
            _get(
                clients,
                mtls_server.url(),
                ca_file=str(authority.ca_file),
                cert_file=str(cert_file),
                key_file=str(key_file),
            )
        )


def test_files_that_cannot_be_loaded_are_the_probers_problem(
    authority: Authority, tmp_path: Path
) -> None:
    clients = HttpClients(environ={})
    cert_file, key_file = authority.issue("c1", client=True)
    other_cert, other_key = authority.issue("c2", client=True)
    missing = tmp_path / "missing.pem"
    encrypted = tmp_path / "encrypted.key"
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(key_file.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    cases: dict[str, dict[str, Any]] = {
        "missing certificate": dict(cert_file=str(missing), key_file=str(key_file)),
        "key of another certificate": dict(cert_file=str(cert_file), key_file=str(other_key)),
        # Must not prompt for a password on the terminal (the daemon would hang).
        "encrypted key": dict(cert_file=str(cert_file), key_file=str(encrypted)),
        "missing CA": dict(ca_file=str(missing)),
        "key without certificate": dict(key_file=str(key_file)),
    }
    reasons = {}
    for case, files in cases.items():
        with pytest.raises(ClientConfigError) as caught:
            clients.ssl_context(**files)
        message = str(caught.value)
        assert message.startswith(
            ("cannot load client certificate", "cannot load CA file", "a client key file needs")
        ), (case, message)
        reasons[case] = message.rpartition(": ")[2]
    assert reasons == {
        "missing certificate": "No such file or directory",
        "key of another certificate": "the key does not belong to the certificate",
        "encrypted key": "the key is encrypted (password-protected keys are not supported)",
        "missing CA": "No such file or directory",
        "key without certificate": "a client key file needs a client certificate file",
    }
    assert other_cert.exists()


def test_contexts_are_shared_and_rebuilt_when_a_file_changes(authority: Authority) -> None:
    clients = HttpClients(environ={})
    cert_file, key_file = authority.issue("rotating", client=True)
    files: dict[str, Any] = {
        "ca_file": str(authority.ca_file),
        "cert_file": str(cert_file),
        "key_file": str(key_file),
    }
    first = clients.ssl_context(**files)
    assert clients.ssl_context(**files) is first
    assert clients.ssl_context() is clients.ssl_context()
    assert clients.ssl_context() is not first
    renewed_cert, renewed_key = authority.issue("renewed", client=True)
    cert_file.write_bytes(renewed_cert.read_bytes())
    key_file.write_bytes(renewed_key.read_bytes())
    stat = os.stat(cert_file)
    os.utime(cert_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert clients.ssl_context(**files) is not first


def test_the_session_reports_the_server_certificate_expiry(run: Run, authority: Authority) -> None:
    with HttpServer("127.0.0.1", tls=authority.server_context()) as server:
        clients = HttpClients(environ={})

        async def main() -> tuple[float | None, float | None]:
            session = clients.probe_session(proxy="direct", ca_file=str(authority.ca_file))
            try:
                async with session.request("GET", server.url(), timeout=5) as response:
                    await read_capped(response)
            finally:
                await session.aclose()
            return session.timings.cert_not_after, session.timings.tls_seconds

        not_after, tls_seconds = run(main())
    # The authority issues server certificates for one day.
    assert not_after is not None and abs(not_after - (time.time() + 86400)) < 3600
    assert tls_seconds is not None and tls_seconds > 0
