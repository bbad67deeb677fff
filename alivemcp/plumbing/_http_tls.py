"""TLS for the probe client: shared contexts, the files they are built from, resumption.

A context is built once per (verify, CA file, client certificate, key) and rebuilt when one of
those files changes (:class:`TlsFiles`); a file that cannot be loaded is a
:class:`~._http_errors.ClientConfigError` (the prober's problem, not the target's). Each
context keeps the sessions of the servers it verified (:class:`TlsSessions`), and its
connections offer them again (:class:`_ResumingSSLObject`, :data:`OFFERED_SESSION`) for a
while: a resumed handshake skips the certificate parsing, checks and signatures of a full one.
"""

from __future__ import annotations

import contextvars
import os
import ssl
import time

from alivemcp.plumbing._http_errors import ClientConfigError

__all__ = [
    "OFFERED_SESSION",
    "TLS_RESUME_SECONDS",
    "TlsFiles",
    "TlsSessions",
    "load_context",
]

#: How long TLS sessions of one server are resumed after a full handshake verified its
#: certificate chain; then the next connection makes a full handshake (and verifies) again.
TLS_RESUME_SECONDS = 300.0
_MAX_TLS_SESSIONS = 100_000
#: The session the connection being opened in this task may resume (see _ResumingSSLObject).
OFFERED_SESSION: contextvars.ContextVar[ssl.SSLSession | None] = contextvars.ContextVar(
    "alivemcp_offered_tls_session", default=None
)


class _ResumingSSLObject(ssl.SSLObject):
    """An SSLObject that offers the session the opening task put in :data:`OFFERED_SESSION`.

    asyncio and uvloop build a connection's SSLObject with ``context.wrap_bio()`` and no
    ``session`` argument; this class (the context's ``sslobject_class``) supplies it. The
    loops make the SSLObject in a callback scheduled by the opening task, which carries that
    task's context variables, so only that connection sees the offer.
    """

    @classmethod
    def _create(
        cls,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | None = None,
        session: ssl.SSLSession | None = None,
        context: ssl.SSLContext | None = None,
    ) -> ssl.SSLObject:
        if session is None and not server_side:
            session = OFFERED_SESSION.get()
        return super()._create(  # type: ignore[misc,no-any-return]
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
            context=context,
        )


class TlsSessions:
    """Resumable TLS sessions of one TLS context, per server (host and port).

    A session is offered again only to the host and port it was made with, through the context
    it was made by (a session never crosses CA or client-certificate settings), and only for
    :data:`TLS_RESUME_SECONDS` after the full handshake that verified the server's certificate
    chain: a server whose certificate changed is verified within that time. Resuming saves the
    certificate parsing, checks and signatures of a full handshake; the key exchange stays
    fresh. The session kept is the one of the last full handshake (servers accept a ticket
    more than once; one that does not gets a full handshake, whose session is kept then).
    """

    __slots__ = ("_entries", "max_age")

    def __init__(self, max_age: float = TLS_RESUME_SECONDS) -> None:
        self.max_age = max_age
        #: (host, port) -> (session, monotonic time of the full handshake it descends from).
        self._entries: dict[tuple[str, int], tuple[ssl.SSLSession, float]] = {}

    def offer(self, host: str, port: int) -> tuple[ssl.SSLSession, float] | None:
        """The session to offer this server, with when it was verified; None: none, or too
        old (then forgotten)."""
        entry = self._entries.get((host, port))
        if entry is not None and time.monotonic() - entry[1] >= self.max_age:
            del self._entries[(host, port)]
            return None
        return entry

    def keep(self, host: str, port: int, session: ssl.SSLSession, verified_at: float) -> None:
        if len(self._entries) >= _MAX_TLS_SESSIONS:
            self._entries.clear()  # a crude bound; refilled by the next handshakes
        self._entries[(host, port)] = (session, verified_at)

    def forget(self, host: str, port: int) -> None:
        self._entries.pop((host, port), None)

    def __len__(self) -> int:
        return len(self._entries)


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's password.
    return b""


class TlsFiles:
    """A cached TLS context, its resumable sessions, and the modification times of the files
    it was built from."""

    __slots__ = ("context", "paths", "sessions", "stamp")

    def __init__(
        self, context: ssl.SSLContext, paths: tuple[str, ...], resume_seconds: float
    ) -> None:
        self.context = context
        self.sessions = TlsSessions(resume_seconds)
        self.paths = paths
        self.stamp = _stamp(paths)

    def current(self) -> bool:
        """False when one of the files changed since the context was built."""
        return not self.paths or _stamp(self.paths) == self.stamp


def _stamp(paths: tuple[str, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(os.stat(path).st_mtime_ns for path in paths)
    except OSError:
        return None


def load_context(
    verify: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ClientConfigError(f"cannot load CA file {ca_file}: {_reason(exc)}") from None
    # Offers a kept session to the server it came from (see TlsSessions).
    context.sslobject_class = _ResumingSSLObject
    if not verify:
        # Still TLS; the certificate is simply not checked.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if key_file and not cert_file:
        raise ClientConfigError("a client key file needs a client certificate file")
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file, password=_no_password)
        except (OSError, ssl.SSLError) as exc:
            key = f" with key {key_file}" if key_file else ""
            raise ClientConfigError(
                f"cannot load client certificate {cert_file}{key}: "
                f"{_reason(exc, key_file or cert_file)}"
            ) from None
    return context


def _reason(exc: OSError, key_file: str | None = None) -> str:
    if not isinstance(exc, ssl.SSLError):
        return exc.strerror or str(exc)
    if exc.reason == "KEY_VALUES_MISMATCH":
        return "the key does not belong to the certificate"
    if key_file and exc.reason in ("PEM_LIB", None) and _encrypted(key_file):
        return "the key is encrypted (password-protected keys are not supported)"
    return str(exc.reason or exc)


def _encrypted(key_file: str) -> bool:
    try:
        with open(key_file, "rb") as key:
            return b"ENCRYPTED" in key.read(64 * 1024)
    except OSError:
        return False
