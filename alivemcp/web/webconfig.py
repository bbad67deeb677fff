"""The web configuration file: TLS, response headers and basic-auth users for the daemon's HTTP
server, in the format of prometheus/exporter-toolkit (``--web.config.file``), so the file an
exporter is served with serves alivemcp too.

The format, as exporter-toolkit reads it (``docs/web-configuration.md``, ``web/tls_config.go``):
unknown keys are refused, relative file names are relative to the web config file's directory,
TLS is on when any of ``cert``/``cert_file``/``key``/``key_file``/``client_ca``/
``client_ca_file``/``client_auth_type`` is set, cipher suites and curves are Go's names
(``tls.CipherSuites()``: the insecure ones are "unknown", as there), header names and values are
exporter-toolkit's allowed ones, and each ``basic_auth_users`` value must be a bcrypt hash.
Where Python's ``ssl`` module cannot do what Go's does, the file is refused with a sentence
saying so rather than served differently: ``rate_limit``, more than one ``curve_preferences``
entry. One difference is served, and logged when the file asks for it: Python verifies every
client certificate it is given, so ``RequestClientCert`` acts as ``VerifyClientCertIfGiven``
and ``RequireAnyClientCert`` as ``RequireAndVerifyClientCert``. ``http_server_config.http2`` is
accepted; aiohttp serves HTTP/1.1 only. The ``tls_server_config`` section and the context made
from it are :mod:`alivemcp.web.webtls`'s; who may read what is :mod:`alivemcp.web.auth`'s.

:class:`WebConfigWatcher` re-reads the file when it or a file it names changes (certificate
rotation without a restart): new TLS connections get the new certificate, CA and ciphers (the
listening socket's context hands each handshake to the current one: ``sni_callback``). A new
file that does not load keeps the old one, logged once and shown by
``alivemcp_web_config_last_reload_successful``. Turning TLS on or off needs a restart (the
listening socket is plain or TLS); the watcher says so and applies the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
import ssl
import time
from collections import Counter as Tally
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from alivemcp.config import ConfigError
from alivemcp.config.messages import format_errors
from alivemcp.config.yamlfile import YamlFileError, load_yaml, read_text
from alivemcp.web.webtls import (
    VERIFIED_ANYWAY,
    TlsProblem,
    TlsServerConfig,
    TlsServing,
    match_listener,
    tls_serving,
)

__all__ = [
    "WebConfig",
    "WebConfigError",
    "WebConfigWatcher",
    "load_web_config",
    "web_config_path",
]

log = structlog.get_logger("alivemcp.web.webconfig")

#: How often the watcher looks at the file and the files it names (a stat and a hash of a few
#: kilobytes each). A change is applied once it has been the same for two looks, so a rotation
#: that writes the certificate and then the key is not caught half-way.
POLL_SECONDS = 1.0
#: A refused version is tried again this often even unchanged: it may name a file that was
#: missing then (its new errors are logged; the same ones are not).
RETRY_REFUSED_SECONDS = 30.0
#: A file larger than this is watched by its size and times, not its contents.
HASHED_BYTES_MAX = 1 << 20

#: exporter-toolkit's headers (``extraHTTPHeaders``): the only ones settable, with the values
#: allowed where it restricts them.
ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


class WebConfigError(ConfigError):
    """A web config file that cannot be served; ``errors`` name the field."""


# -- the file's model --------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_text(value: Any) -> Any:
    # YAML reads `X-XSS-Protection: 1` as a number; Go's map[string]string takes it as text.
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value) if isinstance(value, int | float) else value


def _text_map(value: Any) -> Any:
    if isinstance(value, dict):
        return {_as_text(k): _as_text(v) for k, v in value.items()}
    return {} if value is None else value


class HttpServerConfig(_Strict):
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers", mode="before")
    @classmethod
    def _headers_as_text(cls, value: Any) -> Any:
        return _text_map(value)

    @field_validator("headers")
    @classmethod
    def _allowed_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, given in value.items():
            if name not in ALLOWED_HEADERS:
                raise ValueError(
                    f"HTTP header {name!r} can not be configured "
                    f"(allowed: {', '.join(ALLOWED_HEADERS)})"
                )
            allowed = ALLOWED_HEADERS[name]
            if allowed and given not in allowed:
                raise ValueError(
                    f"invalid value for {name}: expected one of {allowed}, not {given!r}"
                )
        return value


class RateLimitConfig(_Strict):
    interval: Any = None
    burst: int = 0


class WebConfigFile(_Strict):
    tls_server_config: TlsServerConfig = Field(default_factory=TlsServerConfig)
    http_server_config: HttpServerConfig = Field(default_factory=HttpServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict, repr=False)
    rate_limit: RateLimitConfig | None = None

    @field_validator("tls_server_config", "http_server_config", mode="before")
    @classmethod
    def _null_section(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("basic_auth_users", mode="before")
    @classmethod
    def _users_as_text(cls, value: Any) -> Any:
        return _text_map(value)

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for user, hashed in value.items():
            match = _BCRYPT_HASH.fullmatch(hashed)
            if match is None or not 4 <= int(match.group(1)) <= 31:
                # The hash is not shown: a password pasted by mistake would be.
                raise ValueError(
                    f"user {user!r}: not a bcrypt hash ($2y$10$ followed by 53 characters; "
                    "make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"
                )
        return value

    @field_validator("rate_limit")
    @classmethod
    def _no_rate_limit(cls, value: RateLimitConfig | None) -> RateLimitConfig | None:
        if value is not None and value.interval not in (None, 0, "0", "0s"):
            raise ValueError("alivemcp does not rate-limit requests: leave rate_limit out")
        return value


# -- what is served ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WebConfig:
    """A loaded web config file, or the open default (no file: plain HTTP, no credentials)."""

    source: Path | None = None
    #: user name -> bcrypt hash; empty: no credentials asked.
    users: Mapping[str, bytes] = dataclasses.field(default_factory=dict, repr=False)
    #: a hash of no user's password at the users' usual cost: checked for an unknown name, so
    #: it costs what a known one does.
    decoy_hash: bytes = dataclasses.field(default=b"", repr=False)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tls: TlsServing | None = None
    #: the file and the files it names: a change of any is a reload.
    watched: tuple[Path, ...] = ()
    #: things worth a log line when the file is loaded.
    notes: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """For log lines: what is served, never a secret."""
        return {
            "web_config": str(self.source) if self.source else None,
            "tls": self.tls is not None,
            "client_certificates": _VERIFY_NAMES[self.tls.verify_mode] if self.tls else None,
            "basic_auth_users": len(self.users),
        }


_VERIFY_NAMES = {
    ssl.CERT_NONE: "none",
    ssl.CERT_OPTIONAL: "optional",
    ssl.CERT_REQUIRED: "required",
}


def web_config_path(
    flag: str | Path | None, configured: str | None, config_dir: Path
) -> Path | None:
    """The web config file to serve: ``--web.config.file`` (relative to the working directory)
    wins over ``server.web_config_file`` (relative to the config file's directory)."""
    if flag:
        return Path(flag)
    if configured:
        return config_dir / configured
    return None


def load_web_config(path: Path | None) -> WebConfig:
    """Read and check the file, load its certificates and make the TLS context; a
    :class:`WebConfigError` names what is wrong. None: the open default."""
    if path is None:
        return WebConfig()
    source = str(path)
    try:
        raw = load_yaml(read_text(path), source)
    except YamlFileError as exc:
        raise WebConfigError([str(exc)], source) from None
    if raw is None:
        raw = {}  # an empty file: exporter-toolkit's defaults (plain HTTP, no users)
    if not isinstance(raw, dict):
        raise WebConfigError([f"<root>: a mapping is needed, not {type(raw).__name__}"], source)
    try:
        model = WebConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise WebConfigError(format_errors(exc, WebConfigFile, ""), source) from None
    base = path.parent
    tls_config = model.tls_server_config
    notes: list[str] = []
    tls: TlsServing | None = None
    watched = [path]
    if tls_config.enabled():
        try:
            tls, files = tls_serving(tls_config, base)
        except TlsProblem as exc:
            raise WebConfigError([str(exc)], source) from None
        watched += files
        if tls_config.client_auth_type in VERIFIED_ANYWAY:
            notes.append(
                f"client_auth_type {tls_config.client_auth_type} is served as "
                f"{VERIFIED_ANYWAY[tls_config.client_auth_type]}: Python verifies every "
                "client certificate it is given"
            )
    elif tls_config.client_allowed_sans is not None:
        raise WebConfigError(
            ["tls_server_config.client_allowed_sans: set, but TLS is not configured"], source
        )
    users = {name: hashed.encode() for name, hashed in model.basic_auth_users.items()}
    headers = {k: v for k, v in model.http_server_config.headers.items() if v}
    return WebConfig(
        source=path,
        users=users,
        decoy_hash=_decoy_hash(users.values()) if users else b"",
        headers=headers,
        tls=tls,
        watched=tuple(watched),
        notes=tuple(notes),
    )


def _decoy_hash(hashes: Any) -> bytes:
    costs = Tally(int(h[4:6]) for h in hashes)
    cost = min(costs, key=lambda c: (-costs[c], c))  # the usual cost; ties: the lower
    return bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(rounds=cost))


