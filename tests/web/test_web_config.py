"""The web config file (exporter-toolkit's format): what is accepted, what is refused and how
the refusal names the field; public paths; basic-auth parsing and the password check's cache
and bounds; the watcher keeping the old version when a new one is broken.

The cases follow exporter-toolkit's own (``web/tls_config_test.go`` and its testdata): the
same files must load, or fail for the same reason, here.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import structlog
import yaml
from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from alivemcp.config.model import ServerConfig
from alivemcp.web import auth
from alivemcp.web.auth import PasswordCheck, PublicPaths, parse_basic
from alivemcp.web.webconfig import (
    WebConfig,
    WebConfigError,
    WebConfigWatcher,
    load_web_config,
    web_config_path,
)
from alivemcp.web.webtls import GO_CIPHER_SUITES
from tests.web.webcerts import TestCa

#: Go's tls.CipherSuites() (go1.26), the names exporter-toolkit accepts.
GO_SECURE_SUITES = {
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
}
HASH_FOR_ALICE = bcrypt.hashpw(b"alice-password", bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    ca = TestCa(tmp_path_factory.mktemp("webcerts"))
    ca.issue("server")
    ca.issue("other")
    return ca


def write(path: Path, doc: Any) -> Path:
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def tls_doc(certs: TestCa, **extra: Any) -> dict[str, Any]:
    return {
        "tls_server_config": {
            "cert_file": str(certs.directory / "server.crt"),
            "key_file": str(certs.directory / "server.key"),
            **extra,
        }
    }


def refusal(path: Path) -> str:
    with pytest.raises(WebConfigError) as caught:
        load_web_config(path)
    assert caught.value.source == str(path)
    return "\n".join(caught.value.errors)


# -- loading -----------------------------------------------------------------------------------


def test_no_file_and_an_empty_file_serve_plain_and_open(tmp_path: Path) -> None:
    assert load_web_config(None) == WebConfig()
    empty = load_web_config(write(tmp_path / "web.yml", ""))
    assert empty.tls is None and not empty.users and not empty.headers
    assert empty.watched == (tmp_path / "web.yml",)


def test_tls_and_users_load_with_paths_relative_to_the_file(certs: TestCa) -> None:
    path = write(
        certs.directory / "web.yml",
        {
            "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
            "basic_auth_users": {"alice": HASH_FOR_ALICE},
        },
    )
    config = load_web_config(path)
    assert config.tls is not None
    assert config.tls.verify_mode == ssl.CERT_NONE
    assert config.tls.minimum_version == ssl.TLSVersion.TLSv1_2
    assert config.tls.maximum_version == ssl.TLSVersion.TLSv1_3
    assert config.users == {"alice": HASH_FOR_ALICE.encode()}
    # An unknown name is checked against a decoy hash of the users' cost (here 4).
    assert config.decoy_hash.startswith(b"$2b$04$")
    assert config.watched == (path, certs.directory / "server.crt", certs.directory / "server.key")
    assert config.describe() == {
        "web_config": str(path),
        "tls": True,
        "client_certificates": "none",
        "basic_auth_users": 1,
    }


def test_unknown_keys_are_refused_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", {"tls_server_config": {"cert_filse": "server.crt"}})
    assert refusal(path) == (
        "tls_server_config.cert_filse: unknown field; did you mean 'cert_file'?"
    )
    path = write(tmp_path / "web.yml", {"tls_config": {}})
    assert refusal(path).startswith("tls_config: unknown field")


def test_yaml_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    assert "a mapping is needed" in refusal(write(tmp_path / "web.yml", "- a\n- b\n"))
    assert ":1:" in refusal(write(tmp_path / "web.yml", "tls_server_config: [\n"))


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            {"key_file": "server.key"},
            "tls_server_config.cert_file: missing one of cert or cert_file",
        ),
        ({"cert_file": "server.crt"}, "tls_server_config.key_file: missing one of key or key_file"),
        (
            {"cert_file": "nope.crt", "key_file": "server.key"},
            "tls_server_config.cert_file: cannot read",
        ),
        (
            {"cert_file": "server.crt", "key_file": "nope.key"},
            "tls_server_config.key_file: cannot read",
        ),
        (
            {"cert_file": "server.crt", "key_file": "other.key"},
            "tls_server_config.cert_file: cannot load the certificate and key: the key does not "
            "match the certificate",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "client_ca_file": "server.crt"},
            "tls_server_config.client_auth_type: client CAs are configured without a client "
            "auth policy",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "client_auth_type": "Always"},
            "tls_server_config.client_auth_type: invalid ClientAuth 'Always'",
        ),
        (
            {
                "cert_file": "server.crt",
                "key_file": "server.key",
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": "missing-ca.crt",
            },
            "tls_server_config.client_ca_file: cannot read",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "min_version": "TLS14"},
            "tls_server_config.min_version: unknown TLS version 'TLS14'",
        ),
        (
            {
                "cert_file": "server.crt",
                "key_file": "server.key",
                "min_version": "TLS13",
                "max_version": "TLS12",
            },
            "tls_server_config.min_version: TLS13 is above max_version TLS12",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "cipher_suites": ["TLS_NOPE"]},
            "tls_server_config.cipher_suites: unknown cipher 'TLS_NOPE'",
        ),
        (  # Go's insecure suites are not in tls.CipherSuites(): unknown there, unknown here
            {
                "cert_file": "server.crt",
                "key_file": "server.key",
                "cipher_suites": ["TLS_RSA_WITH_3DES_EDE_CBC_SHA"],
            },
            "tls_server_config.cipher_suites: unknown cipher 'TLS_RSA_WITH_3DES_EDE_CBC_SHA'",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "curve_preferences": ["P1"]},
            "tls_server_config.curve_preferences: unknown curve 'P1'",
        ),
        (
            {
                "cert_file": "server.crt",
                "key_file": "server.key",
                "curve_preferences": ["X25519", "CurveP256"],
            },
            "tls_server_config.curve_preferences: alivemcp can set one curve",
        ),
        (
            {"cert_file": "server.crt", "key_file": "server.key", "client_allowed_sans": ["x"]},
            "tls_server_config.client_allowed_sans: set, but client_auth_type asks for no "
            "certificate",
        ),
        (
            {"cert": "-----BEGIN CERTIFICATE-----", "cert_file": "server.crt"},
            "tls_server_config.cert: use cert or cert_file, not both",
        ),
    ],
)
def test_tls_problems_name_the_field(certs: TestCa, section: dict[str, Any], expected: str) -> None:
    path = write(certs.directory / "bad.yml", {"tls_server_config": section})
    assert refusal(path).startswith(expected)


def test_an_encrypted_key_is_refused_without_prompting(certs: TestCa) -> None:
    key = serialization.load_pem_private_key((certs.directory / "server.key").read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    (certs.directory / "encrypted.key").write_bytes(encrypted)
    path = write(
        certs.directory / "bad.yml",
        {"tls_server_config": {"cert_file": "server.crt", "key_file": "encrypted.key"}},
    )
    assert refusal(path) == (
        "tls_server_config.key_file: the key is encrypted: a key without a passphrase is needed"
    )


def test_inline_certificate_key_and_client_ca_load(certs: TestCa, tmp_path: Path) -> None:
    folder = certs.directory
    path = write(
        tmp_path / "web.yml",
        {
            "tls_server_config": {
                "cert": (folder / "server.crt").read_text(),
                "key": (folder / "server.key").read_text(),
                "client_ca": certs.ca_file.read_text(),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_allowed_sans": ["prometheus", "10.0.0.1", "2001:DB8:0:0:0:0:0:1"],
            }
        },
    )
    config = load_web_config(path)
    assert config.tls is not None
    assert config.tls.verify_mode == ssl.CERT_REQUIRED
    assert config.tls.context.cert_store_stats()["x509_ca"] == 1
    # IP addresses compared in one spelling (Python shows IPv6 SANs written out in full).
    assert config.tls.allowed_sans == {"prometheus", "10.0.0.1", "2001:db8::1"}
    assert config.watched == (path,)  # nothing else to watch
    assert "client_allowed_sans" not in repr(config)  # (and no key in any repr)
    assert "BEGIN" not in repr(config)


def test_client_auth_types_map_to_what_python_verifies(certs: TestCa) -> None:
    modes = {}
    for kind in (
        "NoClientCert",
        "RequestClientCert",
        "VerifyClientCertIfGiven",
        "RequireAnyClientCert",
        "RequireAndVerifyClientCert",
    ):
        extra = {"client_auth_type": kind}
        if kind != "NoClientCert":
            extra["client_ca_file"] = str(certs.ca_file)
        config = load_web_config(write(certs.directory / "web.yml", tls_doc(certs, **extra)))
        assert config.tls is not None
        modes[kind] = (config.tls.verify_mode, config.notes)
    assert modes["NoClientCert"] == (ssl.CERT_NONE, ())
    assert modes["VerifyClientCertIfGiven"] == (ssl.CERT_OPTIONAL, ())
    assert modes["RequireAndVerifyClientCert"] == (ssl.CERT_REQUIRED, ())
    # Python verifies every certificate it is given: said, not hidden.
    assert modes["RequestClientCert"][0] == ssl.CERT_OPTIONAL
    assert "served as VerifyClientCertIfGiven" in modes["RequestClientCert"][1][0]
    assert modes["RequireAnyClientCert"][0] == ssl.CERT_REQUIRED
    assert "served as RequireAndVerifyClientCert" in modes["RequireAnyClientCert"][1][0]


def test_every_go_cipher_suite_maps_to_one_this_openssl_has(certs: TestCa) -> None:
    assert set(GO_CIPHER_SUITES) == GO_SECURE_SUITES
    for go_name, openssl_name in GO_CIPHER_SUITES.items():
        if openssl_name is None:
            assert go_name.startswith("TLS_AES_") or go_name.startswith("TLS_CHACHA20_")
            continue
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_ciphers(openssl_name)
        tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] != "TLSv1.3"]
        assert tls12 == [openssl_name], go_name
    # exporter-toolkit's web_config_noAuth_allCiphers.good.yml, in its order.
    config = load_web_config(
        write(
            certs.directory / "web.yml",
            tls_doc(certs, cipher_suites=sorted(GO_SECURE_SUITES), curve_preferences=["X25519"]),
        )
    )
    assert config.tls is not None
    assert config.tls.curve == "X25519"


def test_headers_follow_exporter_toolkit(tmp_path: Path) -> None:
    good = {
        "http_server_config": {
            "headers": {
                "X-Frame-Options": "deny",
                "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
                "X-Content-Type-Options": "nosniff",
                "X-XSS-Protection": 1,  # a number in YAML: text to Go's map[string]string
                "Content-Security-Policy": "default-src 'self' *.test.example.net",
            }
        }
    }
    config = load_web_config(write(tmp_path / "web.yml", good))
    assert config.headers["X-XSS-Protection"] == "1"
    assert config.tls is None
    bad_name = {"http_server_config": {"headers": {"Server": "x"}}}
    assert refusal(write(tmp_path / "web.yml", bad_name)).startswith(
        "http_server_config.headers: HTTP header 'Server' can not be configured"
    )
    bad_value = {"http_server_config": {"headers": {"X-Frame-Options": "allow"}}}
    assert "invalid value for X-Frame-Options" in refusal(write(tmp_path / "web.yml", bad_value))
    http2_off = {"http_server_config": {"http2": False}}
    assert load_web_config(write(tmp_path / "web.yml", http2_off)).headers == {}


def test_users_need_bcrypt_hashes_and_the_refusal_does_not_echo_them(tmp_path: Path) -> None:
    path = write(tmp_path / "web.yml", {"basic_auth_users": {"bob": "hunter2-plaintext"}})
    message = refusal(path)
    assert message.startswith("basic_auth_users: user 'bob': not a bcrypt hash")
    assert "hunter2" not in message
    hashed = {"basic_auth_users": {"alice": HASH_FOR_ALICE, "carol": HASH_FOR_ALICE[:-1]}}
    assert "user 'carol'" in refusal(write(tmp_path / "web.yml", hashed))


def test_what_alivemcp_cannot_serve_is_refused_not_ignored(certs: TestCa) -> None:
    path = write(certs.directory / "web.yml", {"rate_limit": {"interval": "1s", "burst": 5}})
    assert refusal(path).startswith("rate_limit: alivemcp does not rate-limit requests")
    off = write(certs.directory / "web.yml", {"rate_limit": {"interval": 0, "burst": 0}})
    assert load_web_config(off).tls is None
    sans = write(certs.directory / "web.yml", {"tls_server_config": {"client_allowed_sans": []}})
    assert refusal(sans) == "tls_server_config.client_allowed_sans: set, but TLS is not configured"


def test_the_flag_wins_over_the_config_value(tmp_path: Path) -> None:
    assert web_config_path(None, None, tmp_path) is None
    assert web_config_path(None, "web.yml", tmp_path) == tmp_path / "web.yml"
    assert web_config_path(Path("flag.yml"), "web.yml", tmp_path) == Path("flag.yml")


def test_server_config_keys() -> None:
    server = ServerConfig.model_validate(
        {"web_config_file": "web.yml", "public_paths": ["/", "/badge/"]}
    )
    assert server.public_paths == ["/", "/badge/"]
    with pytest.raises(ValidationError, match="public paths start with /"):
        ServerConfig.model_validate({"public_paths": ["badge/"]})
    assert ServerConfig().public_paths == [] and ServerConfig().web_config_file is None


# -- public paths and credentials -------------------------------------------------------------


def test_public_paths() -> None:
    public = PublicPaths(["/", "/badge/", "/api/v1/checks"])
    assert public.covers("/")
    assert not public.covers("/status")  # "/" is the status page alone
    assert public.covers("/badge/x/status.svg")
    assert not public.covers("/badge")  # the prefix is "/badge/"
    assert public.covers("/api/v1/checks")
    assert not public.covers("/api/v1/checks/x/uptime")  # no trailing "/": one path
    assert not public.covers("/metrics")
    assert not public.covers("/badge/../status")  # never public with a dot segment
    assert not public.covers("/badge/./x")
    for always in ("/healthz", "/readyz"):
        assert PublicPaths().covers(always)
    assert not PublicPaths().covers("/")


def test_basic_header_parsing_follows_go() -> None:
    def header(raw: bytes, scheme: str = "Basic") -> str:
        return f"{scheme} " + base64.b64encode(raw).decode()

    assert parse_basic(header(b"alice:pa:ss")) == (b"alice", b"pa:ss")
    assert parse_basic(header(b"alice:", scheme="basic")) == (b"alice", b"")
    assert parse_basic(header(b"no-colon")) is None
    assert parse_basic(header(b"a:b", scheme="Bearer")) is None
    assert parse_basic("Basic !!!not-base64") is None


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_password_check_reasons_and_the_success_cache(tmp_path: Path) -> None:
    config = load_web_config(
        write(tmp_path / "web.yml", {"basic_auth_users": {"alice": HASH_FOR_ALICE}})
    )
    registry = CollectorRegistry()
    check = PasswordCheck(auth.AuthMetrics(registry))

    def bcrypt_runs() -> float:
        return registry.get_sample_value("alivemcp_http_auth_bcrypt_checks_total") or 0.0

    assert await check.refusal(None, config) == "missing"
    assert await check.refusal("Basic ???", config) == "malformed"
    assert await check.refusal(_basic("alice", "wrong"), config) == "wrong_password"
    assert await check.refusal(_basic("mallory", "x"), config) == "unknown_user"
    assert bcrypt_runs() == 2  # an unknown name costs a bcrypt too (the decoy)
    assert await check.refusal(_basic("alice", "x" * 100), config) == "wrong_password"
    for _ in range(5):  # a scraper every 15 s: one bcrypt in all
        assert await check.refusal(_basic("alice", "alice-password"), config) is None
    assert bcrypt_runs() == 4
    # Failures are not remembered: each costs a check (bounded by the semaphore).
    assert await check.refusal(_basic("alice", "wrong"), config) == "wrong_password"
    assert bcrypt_runs() == 5
    # A new hash for alice in the file: the remembered pair no longer counts.
    other = bcrypt.hashpw(b"new-password", bcrypt.gensalt(rounds=4))
    changed = WebConfig(users={"alice": other}, decoy_hash=config.decoy_hash)
    assert await check.refusal(_basic("alice", "alice-password"), changed) == "wrong_password"


async def test_concurrent_checks_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_web_config(
        write(tmp_path / "web.yml", {"basic_auth_users": {"alice": HASH_FOR_ALICE}})
    )
    monkeypatch.setattr(auth, "BCRYPT_WAITING_MAX", 3)
    running = 0
    most = 0
    release = asyncio.Event()
    real = auth._bcrypt_matches

    def slow_matches(password: bytes, hashed: bytes) -> bool:
        nonlocal running, most
        running += 1
        most = max(most, running)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        running -= 1
        return real(password, hashed)

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(auth, "_bcrypt_matches", slow_matches)
    check = PasswordCheck()
    same = [check.refusal(_basic("alice", "alice-password"), config) for _ in range(5)]
    distinct = [check.refusal(_basic("alice", f"guess-{i}"), config) for i in range(5)]
    tasks = [asyncio.ensure_future(c) for c in same + distinct]
    done, _ = await asyncio.wait(tasks, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
    # Beyond 3 distinct checks in flight (the same pair counts once), refused at once.
    assert {t.result() for t in done} == {"busy"}
    release.set()
    results = await asyncio.gather(*tasks)
    assert results[:5] == [None] * 5
    assert sorted(map(str, results[5:])) == [
        "busy",
        "busy",
        "busy",
        "wrong_password",
        "wrong_password",
    ]
    assert most <= auth.BCRYPT_AT_ONCE


# -- watching ----------------------------------------------------------------------------------


async def test_watcher_reloads_a_change_and_keeps_the_old_one_when_broken(
    certs: TestCa, tmp_path: Path
) -> None:
    import shutil

    for name in ("server.crt", "server.key"):
        shutil.copy(certs.directory / name, tmp_path / name)
    doc = {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"alice": HASH_FOR_ALICE},
    }
    path = write(tmp_path / "web.yml", doc)
    registry = CollectorRegistry()
    watcher = WebConfigWatcher(load_web_config(path), registry)
    first = watcher.current
    listener = watcher.site_context
    assert listener is not None and first.tls is not None and listener is first.tls.context

    def gauge() -> float | None:
        return registry.get_sample_value("alivemcp_web_config_last_reload_successful")

    assert not await watcher.check()  # nothing changed
    # A rotation: the key written, then the certificate. Applied once it has settled.
    certs.issue("rotated", cert_path=tmp_path / "server.crt", key_path=tmp_path / "server.key")
    assert not await watcher.check()  # changed since the last look: not settled yet
    assert await watcher.check()
    assert watcher.current is not first and watcher.current.tls is not None
    assert watcher.site_context is listener  # the listening socket's context stays

    with structlog.testing.capture_logs() as logs:
        write(path, {**doc, "http_server_config": {"headers": {"Server": "x"}}})
        for _ in range(4):
            await watcher.check()
    refused = [e for e in logs if e["event"].startswith("web config refused")]
    assert len(refused) == 1, logs  # said once
    assert refused[0]["errors"][0].startswith("http_server_config.headers: HTTP header 'Server'")
    assert gauge() == 0
    assert watcher.current.users == {"alice": HASH_FOR_ALICE.encode()}  # still served

    write(path, {**doc, "basic_auth_users": {"bob": HASH_FOR_ALICE}})
    await watcher.check()
    assert await watcher.check()
    assert set(watcher.current.users) == {"bob"}
    assert gauge() == 1
    reloads = {
        result: registry.get_sample_value("alivemcp_web_config_reloads_total", {"result": result})
        for result in ("success", "failure")
    }
    assert reloads == {"success": 3.0, "failure": 1.0}  # the first load, two reloads; one refused

    # TLS cannot be turned off without a restart: the rest of the file is applied.
    with structlog.testing.capture_logs() as logs:
        write(path, {"basic_auth_users": {"carol": HASH_FOR_ALICE}})
        await watcher.check()
        assert await watcher.check()
    assert set(watcher.current.users) == {"carol"}
    assert watcher.current.tls is not None
    assert any("turns TLS off: takes effect on restart" in e["event"] for e in logs)


async def test_switching_files_on_a_reload(tmp_path: Path) -> None:
    first = write(tmp_path / "one.yml", {"basic_auth_users": {"alice": HASH_FOR_ALICE}})
    second = write(tmp_path / "two.yml", {"basic_auth_users": {"bob": HASH_FOR_ALICE}})
    watcher = WebConfigWatcher(load_web_config(first))
    assert await watcher.switch_to(second)
    assert set(watcher.current.users) == {"bob"} and watcher.current.source == second
    assert not await watcher.switch_to(write(tmp_path / "bad.yml", {"nope": 1}))
    assert watcher.current.source == second
    assert await watcher.switch_to(None)
    assert watcher.current.users == {}


# -- the README's example ----------------------------------------------------------------------


def _readme_block(tag: str) -> str:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(rf"<!-- readme-test: {tag} -->\n```\w+\n(.*?)\n```", readme, re.DOTALL)
    assert found, f"README has no block tagged {tag}"
    return found.group(1)


def test_the_readme_example_loads(certs: TestCa, tmp_path: Path) -> None:
    text = _readme_block("web-tls").replace("/etc/alivemcp/tls/tls.", "server.")
    config = load_web_config(write(certs.directory / "readme.yml", text))
    assert config.tls is not None and set(config.users) == {"prometheus"}
    assert config.headers == {"Strict-Transport-Security": "max-age=31536000"}
    job = yaml.safe_load(_readme_block("web-tls-scrape"))["scrape_configs"][0]
    assert job["scheme"] == "https" and job["basic_auth"]["username"] == "prometheus"
