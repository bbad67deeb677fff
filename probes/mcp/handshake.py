"""One MCP handshake, the way a real client does it, in whichever era the server speaks.

* ``streamable_http`` (2025-03-26 … 2025-11-25): initialize → notifications/initialized →
  tools/list (when advertised) → optional tools/call → DELETE (always, whatever happened).
  A 404 (400 from the npm reference server) on an established session means it expired:
  initialize again, once.
* ``stateless`` (2026-07-28): server/discover → tools/list → optional tools/call, every request
  carrying ``MCP-Protocol-Version``/``Mcp-Method`` headers and the ``_meta`` envelope.
* ``sse`` (2024-11-05 HTTP+SSE): GET the event stream, POST to its ``endpoint``, read replies
  from the stream.

:class:`Handshake` raises :class:`Down` for what makes a server down, :class:`AuthRejected`
for a 401/403 (the probe decides what that means for the check), :class:`EraMismatch` when a
remembered transport no longer fits; softer problems are collected as ``findings.problems``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urljoin

from alivemcp.plumbing.http import ProbeSession
from probes.mcp.wire import (
    ACCEPT_BOTH,
    LegacySseChannel,
    NotMcp,
    Reply,
    WireError,
    json_kind,
    post,
    same_origin,
    send_delete,
)

__all__ = [
    "KNOWN_VERSIONS",
    "MODERN_VERSION",
    "AuthRejected",
    "Down",
    "Era",
    "EraMismatch",
    "Handshake",
    "HandshakeFacts",
    "HandshakeOptions",
    "ToolCallSpec",
]

CLIENT_INFO = {"name": "alivemcp", "version": "0.1"}
KNOWN_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
MODERN_VERSION = "2026-07-28"
UNSUPPORTED_PROTOCOL_VERSION = -32022
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
_META_CLIENT = "io.modelcontextprotocol/clientInfo"
_META_SERVER = "io.modelcontextprotocol/serverInfo"
_MAX_TOOL_PAGES = 20
_MAX_TEXT = 200
_FINE_DELETE = frozenset({200, 202, 204, 404, 405})
#: Redirects followed per request: only 307/308 (which keep the method and body), only to the
#: same scheme, host and port (credentials never go to another origin).
_MAX_REDIRECTS = 3
_FOLLOWED_REDIRECTS = frozenset({307, 308})
#: What a session id must be (MCP: visible ASCII, 0x21-0x7E); it is echoed in every request.
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,1024}")
#: How servers answer a request on an expired session: 404 (Python SDK, the spec), 400 (the npm
#: reference server).
_SESSION_GONE = frozenset({400, 404})


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


def _short(value: object, limit: int = _MAX_TEXT) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _as_json(value: object) -> str:
    return _short(json.dumps(value, default=str))


def _rpc_error(message: Mapping[str, Any]) -> str:
    error = message.get("error")
    if not isinstance(error, dict):
        return f"that is {json_kind(error)}, not an error object"
    code, text = error.get("code"), error.get("message")
    shown_code = (
        str(code)
        if isinstance(code, int) and not isinstance(code, bool)
        else (f"(code is {json_kind(code)})")
    )
    shown_text = _short(text) if isinstance(text, str) else f"(message is {json_kind(text)})"
    return f"{shown_code}: {shown_text}"


def _check_server_info(info: object, phase: str) -> tuple[str | None, str | None]:
    """serverInfo's name and version; raises :class:`Down` when it has the wrong shape."""
    if info is None:
        return None, None
    if not isinstance(info, dict):
        raise Down(f"{phase}: serverInfo is {json_kind(info)}, not an object")
    found: list[str | None] = []
    for key in ("name", "version"):
        value = info.get(key)
        if value is not None and not isinstance(value, str):
            raise Down(f"{phase}: serverInfo.{key} is {json_kind(value)}, not a string")
        found.append(_short(value) if value is not None else None)
    return found[0], found[1]


def _check_capabilities(result: Mapping[str, Any], phase: str) -> None:
    capabilities = result.get("capabilities")
    if capabilities is None:
        return
    if not isinstance(capabilities, dict):
        raise Down(f"{phase}: capabilities is {json_kind(capabilities)}, not an object")
    tools = capabilities.get("tools")
    if tools is not None and not isinstance(tools, dict):
        raise Down(f"{phase}: capabilities.tools is {json_kind(tools)}, not an object")


