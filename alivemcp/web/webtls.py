"""The ``tls_server_config`` section of the web config file (:mod:`alivemcp.web.webconfig`):
its model, the :class:`ssl.SSLContext` made from it, and how a running listener takes a new one.

Go's names are mapped to OpenSSL's; Python's ``ssl`` cannot do everything Go's ``crypto/tls``
does, and where it cannot the file is refused or the difference is said (see
:data:`VERIFIED_ANYWAY`). An inline ``cert``/``key`` is loaded through a private temporary
file (``ssl`` reads chains from files only), removed as soon as it is read.
"""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CLIENT_AUTH_TYPES",
    "GO_CIPHER_SUITES",
    "GO_CURVES",
    "TLS_VERSIONS",
    "VERIFIED_ANYWAY",
    "TlsProblem",
    "TlsServerConfig",
    "TlsServing",
    "match_listener",
    "normal_san",
    "tls_serving",
]


class TlsProblem(ValueError):
    """What is wrong with the section, as ``tls_server_config.FIELD: message``."""


#: Go's names (``tls.CipherSuites()``) -> OpenSSL's. TLS 1.3 suites are not configurable,
#: in Go as in OpenSSL: accepted and left alone (None).
GO_CIPHER_SUITES: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
GO_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
#: Go's client auth policies -> what Python's ssl can do (it verifies every certificate given).
CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireClientCert": ssl.CERT_REQUIRED,  # exporter-toolkit's old name for the one above
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
VERIFIED_ANYWAY = {
    "RequestClientCert": "VerifyClientCertIfGiven",
    "RequireAnyClientCert": "RequireAndVerifyClientCert",
    "RequireClientCert": "RequireAndVerifyClientCert",
}


@dataclass(frozen=True)
class TlsServing:
    """A loaded ``tls_server_config``: a complete context for new connections, and what the
    listening socket's own context must match (Python copies these into each connection
    before the handshake reaches the current context)."""

    context: ssl.SSLContext
    verify_mode: ssl.VerifyMode
    minimum_version: ssl.TLSVersion
    maximum_version: ssl.TLSVersion
    server_preference: bool
    curve: str | None
    #: None: any client certificate the verification accepts; else one of these SANs.
    allowed_sans: frozenset[str] | None


class TlsServerConfig(BaseModel):
    """``tls_server_config``, as exporter-toolkit reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cert: str | None = Field(None, repr=False)
    key: str | None = Field(None, repr=False)
    client_ca: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str | None = None
    client_ca_file: str | None = None
    client_allowed_sans: list[str] | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: list[str] = Field(default_factory=list)
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] = Field(default_factory=list)

    @field_validator("client_auth_type")
    @classmethod
    def _client_auth(cls, value: str | None) -> str | None:
        if value not in (None, "", *CLIENT_AUTH_TYPES):
            raise ValueError(
                f"invalid ClientAuth {value!r} (one of: {', '.join(CLIENT_AUTH_TYPES)})"
            )
        return value or None

    @field_validator("min_version", "max_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if value not in TLS_VERSIONS:
            raise ValueError(f"unknown TLS version {value!r} (one of: {', '.join(TLS_VERSIONS)})")
        return value

    @field_validator("cipher_suites")
    @classmethod
    def _ciphers(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in GO_CIPHER_SUITES:
                raise ValueError(
                    f"unknown cipher {name!r} (Go's names from tls.CipherSuites(), e.g. "
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)"
                )
        return value

    @field_validator("curve_preferences")
    @classmethod
    def _curves(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in GO_CURVES:
                raise ValueError(f"unknown curve {name!r} (one of: {', '.join(GO_CURVES)})")
        if len(value) > 1:
            raise ValueError(
                "alivemcp can set one curve, not a list of preferences (Python's ssl module "
                "has no call for it): give one, or leave curve_preferences out"
            )
        return value

    def enabled(self) -> bool:
        """exporter-toolkit's ``IsEnabled``: any of these set means TLS is wanted."""
        wanted = (self.cert, self.cert_file, self.key, self.key_file, self.client_ca)
        return any(wanted) or bool(self.client_ca_file or self.client_auth_type)


