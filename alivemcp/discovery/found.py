"""What a source answers: the targets it lists (:class:`Candidate`), the entries it left out,
counted by reason, and the one classified error a failed read is (:class:`DiscoveryError`).

Every reason is a fixed word (a metric label value); every text shown of an entry went
through :func:`~alivemcp.hygiene.untrusted.clean_text` first (a registry is someone else's
data: control characters, terminal escapes and megabyte strings never reach a log line).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alivemcp.config import DiscoveredOrigin
from alivemcp.hygiene.untrusted import clean_text
from alivemcp.plumbing.http import (
    BodyTooLarge,
    ConnectError,
    DnsError,
    HttpClients,
    HttpError,
    InvalidRequest,
    ProtocolError,
    RequestTimeout,
    TlsError,
)

__all__ = [
    "ERROR_REASONS",
    "MAX_DOCUMENT_BYTES",
    "SKIP_REASONS",
    "Candidate",
    "DiscoveryError",
    "Found",
    "decode_json",
    "get_json",
    "shown",
]

#: Why a source's read failed (``alivemcp_discovery_errors_total{reason}``).
ERROR_REASONS = (
    "connect",
    "dns",
    "tls",
    "timeout",
    "protocol",
    "http_status",
    "not_json",
    "too_large",
    "too_many_entries",
    "cursor_loop",
    "invalid",
    "read",
    "apply",
    "other",
)
#: Why a listed entry did not become a check (``alivemcp_discovery_skipped_targets{reason}``).
SKIP_REASONS = (
    "not_latest",
    "deleted",
    "no_remote",
    "url_template",
    "not_http",
    "duplicate_url",
    "duplicate_target",
    "duplicate_name",
    "private_address",
    "invalid_entry",
)
#: Largest document (a registry page, an http_sd answer, a file_sd file) read.
MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
#: Above this a document is decoded in a worker thread (a 10 MB one takes ~100 ms).
_DECODE_IN_THREAD_ABOVE = 256 * 1024
#: Examples kept per skip reason, for the log and `alivemcp discover`.
EXAMPLES_PER_REASON = 3
_SHOWN_CHARS = 200


def shown(value: object, limit: int = _SHOWN_CHARS) -> str:
    """A value from a source as it may appear in a message: its repr, cleaned and cut."""
    return clean_text(repr(value), limit)


class DiscoveryError(Exception):
    """A source's read failed; ``reason`` is one of :data:`ERROR_REASONS`, ``str()`` one
    clean line saying what happened."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(reason, message)
        self.reason = reason
        self.message = clean_text(message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class Candidate:
    """One target a source listed, before the template makes it a check."""

    #: The check's name (``<source>/<server name>``, ``<source>/<target>``).
    name: str
    #: What fills the probe's target param (for ``mcp_endpoint``, the URL).
    target: str
    #: What the template's overrides' ``server`` globs are matched against.
    match: str
    origin: DiscoveredOrigin
    #: Discovery's own labels (``discovery``, and ``server``, ``version``, ``remote``).
    identity: Mapping[str, str]
    #: The source's labels for the target (an SD group's), values cleaned.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: What the source tells of the target (``auth_gated_ok``...), for params the probe has.
    extra_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Found:
    """A source's answer: its candidates, and what it left out by reason (with examples)."""

    candidates: list[Candidate] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)

    def add(self, candidate: Candidate) -> bool:
        """Keep ``candidate``; False (and nothing kept) when its name is taken already."""
        if candidate.name in self.names:
            return False
        self.names.add(candidate.name)
        self.candidates.append(candidate)
        return True

    def skip(self, reason: str, why: str, count: int = 1) -> None:
        self.skipped[reason] += count
        kept = self.examples.setdefault(reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append(clean_text(why, 300))


def _reason_of(exc: HttpError) -> str:
    if isinstance(exc, BodyTooLarge):
        return "too_large"
    if isinstance(exc, RequestTimeout):
        return "timeout"
    if isinstance(exc, DnsError):
        return "dns"
    if isinstance(exc, TlsError):
        return "tls"
    if isinstance(exc, ConnectError):  # (also a closed connection, a proxy refusing)
        return "connect"
    if isinstance(exc, ProtocolError) and not isinstance(exc, InvalidRequest):
        return "protocol"
    return "other"


async def get_json(
    http: HttpClients,
    url: str,
    *,
    what: str,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    json_content_type: bool = False,
) -> Any:
    """GET ``url`` and decode its JSON answer (200 only; at most :data:`MAX_DOCUMENT_BYTES`).
    ``json_content_type``: also require ``Content-Type: application/json``. Raises
    :class:`DiscoveryError` naming ``what``."""
    try:
        fetched = await http.fetch(
            "GET",
            url,
            timeout=timeout,
            headers={"Accept": "application/json", **(headers or {})},
            max_body_bytes=MAX_DOCUMENT_BYTES,
        )
    except HttpError as exc:
        raise DiscoveryError(_reason_of(exc), f"{what}: {exc}") from None
    if fetched.status != 200:
        raise DiscoveryError("http_status", f"{what}: HTTP {fetched.status}, not 200")
    if json_content_type:
        ctype = (fetched.headers.get("content-type") or "").partition(";")[0].strip().lower()
        if ctype != "application/json":
            raise DiscoveryError(
                "not_json",
                f"{what}: Content-Type {shown(ctype or 'none', 80)}, not application/json",
            )
    return await decode_json(fetched.body, what)


async def decode_json(body: bytes, what: str) -> Any:
    """``body`` as JSON (decoded in a worker thread when large); raises
    :class:`DiscoveryError` (``not_json``)."""
    try:
        if len(body) > _DECODE_IN_THREAD_ABOVE:
            return await asyncio.to_thread(json.loads, body)
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DiscoveryError("not_json", f"{what}: not JSON ({shown(str(exc), 120)})") from None
