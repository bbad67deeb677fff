"""Who may read what the HTTP server serves: the web config's basic-auth users, the paths left
public (``server.public_paths``), the client certificate's SANs, and the configured response
headers, as one aiohttp middleware and one response hook (:class:`WebAccess`).

Credentials are asked only when the web config file has ``basic_auth_users``; then every path
needs them except ``/healthz`` and ``/readyz`` (kubelet probes; they say ok or not ready and how
many checks are pending, nothing about a check) and the public paths: an entry ending in ``/``
is a prefix (``/badge/``), ``/`` alone is the status page only, any other entry is one path. A
path with a ``.`` or ``..`` segment is never public (``/badge/../status`` is not a badge).

A refusal is ``401`` with ``WWW-Authenticate: Basic realm="alivemcp"``, counted by reason in
``alivemcp_http_auth_failures_total`` and never logged (a user name field often holds a
password typed one field too early). bcrypt is slow on purpose, so it must not become a lever
on the daemon's CPU: the user name is compared in constant time against every user's, an
unknown name costs a bcrypt check against a decoy hash as a known one does (no user
enumeration by timing), a successful (user, password) is remembered (keyed by a keyed hash of
the pair, never the password; bounded), so a Prometheus scraping every 15 s costs one check in
all, and at most :data:`BCRYPT_AT_ONCE` checks run at once, in threads, with at most
:data:`BCRYPT_WAITING_MAX` waiting: beyond that a request is refused with ``503`` at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import bcrypt
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from alivemcp.config.model import ServerConfig
from alivemcp.web.webconfig import (
    WebConfig,
    WebConfigWatcher,
    load_web_config,
    web_config_path,
)
from alivemcp.web.webtls import normal_san

__all__ = ["CHALLENGE", "PasswordCheck", "PublicPaths", "WebAccess"]

log = structlog.get_logger("alivemcp.web.auth")

REALM = "alivemcp"
CHALLENGE = f'Basic realm="{REALM}"'
#: Always served without credentials: what a kubelet probes.
ALWAYS_OPEN = frozenset({"/healthz", "/readyz"})
#: Successful (user, password) pairs remembered; the oldest goes first.
REMEMBERED_MAX = 256
#: bcrypt checks running at once (each in a thread, each ~70 ms of one core at cost 10).
BCRYPT_AT_ONCE = 2
#: Distinct checks running or waiting beyond which a request is refused at once (503).
BCRYPT_WAITING_MAX = 64
#: Reasons a request was refused (``alivemcp_http_auth_failures_total{reason}``).
REASONS = (
    "missing",
    "malformed",
    "unknown_user",
    "wrong_password",
    "busy",
    "client_certificate",
)
#: The SAN kinds exporter-toolkit compares (Go's DNS names, e-mail, IP addresses and URIs).
_SAN_KINDS = frozenset({"DNS", "email", "IP Address", "URI"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AuthMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.failures = Counter(
            "alivemcp_http_auth_failures",
            "HTTP requests refused for their credentials, by reason: missing, malformed, "
            "unknown_user, wrong_password, busy (too many password checks waiting), "
            "client_certificate (none of client_allowed_sans).",
            ["reason"],
            registry=registry,
        )
        self.bcrypt_checks = Counter(
            "alivemcp_http_auth_bcrypt_checks",
            "Password checks that ran bcrypt (a remembered successful pair costs none).",
            registry=registry,
        )
        for reason in REASONS:  # every reason shows from the start, at 0
            self.failures.labels(reason=reason)


class PublicPaths:
    """``server.public_paths``: which paths are served without credentials."""

    def __init__(self, entries: Sequence[str] = ()) -> None:
        self.entries = tuple(entries)
        self._exact = frozenset(e for e in entries if e == "/" or not e.endswith("/"))
        self._prefixes = tuple(e for e in entries if e != "/" and e.endswith("/"))

    def covers(self, path: str) -> bool:
        if path in ALWAYS_OPEN:
            return True
        if any(segment in (".", "..") for segment in path.split("/")):
            return False
        return path in self._exact or path.startswith(self._prefixes)


def parse_basic(header: str) -> tuple[bytes, bytes] | None:
    """(user, password) of an ``Authorization: Basic`` header, as Go's ``BasicAuth`` reads it;
    None when it is not one."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = raw.partition(b":")
    return (user, password) if colon else None


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # longer than bcrypt's 72 bytes, or a NUL in it: no hash matches it
        return False


class _Busy(Exception):
    pass


