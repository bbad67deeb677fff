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

from alivemcp.plumbing.http import ProbeSession
from probes.mcp.wire import (
    ACCEPT_BOTH,
    LegacySseChannel,
    NotMcp,
    Reply,
    WireError,
    post,
    send_delete,
)

__all__ = [
    "KNOWN_VERSIONS",
    "MODERN_VERSION",
    "AuthRejected",
    "Down",
    "Era",
    "EraMismatch",
    "Findings",
    "Handshake",
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
class Findings:
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

    def tools_hash(self) -> str | None:
        """Hash of the sorted tool names and input schemas: changes when the surface drifts."""
        if self.tools is None:
            return None
        surface = sorted(
            (str(t.get("name")), t.get("inputSchema")) for t in self.tools
        )
        digest = hashlib.sha256(
            json.dumps(surface, sort_keys=True, separators=(",", ":"), default=str).encode()
        )
        return digest.hexdigest()[:16]


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def _as_json(value: object) -> str:
    return _short(json.dumps(value, default=str))


def _rpc_error(message: Mapping[str, Any]) -> str:
    error = message.get("error")
    if not isinstance(error, dict):
        return _short(error)
    return f"{error.get('code')}: {_short(error.get('message'))}"


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
    return message["error"].get("code") == UNSUPPORTED_PROTOCOL_VERSION


class Handshake:
    """One run's MCP conversation. Not reused between runs."""

    def __init__(
        self, options: HandshakeOptions, session: ProbeSession, deadline: float
    ) -> None:
        self.o = options
        self.session = session
        self.deadline = deadline
        self.findings = Findings()
        self._ids = 0
        self._session_id: str | None = None
        self._reinitialized = False
        self._loop = asyncio.get_running_loop()
        self._base_headers = {
            "Accept": ACCEPT_BOTH, "Content-Type": "application/json", **options.headers
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
        if self.findings.first_request_seconds is None:
            self.findings.first_request_seconds = reply.seconds

    async def _post(self, message: dict[str, Any], headers: Mapping[str, str], phase: str
                    ) -> Reply:
        try:
            reply = await post(self.session, self.o.url, message, headers,
                               timeout=self._timeout(phase))
        except WireError as exc:
            raise Down(f"{phase}: {exc}") from exc
        except NotMcp as exc:
            raise Down(f"{phase}: not MCP: {exc}") from exc
        self._note_first(reply)
        return reply

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
        if self.findings.protocol_version:
            headers["MCP-Protocol-Version"] = self.findings.protocol_version
        return headers

    def _initialize_message(self) -> dict[str, Any]:
        return self._request("initialize", {
            "protocolVersion": self.o.offer, "capabilities": {}, "clientInfo": CLIENT_INFO,
        })

    async def _streamable(self, may_switch: bool) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers, "initialize")
        if reply.status in (401, 403):
            raise AuthRejected("initialize", reply)
        if _speaks_modern(reply.message) and reply.status in (200, 400):
            if not may_switch:
                raise Down("initialize: the server only speaks 2026-07-28 (transport: stateless)")
            self.findings.notes.append("initialize answered -32022: using 2026-07-28")
            await self._stateless(may_switch=False)
            return
        if reply.status in (400, 404, 405) and may_switch:
            await self._legacy(may_switch=False, after=reply)
            return
        self.findings.era = Era.STREAMABLE
        try:
            result = self._check_initialize(reply)
            self._session_id = reply.headers.get("Mcp-Session-Id") or None
            self.findings.phases["initialize"] = reply.seconds
            await self._initialized()
            await self._after_initialize(result, self._send_in_session)
        finally:
            await self._delete()

    async def _reinitialize(self) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers,
                                 "re-initialize")
        if reply.status in (401, 403):
            raise AuthRejected("re-initialize", reply)
        self._check_initialize(reply)
        self._session_id = reply.headers.get("Mcp-Session-Id") or None
        await self._initialized()

    async def _send_in_session(self, method: str, params: Mapping[str, Any] | None,
                               phase: str) -> Reply:
        message = self._request(method, params)
        reply = await self._post(message, self._session_headers(), phase)
        if reply.status in _SESSION_GONE and self._session_id and not self._reinitialized:
            self._reinitialized = True
            self._session_id = None  # gone: nothing to DELETE
            self.findings.notes.append(f"session expired during {phase} "
                                       f"(HTTP {reply.status}); initialized a new one")
            await self._reinitialize()
            reply = await self._post(self._request(method, params), self._session_headers(),
                                     phase)
        return reply

    async def _initialized(self) -> None:
        message = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        try:
            reply = await post(self.session, self.o.url, message, self._session_headers(),
                               timeout=self._timeout("notifications/initialized"))
        except (WireError, NotMcp) as exc:
            self.findings.problems.append(f"notifications/initialized: {exc}")
            return
        if reply.status in _SESSION_GONE and self._session_id and not self._reinitialized:
            self._reinitialized = True
            self._session_id = None
            self.findings.notes.append("session expired right after initialize "
                                       f"(HTTP {reply.status}); initialized a new one")
            await self._reinitialize()
            return
        if reply.status not in (200, 202, 204):
            self.findings.problems.append(f"notifications/initialized: HTTP {reply.status}")

    async def _delete(self) -> None:
        if not self._session_id:
            return
        headers = self._session_headers()
        headers.pop("Content-Type", None)
        remaining = self.deadline - self._loop.time()
        status = await send_delete(self.session, self.o.url, headers,
                                   timeout=max(0.05, min(self.o.request_timeout, remaining)))
        self.findings.delete_status = status
        if status not in _FINE_DELETE:
            self.findings.notes.append(f"DELETE of the session: {status}")

    def _check_initialize(self, reply: Reply) -> dict[str, Any]:
        if 300 <= reply.status < 400 and reply.headers.get("Location"):
            raise Down(f"initialize: HTTP {reply.status} redirect to "
                       f"{_short(reply.headers.get('Location'))} (redirects are not followed)")
        if reply.status >= 300:
            raise Down(f"initialize: HTTP {reply.status}")
        message = reply.message
        if message is None:
            raise Down(f"initialize: HTTP {reply.status} without a JSON-RPC response")
        if "error" in message:
            raise Down(f"initialize returned JSON-RPC error {_rpc_error(message)}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise Down("initialize: the result is not an object")
        version = result.get("protocolVersion")
        if version not in KNOWN_VERSIONS:
            raise Down(f"server negotiated unknown protocol version {_short(version)!r} "
                       f"(offered {self.o.offer})")
        self.findings.protocol_version = version
        info = result.get("serverInfo")
        if isinstance(info, dict):
            self._server_info(info)
        return result

    def _server_info(self, info: Mapping[str, Any]) -> None:
        name, version = info.get("name"), info.get("version")
        self.findings.server_name = _short(name) if name is not None else None
        self.findings.server_version = _short(version) if version is not None else None

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
            self.findings.notes.append("the server advertises no tools capability")
        if wanted:
            await self._tools_list(send)
        if self.o.required_tools and self.findings.tools is not None:
            names = {str(t.get("name")) for t in self.findings.tools}
            missing = [n for n in self.o.required_tools if n not in names]
            if missing:
                self.findings.problems.append("required tool(s) missing: " + ", ".join(missing))
        if self.o.call is not None:
            await self._tools_call(send, self.o.call)

    async def _tools_list(
        self, send: Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]]
    ) -> None:
        tools: list[dict[str, Any]] = []
        cursor: Any = None
        elapsed = 0.0
        for _ in range(_MAX_TOOL_PAGES):
            params = {"cursor": cursor} if cursor else None
            try:
                reply = await send("tools/list", params, "tools/list")
            except Down as exc:
                self.findings.problems.append(str(exc))
                return
            elapsed += reply.seconds
            result = self._result_of(reply, "tools/list")
            if result is None:
                return
            page = result.get("tools")
            if not isinstance(page, list) or not all(
                isinstance(t, dict) and isinstance(t.get("name"), str) for t in page
            ):
                self.findings.problems.append("tools/list: the result has no list of named tools")
                return
            tools.extend(page)
            cursor = result.get("nextCursor")
            if not cursor:
                break
        else:
            self.findings.notes.append(f"tools/list: stopped after {_MAX_TOOL_PAGES} pages")
        self.findings.phases["tools_list"] = elapsed
        self.findings.tools = tools

    def _result_of(self, reply: Reply, phase: str) -> dict[str, Any] | None:
        """The result object, or None after recording the problem."""
        if reply.status >= 300 or reply.message is None:
            self.findings.problems.append(f"{phase}: HTTP {reply.status}"
                                          + ("" if reply.status >= 300 else " without a response"))
            return None
        if "error" in reply.message:
            self.findings.problems.append(f"{phase}: JSON-RPC error {_rpc_error(reply.message)}")
            return None
        result = reply.message.get("result")
        if not isinstance(result, dict):
            self.findings.problems.append(f"{phase}: the result is not an object")
            return None
        return result

    async def _tools_call(
        self,
        send: Callable[[str, Mapping[str, Any] | None, str], Awaitable[Reply]],
        call: ToolCallSpec,
    ) -> None:
        phase = f"tools/call {call.name}"
        try:
            reply = await send("tools/call", {"name": call.name, "arguments": call.arguments},
                               phase)
        except Down as exc:
            self.findings.problems.append(str(exc))
            return
        self.findings.phases["tools_call"] = reply.seconds
        result = self._result_of(reply, phase)
        if result is None:
            return
        texts = [str(c.get("text", "")) for c in result.get("content") or []
                 if isinstance(c, dict)]
        if result.get("isError") is True:
            self.findings.problems.append(f"{phase}: the tool reported an error: "
                                          f"{_short(' '.join(texts))}")
            return
        if call.expect_contains is not None:
            haystack = "\n".join(texts)
            if "structuredContent" in result:
                haystack += "\n" + json.dumps(result["structuredContent"], default=str)
            if call.expect_contains not in haystack:
                self.findings.problems.append(
                    f"{phase}: the result does not contain {call.expect_contains!r}"
                )
                return
        if call.expect_json_path is not None:
            found, value = json_path(result, call.expect_json_path)
            if not found:
                self.findings.problems.append(f"{phase}: {call.expect_json_path} is absent "
                                              "from the result")
            elif call.has_expect_value and value != call.expect_value:
                self.findings.problems.append(
                    f"{phase}: {call.expect_json_path} is {_as_json(value)}, "
                    f"expected {_as_json(call.expect_value)}"
                )

    # -- 2026-07-28 (stateless) --------------------------------------------------------------

    def _modern_headers(self, method: str, name: str | None = None) -> dict[str, str]:
        headers = {**self._base_headers, "MCP-Protocol-Version": MODERN_VERSION,
                   "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        return headers

    def _modern_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        meta = {_META_VERSION: MODERN_VERSION, _META_CAPABILITIES: {}, _META_CLIENT: CLIENT_INFO}
        return {**(params or {}), "_meta": meta}

    async def _send_modern(self, method: str, params: Mapping[str, Any] | None, phase: str
                           ) -> Reply:
        name = params.get("name") if method == "tools/call" and params else None
        return await self._post(self._request(method, self._modern_params(params)),
                                self._modern_headers(method, name), phase)

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
                raise Down("server/discover: the server does not support 2026-07-28 "
                           f"(it supports {', '.join(supported[:5])})")
            if may_switch and reply.status in (400, 404, 405):
                raise EraMismatch(f"server/discover: HTTP {reply.status}")
            if message is not None and "error" in message:
                raise Down(f"server/discover returned JSON-RPC error {_rpc_error(message)}")
            raise Down(f"server/discover: HTTP {reply.status}")
        result = message.get("result")
        if not isinstance(result, dict):
            raise Down("server/discover: the result is not an object")
        self.findings.era = Era.STATELESS
        self.findings.protocol_version = MODERN_VERSION
        self.findings.phases["initialize"] = reply.seconds
        meta = result.get("_meta")
        info = meta.get(_META_SERVER) if isinstance(meta, dict) else None
        info = info if isinstance(info, dict) else result.get("serverInfo")
        if isinstance(info, dict):
            self._server_info(info)
        await self._after_initialize(result, self._send_modern)

    # -- legacy HTTP+SSE ---------------------------------------------------------------------

    async def _legacy(self, may_switch: bool, after: Reply | None) -> None:
        """``after``: the streamable POST reply that sent us here (for the reason if this fails
        too)."""
        headers = dict(self.o.headers)
        channel = LegacySseChannel(self.session, self.o.url, headers)
        try:
            try:
                await channel.open(timeout=self._timeout("legacy SSE stream"),
                                   lifetime=self.deadline - self._loop.time())
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
            self.findings.era = Era.LEGACY

            async def send(method: str, params: Mapping[str, Any] | None, phase: str) -> Reply:
                try:
                    reply = await channel.send(self._request(method, params),
                                               timeout=self._timeout(phase))
                except (WireError, NotMcp) as exc:
                    raise Down(f"{phase}: {exc}") from exc
                self._note_first(reply)
                return reply

            reply = await send("initialize", {
                "protocolVersion": self.o.offer, "capabilities": {}, "clientInfo": CLIENT_INFO,
            }, "initialize")
            if reply.status in (401, 403):
                raise AuthRejected("initialize", reply)
            result = self._check_initialize(reply)
            self.findings.phases["initialize"] = reply.seconds
            try:
                notified = await channel.send(
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    timeout=self._timeout("notifications/initialized"),
                )
                if notified.status not in (200, 202, 204):
                    self.findings.problems.append(
                        f"notifications/initialized: HTTP {notified.status}")
            except (WireError, NotMcp) as exc:
                self.findings.problems.append(f"notifications/initialized: {exc}")
            await self._after_initialize(result, send)
        finally:
            await channel.aclose()


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