def _supported_versions(message: Mapping[str, Any] | None) -> list[str] | None:
    if not message or not isinstance(message.get("error"), dict):
        return None
    data = message["error"].get("data")
    if isinstance(data, dict) and isinstance(data.get("supported"), list):
        return [str(v) for v in data["supported"]]
    return None


def _speaks_modern(message: Mapping[str, Any] | None) -> bool:
    """A -32022 answer, or a supported-versions list naming 2026-07-28."""
    if not message or not isinstance(message.get("error"), dict):
        return False
    supported = _supported_versions(message)
    if supported is not None:
        return MODERN_VERSION in supported
    return bool(message["error"].get("code") == UNSUPPORTED_PROTOCOL_VERSION)


class Handshake:
    """One run's MCP conversation. Not reused between runs."""

    def __init__(self, options: HandshakeOptions, session: ProbeSession, deadline: float) -> None:
        self.o = options
        self.session = session
        self.deadline = deadline
        self.facts = HandshakeFacts()
        #: The step under way (for a reason when the server's data surprises the probe).
        self.phase = "start"
        #: The endpoint URL; a same-origin 307/308 redirect replaces it for the rest of the run.
        self.url = options.url
        self._ids = 0
        self._session_id: str | None = None
        self._reinitialized = False
        self._loop = asyncio.get_running_loop()
        self._base_headers = {
            "Accept": ACCEPT_BOTH,
            "Content-Type": "application/json",
            **options.headers,
        }

    # -- plumbing ----------------------------------------------------------------------------

    def _timeout(self, phase: str) -> float:
        remaining = self.deadline - self._loop.time()
        if remaining <= 0.05:
            raise Down(f"{phase}: the check's timeout ran out before this step")
        return min(self.o.request_timeout, remaining)

    def _request(self, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        return message

    def _note_first(self, reply: Reply) -> None:
        if self.facts.first_request_seconds is None:
            self.facts.first_request_seconds = reply.seconds

    async def _post(self, message: dict[str, Any], headers: Mapping[str, str], phase: str) -> Reply:
        self.phase = phase
        url = self.url
        for hop in range(_MAX_REDIRECTS + 1):
            try:
                reply = await post(
                    self.session, url, message, headers, timeout=self._timeout(phase)
                )
            except WireError as exc:
                raise Down(f"{phase}: {exc}") from exc
            except NotMcp as exc:
                raise Down(f"{phase}: not MCP: {exc}") from exc
            self.facts.resumptions += reply.resumptions
            target = self._redirect_target(reply, url)
            if target is None or hop == _MAX_REDIRECTS:
                break
            url = target
        if url != self.url:
            # /mcp -> /mcp/ behind a proxy: talk to the final URL for the rest of the run.
            self.url = url
            self.facts.redirected_to = url
            self.facts.notes.append(f"followed a redirect to {_short(url, 120)}")
        self._note_first(reply)
        return reply

    @staticmethod
    def _redirect_target(reply: Reply, url: str) -> str | None:
        """Where a 307/308 to the same origin points; None for any other answer."""
        location = reply.headers.get("Location")
        if reply.status not in _FOLLOWED_REDIRECTS or not location:
            return None
        try:
            target = urljoin(url, location.strip())
        except ValueError:
            return None
        return target if same_origin(target, url) and target != url else None

    # -- entry -------------------------------------------------------------------------------

    async def run(self, era: Era, *, may_switch: bool) -> None:
        """Talk to the server in ``era``; with ``may_switch``, follow what the server says."""
        if era is Era.STREAMABLE:
            await self._streamable(may_switch)
        elif era is Era.STATELESS:
            await self._stateless(may_switch)
        else:
            await self._legacy(may_switch, after=None)

    # -- streamable HTTP ---------------------------------------------------------------------

    def _session_headers(self) -> dict[str, str]:
        headers = dict(self._base_headers)
        if self._session_id:
            headers["Mcp-Session-Id"] = self._session_id
        if self.facts.protocol_version:
            headers["MCP-Protocol-Version"] = self.facts.protocol_version
        return headers

    def _initialize_message(self) -> dict[str, Any]:
        return self._request(
            "initialize",
            {
                "protocolVersion": self.o.offer,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            },
        )

    async def _streamable(self, may_switch: bool) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers, "initialize")
        if reply.status in (401, 403):
            raise AuthRejected("initialize", reply)
        if _speaks_modern(reply.message) and reply.status in (200, 400):
            if not may_switch:
                raise Down("initialize: the server only speaks 2026-07-28 (transport: stateless)")
            self.facts.notes.append("initialize answered -32022: using 2026-07-28")
            await self._stateless(may_switch=False)
            return
        if reply.status in (400, 404, 405) and may_switch:
            await self._legacy(may_switch=False, after=reply)
            return
        self.facts.era = Era.STREAMABLE
        try:
            result = self._check_initialize(reply)
            self._session_id = self._check_session_id(reply)
            self.facts.phases["initialize"] = reply.seconds
            await self._initialized()
            await self._after_initialize(result, self._send_in_session)
        finally:
            await self._delete()

    async def _reinitialize(self) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers, "re-initialize")
        if reply.status in (401, 403):
            raise AuthRejected("re-initialize", reply)
        self._check_initialize(reply)
        self._session_id = self._check_session_id(reply)
        await self._initialized()

    async def _send_in_session(
        self, method: str, params: Mapping[str, Any] | None, phase: str
    ) -> Reply:
        message = self._request(method, params)
        reply = await self._post(message, self._session_headers(), phase)
        if reply.status in _SESSION_GONE and self._session_id and not self._reinitialized:
            self._reinitialized = True
            self._session_id = None  # gone: nothing to DELETE
            self.facts.notes.append(
                f"session expired during {phase} (HTTP {reply.status}); initialized a new one"
            )
            await self._reinitialize()
            reply = await self._post(self._request(method, params), self._session_headers(), phase)
        return reply

    @staticmethod
    def _check_session_id(reply: Reply) -> str | None:
        session_id = reply.headers.get("Mcp-Session-Id") or None
        if session_id is not None and not _SESSION_ID.fullmatch(session_id):
            raise Down(
                f"initialize: the Mcp-Session-Id header {_short(session_id, 60)!r} is not "
                "visible ASCII (it could not be sent back)"
            )
        return session_id

    async def _initialized(self) -> None:
        self.phase = "notifications/initialized"
        message = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        try:
            reply = await post(
                self.session,
                self.url,
                message,
                self._session_headers(),
                timeout=self._timeout("notifications/initialized"),
            )
        except (WireError, NotMcp) as exc:
            self.facts.problems.append(f"notifications/initialized: {exc}")
            return
        if reply.status in _SESSION_GONE and self._session_id and not self._reinitialized:
            self._reinitialized = True
            self._session_id = None
            self.facts.notes.append(
                "session expired right after initialize "
                f"(HTTP {reply.status}); initialized a new one"
            )
            await self._reinitialize()
            return
        if reply.status not in (200, 202, 204):
            self.facts.problems.append(f"notifications/initialized: HTTP {reply.status}")

    async def _delete(self) -> None:
        if not self._session_id:
            return
        self.phase = "DELETE of the session"
        headers = self._session_headers()
        headers.pop("Content-Type", None)
        remaining = self.deadline - self._loop.time()
        status = await send_delete(
            self.session,
            self.url,
            headers,
            timeout=max(0.05, min(self.o.request_timeout, remaining)),
        )
        self.facts.delete_status = status
        if status not in _FINE_DELETE:
            self.facts.notes.append(f"DELETE of the session: {status}")

    def _check_initialize(self, reply: Reply) -> dict[str, Any]:
        location = reply.headers.get("Location")
        if 300 <= reply.status < 400 and location:
            followed = self._redirect_target(reply, self.url) is not None
            why = (
                f"stopped after {_MAX_REDIRECTS} redirects"
                if followed
                else "redirects are not followed"
            )
            raise Down(f"initialize: HTTP {reply.status} redirect to {_short(location)} ({why})")
        if reply.status >= 300:
            raise Down(f"initialize: HTTP {reply.status}")
        message = reply.message
        if message is None:
            raise Down(f"initialize: HTTP {reply.status} without a JSON-RPC response")
        if "error" in message:
            raise Down(f"initialize returned JSON-RPC error {_rpc_error(message)}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise Down(f"initialize: the result is {json_kind(result)}, not an object")
        version = result.get("protocolVersion")
        if not isinstance(version, str):
            raise Down(f"initialize: protocolVersion is {json_kind(version)}, not a string")
        if version not in KNOWN_VERSIONS:
            raise Down(
                f"server negotiated unknown protocol version {_short(version, 60)!r} "
                f"(offered {self.o.offer})"
            )
        name, server_version = _check_server_info(result.get("serverInfo"), "initialize")
        _check_capabilities(result, "initialize")
        self.facts.protocol_version = version
        self.facts.server_name, self.facts.server_version = name, server_version
        return result

    # -- what every era does after the handshake ---------------------------------------------

    async def _after_initialize(
        self,
        result: Mapping[str, Any],
        send: Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]],
    ) -> None:
        capabilities = result.get("capabilities")
        advertises = isinstance(capabilities, dict) and "tools" in capabilities
        wanted = self.o.list_tools and (
            advertises or bool(self.o.required_tools) or self.o.call is not None
        )
        if not advertises:
            self.facts.notes.append("the server advertises no tools capability")
        if wanted:
            await self._tools_list(send)
        if self.o.required_tools and self.facts.tools is not None:
            names = {t["name"] for t in self.facts.tools}
            missing = [n for n in self.o.required_tools if n not in names]
            if missing:
                self.facts.problems.append("required tool(s) missing: " + ", ".join(missing))
        if self.o.call is not None:
            await self._tools_call(send, self.o.call)

    async def _tools_list(
        self, send: Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]]
    ) -> None:
        tools: list[dict[str, Any]] = []
        names: set[str] = set()
        cursors: set[str] = set()
        cursor: str | None = None
        elapsed = 0.0
        for _ in range(_MAX_TOOL_PAGES):
            params = {"cursor": cursor} if cursor else None
            try:
                reply = await send("tools/list", params, "tools/list")
            except Down as exc:
                self.facts.problems.append(str(exc))
                return
            elapsed += reply.seconds
            result = self._result_of(reply, "tools/list")
            if result is None:
                return
            problem = _page_problem(result.get("tools"), names)
            if problem is not None:
                self.facts.problems.append(f"tools/list: {problem}")
                return
            tools.extend(result["tools"])
            cursor = result.get("nextCursor")
            if cursor is not None and not isinstance(cursor, str):
                self.facts.problems.append(
                    f"tools/list: nextCursor is {json_kind(cursor)}, not a string"
                )
                return
            if not cursor:
                break
            if cursor in cursors:
                self.facts.problems.append(
                    f"tools/list: nextCursor {_short(cursor, 60)!r} repeats (pagination loops)"
                )
                return
            cursors.add(cursor)
        else:
            self.facts.notes.append(f"tools/list: stopped after {_MAX_TOOL_PAGES} pages")
        try:
            digest = surface_hash(tools)
        except (ValueError, TypeError, RecursionError):
            self.facts.problems.append(
                "tools/list: an inputSchema cannot be serialized (nested too deeply)"
            )
            return
        self.facts.phases["tools_list"] = elapsed
        self.facts.tools = tools
        self.facts.tools_digest = digest

    def _result_of(self, reply: Reply, phase: str) -> dict[str, Any] | None:
        """The result object, or None after recording the problem."""
        if reply.status >= 300 or reply.message is None:
            self.facts.problems.append(
                f"{phase}: HTTP {reply.status}"
                + ("" if reply.status >= 300 else " without a response")
            )
            return None
        if "error" in reply.message:
            self.facts.problems.append(f"{phase}: JSON-RPC error {_rpc_error(reply.message)}")
            return None
        result = reply.message.get("result")
        if not isinstance(result, dict):
            self.facts.problems.append(f"{phase}: the result is {json_kind(result)}, not an object")
            return None
        return result

    async def _tools_call(
        self,
        send: Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]],
        call: ToolCallSpec,
    ) -> None:
        phase = f"tools/call {call.name}"
        try:
            reply = await send(
                "tools/call", {"name": call.name, "arguments": call.arguments}, phase
            )
        except Down as exc:
            self.facts.problems.append(str(exc))
            return
        self.facts.phases["tools_call"] = reply.seconds
        result = self._result_of(reply, phase)
        if result is None:
            return
        content = result.get("content")
        if content is not None and not isinstance(content, list):
            self.facts.problems.append(f"{phase}: content is {json_kind(content)}, not a list")
            return
        if not all(isinstance(c, dict) for c in content or []):
            self.facts.problems.append(f"{phase}: content holds an item that is not an object")
            return
        is_error = result.get("isError")
        if is_error is not None and not isinstance(is_error, bool):
            self.facts.problems.append(f"{phase}: isError is {json_kind(is_error)}, not a boolean")
            return
        structured = result.get("structuredContent")
        if structured is not None and not isinstance(structured, dict):
            self.facts.problems.append(
                f"{phase}: structuredContent is {json_kind(structured)}, not an object"
            )
            return
        texts = [c["text"] for c in content or [] if isinstance(c.get("text"), str)]
        if is_error:
            self.facts.problems.append(
                f"{phase}: the tool reported an error: {_short(' '.join(texts))}"
            )
            return
        if call.expect_contains is not None:
            haystack = "\n".join(texts)
            if "structuredContent" in result:
                try:
                    haystack += "\n" + json.dumps(result["structuredContent"], default=str)
                except (ValueError, RecursionError):
                    self.facts.problems.append(
                        f"{phase}: structuredContent cannot be serialized (nested too deeply)"
                    )
                    return
            if call.expect_contains not in haystack:
                self.facts.problems.append(
                    f"{phase}: the result does not contain {call.expect_contains!r}"
                )
                return
        if call.expect_json_path is not None:
            found, value = json_path(result, call.expect_json_path)
            if not found:
                self.facts.problems.append(
                    f"{phase}: {call.expect_json_path} is absent from the result"
                )
            elif call.has_expect_value and value != call.expect_value:
                self.facts.problems.append(
                    f"{phase}: {call.expect_json_path} is {_as_json(value)}, "
                    f"expected {_as_json(call.expect_value)}"
                )

    # -- 2026-07-28 (stateless) --------------------------------------------------------------

    def _modern_headers(self, method: str, name: str | None = None) -> dict[str, str]:
        headers = {
            **self._base_headers,
            "MCP-Protocol-Version": MODERN_VERSION,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        return headers

    def _modern_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        meta = {_META_VERSION: MODERN_VERSION, _META_CAPABILITIES: {}, _META_CLIENT: CLIENT_INFO}
        return {**(params or {}), "_meta": meta}

    async def _send_modern(
        self, method: str, params: Mapping[str, Any] | None, phase: str
    ) -> Reply:
        name = params.get("name") if method == "tools/call" and params else None
        return await self._post(
            self._request(method, self._modern_params(params)),
            self._modern_headers(method, name),
            phase,
        )

    async def _stateless(self, may_switch: bool) -> None:
        reply = await self._send_modern("server/discover", None, "server/discover")
        if reply.status in (401, 403):
            raise AuthRejected("server/discover", reply)
        message = reply.message
        if reply.status >= 300 or message is None or "error" in message:
            supported = _supported_versions(message)
            if supported is not None and MODERN_VERSION not in supported:
                if may_switch:
                    raise EraMismatch("server/discover: 2026-07-28 is no longer supported")
                raise Down(
                    "server/discover: the server does not support 2026-07-28 "
                    f"(it supports {', '.join(supported[:5])})"
                )
            if may_switch and reply.status in (400, 404, 405):
                raise EraMismatch(f"server/discover: HTTP {reply.status}")
            if message is not None and "error" in message:
                raise Down(f"server/discover returned JSON-RPC error {_rpc_error(message)}")
            raise Down(f"server/discover: HTTP {reply.status}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise Down(f"server/discover: the result is {json_kind(result)}, not an object")
        meta = result.get("_meta")
        info = meta.get(_META_SERVER) if isinstance(meta, dict) else None
        info = info if info is not None else result.get("serverInfo")
        name, version = _check_server_info(info, "server/discover")
        _check_capabilities(result, "server/discover")
        self.facts.era = Era.STATELESS
        self.facts.protocol_version = MODERN_VERSION
        self.facts.phases["initialize"] = reply.seconds
        self.facts.server_name, self.facts.server_version = name, version
        await self._after_initialize(result, self._send_modern)

    # -- legacy HTTP+SSE ---------------------------------------------------------------------

    async def _legacy(self, may_switch: bool, after: Reply | None) -> None:
        """``after``: the streamable POST reply that sent us here (for the reason if this fails
        too)."""
        headers = dict(self.o.headers)
        self.phase = "legacy SSE stream"
        channel = LegacySseChannel(self.session, self.url, headers)
        try:
            try:
                await channel.open(
                    timeout=self._timeout("legacy SSE stream"),
                    lifetime=self.deadline - self._loop.time(),
                )
            except NotMcp as exc:
                if channel.open_status in (401, 403):
                    raise AuthRejected(
                        "legacy SSE stream",
                        Reply(channel.open_status, channel.open_headers, None, "", 0.0),
                    ) from exc
                if after is not None:
                    raise Down(f"initialize: HTTP {after.status}; and {exc}") from exc
                if may_switch:
                    raise EraMismatch(str(exc)) from exc
                raise Down(f"legacy SSE stream: {exc}") from exc
            except WireError as exc:
                raise Down(f"legacy SSE stream: {exc}") from exc
            self.facts.era = Era.LEGACY

            async def send(method: str, params: Mapping[str, Any] | None, phase: str) -> Reply:
                self.phase = phase
                try:
                    reply = await channel.send(
                        self._request(method, params), timeout=self._timeout(phase)
                    )
                except (WireError, NotMcp) as exc:
                    raise Down(f"{phase}: {exc}") from exc
                self._note_first(reply)
                return reply

            reply = await send(
                "initialize",
                {
                    "protocolVersion": self.o.offer,
                    "capabilities": {},
                    "clientInfo": CLIENT_INFO,
                },
                "initialize",
            )
            if reply.status in (401, 403):
                raise AuthRejected("initialize", reply)
            result = self._check_initialize(reply)
            self.facts.phases["initialize"] = reply.seconds
            try:
                notified = await channel.send(
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    timeout=self._timeout("notifications/initialized"),
                )
                if notified.status not in (200, 202, 204):
                    self.facts.problems.append(f"notifications/initialized: HTTP {notified.status}")
            except (WireError, NotMcp) as exc:
                self.facts.problems.append(f"notifications/initialized: {exc}")
            await self._after_initialize(result, send)
        finally:
            await channel.aclose()


def _page_problem(page: object, names: set[str]) -> str | None:
    """What is wrong with one page of tools/list (None: nothing); adds its names to ``names``."""
    if not isinstance(page, list):
        return f"the result has no list of named tools (tools is {json_kind(page)})"
    for index, tool in enumerate(page):
        if not isinstance(tool, dict):
            return f"the result has no list of named tools (tool #{index} is {json_kind(tool)})"
        name = tool.get("name")
        if not isinstance(name, str):
            return (
                "the result has no list of named tools "
                f"(tool #{index} has a name that is {json_kind(name)})"
            )
        if name in names:
            return f"tool {_short(name, 64)!r} is listed twice"
        names.add(name)
        schema = tool.get("inputSchema")
        if schema is not None and not isinstance(schema, dict):
            return f"tool {_short(name, 64)!r} has an inputSchema that is {json_kind(schema)}"
    return None


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def json_path(document: Any, path: str) -> tuple[bool, Any]:
    """Evaluate a dotted path with list indexes (``structuredContent.sum``,
    ``content[0].text``; a leading ``$.`` is allowed). Returns (found, value)."""
    path = path.removeprefix("$").removeprefix(".")
    value = document
    for match in _PATH_PART.finditer(path):
        key, index = match.group(1), match.group(2)
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        else:
            i = int(index)
            if not isinstance(value, list) or i >= len(value):
                return False, None
            value = value[i]
    return True, value