# -- watching ----------------------------------------------------------------------------------


class WebConfigMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reload_ok = Gauge(
            "alivemcp_web_config_last_reload_successful",
            "1 if the last load of the web config file (TLS, basic auth) succeeded; 0 while "
            "a broken file is refused and the previous one served.",
            registry=registry,
        )
        self.reload_ts = Gauge(
            "alivemcp_web_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful load of the web config file.",
            registry=registry,
        )
        self.reloads = Counter(
            "alivemcp_web_config_reloads",
            "Loads of a changed web config file by result.",
            ["result"],
            registry=registry,
        )

    def loaded(self, ok: bool) -> None:
        self.reloads.labels(result="success" if ok else "failure").inc()
        self.reload_ok.set(1 if ok else 0)
        if ok:
            self.reload_ts.set(time.time())


def _fingerprint(paths: tuple[Path, ...]) -> tuple[object, ...]:
    marks: list[object] = []
    for path in paths:
        try:
            st = path.stat()
            if st.st_size <= HASHED_BYTES_MAX:
                marks.append(hashlib.sha256(path.read_bytes()).digest())
            else:
                marks.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError as exc:
            marks.append(exc.errno)
    return tuple(marks)


class WebConfigWatcher:
    """The web config being served, kept current: polls the file and the files it names."""

    def __init__(
        self,
        config: WebConfig,
        registry: CollectorRegistry | None = None,
        *,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._config = config
        self._poll_seconds = poll_seconds
        self._metrics = WebConfigMetrics(registry) if registry is not None else None
        self._applied = _fingerprint(config.watched)
        self._seen = self._applied
        #: The version refused last (its files' fingerprint, the errors) and when it was tried.
        self._refused: tuple[tuple[object, ...], list[str]] | None = None
        self._refused_at = 0.0
        self._told_restart: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        #: The listening socket's context: each handshake moves on to the current one.
        self.site_context: ssl.SSLContext | None = None
        if config.tls is not None:
            self.site_context = config.tls.context
            self.site_context.sni_callback = self._current_context
        if self._metrics is not None:
            self._metrics.reload_ok.set(1)
            if config.source is not None:
                self._metrics.loaded(True)
        for note in config.notes:
            log.warning("web config: " + note, web_config=str(config.source))

    @property
    def current(self) -> WebConfig:
        return self._config

    def _current_context(self, conn: Any, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        tls = self._config.tls
        if tls is not None and conn.context is not tls.context:
            conn.context = tls.context

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="alivemcp-web-config")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=1)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._poll_seconds)
            if not self._config.watched:
                continue  # no file (a reload of the config may name one)
            try:
                await self.check()
            except Exception:  # the watch goes on; the next change is looked at again
                log.exception("web config watch failed")

    async def check(self) -> bool:
        """Look once; reload when the files changed and stayed so since the last look (or,
        while a broken version is refused, every :data:`RETRY_REFUSED_SECONDS`: it may name
        a file that was missing). True when a new config was applied."""
        config = self._config
        now = await asyncio.to_thread(_fingerprint, config.watched)
        settled, self._seen = now == self._seen, now
        if now == self._applied or not settled:
            return False
        refused = self._refused
        recently = time.monotonic() - self._refused_at < RETRY_REFUSED_SECONDS
        if refused is not None and refused[0] == now and recently:
            return False
        return await self._load(config.source, now)

    async def switch_to(self, path: Path | None) -> bool:
        """Serve another file (a reload changed ``server.web_config_file``); None: none."""
        if path is None:
            self._adopt(WebConfig(), ())
            log.info("web config file removed from the config: serving without it")
            return True
        return await self._load(path, ())

    async def _load(self, path: Path | None, fingerprint: tuple[object, ...]) -> bool:
        try:
            new = await asyncio.to_thread(load_web_config, path)
        except WebConfigError as exc:
            self._refused_at = time.monotonic()
            if self._refused != (fingerprint, exc.errors):  # said once, not every look
                self._refused = (fingerprint, exc.errors)
                if self._metrics is not None:
                    self._metrics.loaded(False)
                log.error(
                    "web config refused; still serving the previous one",
                    web_config=exc.source,
                    errors=exc.shown(),
                )
            return False
        # The fingerprint taken before reading, so a change made meanwhile is seen at the
        # next look; taken again when the new version names other files.
        if new.watched != self._config.watched:
            fingerprint = await asyncio.to_thread(_fingerprint, new.watched)
        self._adopt(new, fingerprint)
        if self._metrics is not None:
            self._metrics.loaded(True)
        for note in new.notes:
            log.warning("web config: " + note, web_config=str(new.source))
        log.info("web config reloaded", **self._config.describe())
        return True

    def _adopt(self, new: WebConfig, fingerprint: tuple[object, ...]) -> None:
        old = self._config
        if (new.tls is None) != (self.site_context is None):
            which = "on" if new.tls is not None else "off"
            if which not in self._told_restart:
                self._told_restart.add(which)
                log.warning(
                    f"web config turns TLS {which}: takes effect on restart (the listening "
                    "socket is plain or TLS); the rest of the file is applied",
                    web_config=str(new.source),
                )
            new = dataclasses.replace(new, tls=old.tls if new.tls is None else None)
        elif new.tls is not None and self.site_context is not None:
            self._told_restart.clear()
            for field in match_listener(self.site_context, new.tls, old.tls):
                log.warning(f"web config: {field} changed: takes effect on restart")
        self._config = new
        self._applied = self._seen = fingerprint
        self._refused = None