def tls_serving(config: TlsServerConfig, base: Path) -> tuple[TlsServing, list[Path]]:
    """The section loaded: certificates read, the context made; and the files it names
    (relative ones under ``base``, the web config file's directory). :class:`TlsProblem`
    names the field that is wrong."""

    def fail(field: str, message: str) -> TlsProblem:
        return TlsProblem(f"tls_server_config.{field}: {message}")

    def pick(inline: str | None, file: str | None, name: str) -> tuple[str | None, Path | None]:
        if inline and file:
            raise fail(name, f"use {name} or {name}_file, not both")
        return inline or None, base / file if file else None

    cert, cert_file = pick(config.cert, config.cert_file, "cert")
    key, key_file = pick(config.key, config.key_file, "key")
    ca, ca_file = pick(config.client_ca, config.client_ca_file, "client_ca")
    if cert is None and cert_file is None:
        raise fail("cert_file", "missing one of cert or cert_file")
    if key is None and key_file is None:
        raise fail("key_file", "missing one of key or key_file")
    verify = CLIENT_AUTH_TYPES[config.client_auth_type or "NoClientCert"]
    if (ca or ca_file) and verify == ssl.CERT_NONE:
        raise fail("client_auth_type", "client CAs are configured without a client auth policy")
    if config.client_allowed_sans is not None and verify == ssl.CERT_NONE:
        raise fail("client_allowed_sans", "set, but client_auth_type asks for no certificate")
    low, high = TLS_VERSIONS[config.min_version], TLS_VERSIONS[config.max_version]
    if low > high:
        raise fail("min_version", f"{config.min_version} is above max_version {config.max_version}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with contextlib.suppress(ValueError):  # an OpenSSL built without the old versions
        context.minimum_version, context.maximum_version = low, high
    if config.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    openssl_names = [n for n in map(GO_CIPHER_SUITES.__getitem__, config.cipher_suites) if n]
    if openssl_names:
        try:
            context.set_ciphers(":".join(openssl_names))
        except ssl.SSLError as exc:
            raise fail("cipher_suites", f"this OpenSSL offers none of them ({exc})") from None
    curve = GO_CURVES[config.curve_preferences[0]] if config.curve_preferences else None
    if curve is not None:
        try:
            context.set_ecdh_curve(curve)
        except (ValueError, ssl.SSLError) as exc:
            raise fail("curve_preferences", f"this OpenSSL cannot use it ({exc})") from None
    _load_chain(context, cert, cert_file, key, key_file, fail)
    if ca_file is not None:
        _readable(ca_file, "client_ca_file", fail)
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except ssl.SSLError as exc:
            raise fail("client_ca_file", f"no certificate in {ca_file} ({exc.reason})") from None
    elif ca is not None:
        try:
            context.load_verify_locations(cadata=ca)
        except ssl.SSLError as exc:
            raise fail("client_ca", f"no certificate in it ({exc.reason})") from None
    elif verify != ssl.CERT_NONE:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go: the system's roots
    context.verify_mode = verify
    sans = config.client_allowed_sans
    serving = TlsServing(
        context=context,
        verify_mode=verify,
        minimum_version=low,
        maximum_version=high,
        server_preference=config.prefer_server_cipher_suites,
        curve=curve,
        allowed_sans=frozenset(map(normal_san, sans)) if sans is not None else None,
    )
    return serving, [f for f in (cert_file, key_file, ca_file) if f is not None]


def normal_san(value: str) -> str:
    """A SAN as compared: IP addresses in one spelling (Python writes IPv6 in full)."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def _readable(path: Path, field: str, fail: Callable[[str, str], TlsProblem]) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise fail(field, f"cannot read {path}: {exc.strerror or exc}") from None


class _EncryptedKeyError(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKeyError  # never prompt on a terminal for a key's passphrase


def _load_chain(
    context: ssl.SSLContext,
    cert: str | None,
    cert_file: Path | None,
    key: str | None,
    key_file: Path | None,
    fail: Callable[[str, str], TlsProblem],
) -> None:
    if cert_file is not None:
        _readable(cert_file, "cert_file", fail)
    if key_file is not None:
        _readable(key_file, "key_file", fail)
    with contextlib.ExitStack() as stack:
        # ssl loads a chain from files only: an inline certificate or key goes through a
        # private temporary file, removed as soon as it is read.
        if cert_file is None or key_file is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alivemcp-")))
            if cert_file is None:
                cert_file = folder / "cert.pem"
                cert_file.write_text(cert or "")
            if key_file is None:
                key_file = folder / "key.pem"
                key_file.touch(mode=0o600)
                key_file.write_text(key or "")
        field = "cert_file" if cert is None else "cert"
        try:
            context.load_cert_chain(str(cert_file), str(key_file), password=_no_password)
        except _EncryptedKeyError:
            raise fail(
                "key_file", "the key is encrypted: a key without a passphrase is needed"
            ) from None
        except ssl.SSLError as exc:
            reason = (
                "the key does not match the certificate"
                if "MISMATCH" in str(exc.reason or "")
                else f"not a PEM certificate and key ({exc.reason or exc})"
            )
            raise fail(field, f"cannot load the certificate and key: {reason}") from None


def match_listener(listener: ssl.SSLContext, new: TlsServing, old: TlsServing | None) -> list[str]:
    """Make the listening socket's context ask what ``new`` asks. Python copies the client
    certificate policy, the TLS versions and the cipher order into each connection from the
    listener's context, before the handshake moves on to the current one (certificate, CAs
    and ciphers come from that). Returns what still needs a restart."""
    listener.verify_mode = new.verify_mode
    with contextlib.suppress(ValueError):
        listener.minimum_version, listener.maximum_version = (
            new.minimum_version,
            new.maximum_version,
        )
    if new.server_preference:
        listener.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        listener.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if old is not None and new.curve != old.curve:
        return ["curve_preferences"]
    return []
