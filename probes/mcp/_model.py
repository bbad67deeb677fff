"""What an MCP handshake is asked to do (:class:`HandshakeOptions`), what it learns
(:class:`HandshakeFacts`, with the rest of the server's surface in :class:`SurfaceParts`), how
it sends a request once the server is initialized (:data:`Send`), and how it ends when the
server fails it (:class:`Down`, :class:`AuthRejected`, :class:`EraMismatch`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from probes.mcp._transport import Reply

__all__ = [
    "AuthRejected",
    "Down",
    "Era",
    "EraMismatch",
    "HandshakeFacts",
    "HandshakeOptions",
    "Send",
    "SurfaceParts",
    "ToolCallSpec",
    "surface_hash",
]

#: Sends one request in the era the handshake speaks: (method, params, phase) -> its reply;
#: raises :class:`Down` when the request itself fails.
Send = Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]]


class Era(StrEnum):
    STREAMABLE = "streamable_http"
    STATELESS = "stateless"
    LEGACY = "sse"


class Down(Exception):
    """The server is down (or not an MCP server); the message is the reason."""


class AuthRejected(Exception):
    """The server answered 401/403."""

    def __init__(self, phase: str, reply: Reply) -> None:
        super().__init__(f"{phase}: HTTP {reply.status}")
        self.phase = phase
        self.reply = reply


class EraMismatch(Exception):
    """The transport tried does not fit the server (redetect)."""


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    name: str
    arguments: Mapping[str, Any]
    expect_contains: str | None
    expect_json_path: str | None
    expect_value: Any
    has_expect_value: bool


@dataclass(frozen=True, slots=True)
class HandshakeOptions:
    url: str
    offer: str
    headers: Mapping[str, str]
    request_timeout: float
    list_tools: bool
    required_tools: tuple[str, ...]
    call: ToolCallSpec | None
    #: Collect the server's surface beyond its tools (instructions, prompts, resources).
    collect_surface: bool = False
    #: Read prompts/list and resources/list this run (else the last lists read stand in).
    collect_lists: bool = True


@dataclass(slots=True)
class SurfaceParts:
    """The server's surface beyond its tools, as one run collected it (the tools are
    ``HandshakeFacts.tools``). ``missing`` says why this run's surface is incomplete (a list
    that failed or was cut short): an incomplete surface is not reported at all, as a partial
    one would read as a removal."""

    instructions: str | None = None
    prompts: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    missing: str | None = None
    #: The lists that failed this run ("prompts", "resources"), or were not read (the
    #: probe reads them every ``lists_every``): the last lists read stand in for them.
    failed: set[str] = field(default_factory=set)
    #: The lists were not asked for this run (``failed`` then names them without a failure).
    skipped: bool = False
    #: Time spent on prompts/list and resources/list (kept out of the handshake's latency).
    seconds: float = 0.0


@dataclass(slots=True)
class HandshakeFacts:
    """What one run's handshake learnt about the server (the verdict is made from it by
    ``mcp_endpoint``): transport, versions, tools, per-phase seconds, and the problems found."""

    era: Era | None = None
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    tools: list[dict[str, Any]] | None = None
    phases: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    delete_status: int | str | None = None
    first_request_seconds: float | None = None
    #: Hash of the tool surface (set with ``tools``).
    tools_digest: str | None = None
    #: Event streams resumed with ``Last-Event-ID`` during the run.
    resumptions: int = 0
    #: Where the endpoint redirected the probe (a same-origin 307/308 that was followed).
    redirected_to: str | None = None
    #: tools/list had more pages than the probe reads (``tools`` holds the first ones only).
    tools_cut_short: bool = False
    #: The rest of the surface (None: not collected, or the tools could not be listed).
    surface: SurfaceParts | None = None

    def tools_hash(self) -> str | None:
        """Hash of the sorted tool names and input schemas: changes when the surface drifts."""
        return self.tools_digest if self.tools is not None else None


#: ``json.dumps(..., sort_keys=True, separators=(",", ":"), default=str)`` without building an
#: encoder per call.
_SORTED_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def surface_hash(tools: list[dict[str, Any]]) -> str:
    """Hash of the tool names and input schemas, sorted by name. Raises ValueError or
    RecursionError for a schema JSON cannot serialize (the caller judges the server)."""
    surface = sorted(
        ((t["name"], t.get("inputSchema")) for t in tools),
        key=lambda pair: pair[0],
    )
    digest = hashlib.sha256(_SORTED_COMPACT.encode(surface).encode())
    return digest.hexdigest()[:16]