class PasswordCheck:
    """Checks basic-auth credentials against a web config's users (see the module docstring)."""

    def __init__(self, metrics: AuthMetrics | None = None) -> None:
        self._metrics = metrics
        self._key = os.urandom(32)  # the remembered pairs' keys mean nothing outside
        self._remembered: OrderedDict[bytes, None] = OrderedDict()
        self._slots = asyncio.Semaphore(BCRYPT_AT_ONCE)
        self._running: dict[bytes, asyncio.Task[bool]] = {}

    async def refusal(self, header: str | None, config: WebConfig) -> str | None:
        """Why the request's credentials are refused (a reason of :data:`REASONS`), or None
        when they are a user's."""
        if header is None:
            return "missing"
        parsed = parse_basic(header)
        if parsed is None:
            return "malformed"
        user, password = parsed
        wanted = hashlib.sha256(user).digest()
        hashed: bytes | None = None
        for name, candidate in config.users.items():  # every name compared: constant time
            if hmac.compare_digest(hashlib.sha256(name.encode()).digest(), wanted):
                hashed = candidate
        target = hashed if hashed is not None else config.decoy_hash
        key = self._pair_key(user, target, password)
        if hashed is not None and key in self._remembered:
            self._remembered.move_to_end(key)
            return None
        try:
            matches = await self._check(key, password, target)
        except _Busy:
            return "busy"
        if hashed is None:
            return "unknown_user"
        if not matches:
            return "wrong_password"
        self._remembered[key] = None
        while len(self._remembered) > REMEMBERED_MAX:
            self._remembered.popitem(last=False)
        return None

    def _pair_key(self, user: bytes, hashed: bytes, password: bytes) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (user, hashed, password):  # length-prefixed: no two splits alike
            mac.update(len(part).to_bytes(4, "big") + part)
        return mac.digest()

    async def _check(self, key: bytes, password: bytes, hashed: bytes) -> bool:
        # The same pair asked again while it is checked waits for that check (a page's
        # burst of requests costs one); the check is its own task, so a request whose
        # client went away does not cancel it for the others.
        task = self._running.get(key)
        if task is None:
            if len(self._running) >= BCRYPT_WAITING_MAX:
                raise _Busy
            task = asyncio.ensure_future(self._run(password, hashed))
            self._running[key] = task
            task.add_done_callback(lambda _: self._running.pop(key, None))
        return await asyncio.shield(task)

    async def _run(self, password: bytes, hashed: bytes) -> bool:
        async with self._slots:
            if self._metrics is not None:
                self._metrics.bcrypt_checks.inc()
            return await asyncio.to_thread(_bcrypt_matches, password, hashed)


def _peer_allowed(request: web.Request, allowed: frozenset[str]) -> bool:
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return False
    return any(
        kind in _SAN_KINDS and normal_san(str(value)) in allowed
        for kind, value in cert.get("subjectAltName", ())
    )


def _refused(status: int, message: str, headers: dict[str, str]) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


class WebAccess:
    """The web config being served (its watcher) and the public paths, applied to every
    request by :meth:`middleware` and to every response by :meth:`add_headers`."""

    def __init__(
        self,
        watcher: WebConfigWatcher,
        server: ServerConfig,
        registry: CollectorRegistry | None = None,
        *,
        config_dir: Path | None = None,
        pinned: bool = False,
    ) -> None:
        self.watcher = watcher
        self.public = PublicPaths(server.public_paths)
        self._metrics = AuthMetrics(registry) if registry is not None else None
        self._passwords = PasswordCheck(self._metrics)
        self._config_dir = config_dir or Path.cwd()
        self._configured_file = server.web_config_file
        #: --web.config.file was given: it wins over server.web_config_file, on reloads too.
        self._pinned = pinned

    @classmethod
    def serving(
        cls,
        server: ServerConfig,
        registry: CollectorRegistry,
        *,
        config_dir: Path,
        web_config: WebConfig | None = None,
        pinned: bool = False,
    ) -> WebAccess:
        """What the daemon serves: ``web_config`` (loaded from ``--web.config.file``, which
        then wins on reloads: ``pinned``), else ``server.web_config_file`` loaded now (a
        :class:`~alivemcp.web.webconfig.WebConfigError` when it cannot be)."""
        if web_config is None:
            web_config = load_web_config(web_config_path(None, server.web_config_file, config_dir))
        watcher = WebConfigWatcher(web_config, registry)
        return cls(watcher, server, registry, config_dir=config_dir, pinned=pinned)

    @property
    def asks_credentials(self) -> bool:
        return bool(self.watcher.current.users)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The listening socket's TLS context, or None for plain HTTP."""
        return self.watcher.site_context

    async def start(self) -> None:
        config = self.watcher.current
        if config.source is not None:
            log.info(
                "web config loaded", public_paths=list(self.public.entries), **config.describe()
            )
        await self.watcher.start()

    async def stop(self) -> None:
        await self.watcher.stop()

    async def reconfigure(self, server: ServerConfig) -> None:
        """A reload of the main config: new public paths now; another web config file now
        unless ``--web.config.file`` was given (TLS on or off: at the next restart)."""
        if tuple(server.public_paths) != self.public.entries:
            self.public = PublicPaths(server.public_paths)
            log.info("server.public_paths changed", public_paths=server.public_paths)
        if server.web_config_file == self._configured_file:
            return
        self._configured_file = server.web_config_file
        if self._pinned:
            log.info("server.web_config_file changed; --web.config.file wins, and is kept")
            return
        await self.watcher.switch_to(
            web_config_path(None, server.web_config_file, self._config_dir)
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        config = self.watcher.current
        sans = config.tls.allowed_sans if config.tls is not None else None
        if sans is not None and not _peer_allowed(request, sans):
            # exporter-toolkit ends the handshake; here the certificate is read per request.
            self._count("client_certificate")
            response = _refused(403, "client certificate not allowed", {})
            response.force_close()
            return response
        if not config.users or self.public.covers(request.path):
            return await handler(request)
        reason = await self._passwords.refusal(request.headers.get("Authorization"), config)
        if reason is None:
            return await handler(request)
        self._count(reason)
        if reason == "busy":
            return _refused(503, "too many password checks at once", {"Retry-After": "1"})
        return _refused(401, "credentials required", {"WWW-Authenticate": CHALLENGE})

    def _count(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.failures.labels(reason=reason).inc()

    async def add_headers(self, _: web.Request, response: web.StreamResponse) -> None:
        # A header the response sets itself wins (the status page's own
        # Content-Security-Policy), as a handler's does over exporter-toolkit's.
        for name, value in self.watcher.current.headers.items():
            response.headers.setdefault(name, value)
