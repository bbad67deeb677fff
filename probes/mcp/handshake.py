"""One MCP handshake, the way a real client does it, in whichever era the server speaks.

* ``streamable_http`` (2025-03-26 … 2025-11-25): initialize → notifications/initialized →
  tools/list (when advertised) → optional tools/call → prompts/list and resources/list (for
  the tool surface, when advertised) → DELETE (always, whatever happened).
  A 404 (400 from the npm reference server) on an established session means it expired:
  initialize again, once.
* ``stateless`` (2026-07-28): server/discover → tools/list → optional tools/call, every request
  carrying ``MCP-Protocol-Version``/``Mcp-Method`` headers and the ``_meta`` envelope.
* ``sse`` (2024-11-05 HTTP+SSE): GET the event stream, POST to its ``endpoint``, read replies
  from the stream.

:class:`Handshake` raises :class:`Down` for what makes a server down, :class:`AuthRejected`
for a 401/403 (the probe decides what that means for the check), :class:`EraMismatch` when a
remembered transport no longer fits; softer problems are collected as ``facts.problems``.
Those and the other names a run ends with are in :mod:`probes.mcp._model` (importable from here
too); the steps every era takes after initialize (tools/list, tools/call) in
:mod:`probes.mcp._tools`, and the rest of the tool surface in :mod:`probes.mcp._surface`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urljoin

from alivemcp.plumbing.http import ProbeSession
from probes.mcp._jsonrpc import rpc_error, short
from probes.mcp._model import (
    AuthRejected,
    Down,
    Era,
    EraMismatch,
    HandshakeFacts,
    HandshakeOptions,
    ToolCallSpec,
)
from probes.mcp._tools import after_initialize
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
#: What a notification may be answered with.
_FINE_NOTIFIED = frozenset({200, 202, 204})
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


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
        found.append(short(value) if value is not None else None)
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


def _result_object(message: Mapping[str, Any], phase: str) -> dict[str, Any]:
    """The result of a response; raises :class:`Down` for a JSON-RPC error or a result that
    is not an object."""
    if "error" in message:
        raise Down(f"{phase} returned JSON-RPC error {rpc_error(message)}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise Down(f"{phase}: the result is {json_kind(result)}, not an object")
    return result


def _refuse_auth(reply: Reply, phase: str) -> None:
    """A 401/403 ends the run with :class:`AuthRejected`: the probe decides what it means."""
    if reply.status in (401, 403):
        raise AuthRejected(phase, reply)


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
            self.facts.notes.append(f"followed a redirect to {short(url, 120)}")
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

    def _initialize_params(self) -> dict[str, Any]:
        return {"protocolVersion": self.o.offer, "capabilities": {}, "clientInfo": CLIENT_INFO}

    def _initialize_message(self) -> dict[str, Any]:
        return self._request("initialize", self._initialize_params())

    async def _streamable(self, may_switch: bool) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers, "initialize")
        _refuse_auth(reply, "initialize")
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
            await after_initialize(result, self.o, self.facts, self._send_in_session)
        finally:
            await self._delete()

    async def _reinitialize(self) -> None:
        reply = await self._post(self._initialize_message(), self._base_headers, "re-initialize")
        _refuse_auth(reply, "re-initialize")
        self._check_initialize(reply)
        self._session_id = self._check_session_id(reply)
        await self._initialized()

    async def _send_in_session(
        self, method: str, params: Mapping[str, Any] | None, phase: str
    ) -> Reply:
        message = self._request(method, params)
        reply = await self._post(message, self._session_headers(), phase)
        if await self._renewed_expired_session(reply, f"during {phase}"):
            reply = await self._post(self._request(method, params), self._session_headers(), phase)
        return reply

    async def _renewed_expired_session(self, reply: Reply, when: str) -> bool:
        """Whether ``reply`` said the session expired and a new one was initialized (once per
        run: a server that expires the new one too is answered as it answers)."""
        if reply.status not in _SESSION_GONE or not self._session_id or self._reinitialized:
            return False
        self._reinitialized = True
        self._session_id = None  # gone: nothing to DELETE
        self.facts.notes.append(
            f"session expired {when} (HTTP {reply.status}); initialized a new one"
        )
        await self._reinitialize()
        return True

    @staticmethod
    def _check_session_id(reply: Reply) -> str | None:
        session_id = reply.headers.get("Mcp-Session-Id") or None
        if session_id is not None and not _SESSION_ID.fullmatch(session_id):
            raise Down(
                f"initialize: the Mcp-Session-Id header {short(session_id, 60)!r} is not "
                "visible ASCII (it could not be sent back)"
            )
        return session_id

    async def _initialized(self) -> None:
        self.phase = "notifications/initialized"
        reply = await self._notify_initialized(
            lambda timeout: post(
                self.session, self.url, _INITIALIZED, self._session_headers(), timeout=timeout
            )
        )
        if reply is not None and not await self._renewed_expired_session(
            reply, "right after initialize"
        ):
            self._judge_notified(reply)

    async def _notify_initialized(self, send: Callable[[float], Awaitable[Reply]]) -> Reply | None:
        """notifications/initialized, sent by ``send`` (given the request's timeout); its
        failure is a problem (None), not down."""
        try:
            return await send(self._timeout("notifications/initialized"))
        except (WireError, NotMcp) as exc:
            self.facts.problems.append(f"notifications/initialized: {exc}")
            return None

    def _judge_notified(self, reply: Reply) -> None:
        if reply.status not in _FINE_NOTIFIED:
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
            raise Down(f"initialize: HTTP {reply.status} redirect to {short(location)} ({why})")
        if reply.status >= 300:
            raise Down(f"initialize: HTTP {reply.status}")
        message = reply.message
        if message is None:
            raise Down(f"initialize: HTTP {reply.status} without a JSON-RPC response")
        result = _result_object(message, "initialize")
        version = result.get("protocolVersion")
        if not isinstance(version, str):
            raise Down(f"initialize: protocolVersion is {json_kind(version)}, not a string")
        if version not in KNOWN_VERSIONS:
            raise Down(
                f"server negotiated unknown protocol version {short(version, 60)!r} "
                f"(offered {self.o.offer})"
            )
        name, server_version = _check_server_info(result.get("serverInfo"), "initialize")
        _check_capabilities(result, "initialize")
        self.facts.protocol_version = version
        self.facts.server_name, self.facts.server_version = name, server_version
        return result

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
        _refuse_auth(reply, "server/discover")
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
                raise Down(f"server/discover returned JSON-RPC error {rpc_error(message)}")
            raise Down(f"server/discover: HTTP {reply.status}")
        result = _result_object(message, "server/discover")
        meta = result.get("_meta")
        info = meta.get(_META_SERVER) if isinstance(meta, dict) else None
        info = info if info is not None else result.get("serverInfo")
        name, version = _check_server_info(info, "server/discover")
        _check_capabilities(result, "server/discover")
        self.facts.era = Era.STATELESS
        self.facts.protocol_version = MODERN_VERSION
        self.facts.phases["initialize"] = reply.seconds
        self.facts.server_name, self.facts.server_version = name, version
        await after_initialize(result, self.o, self.facts, self._send_modern)

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

            reply = await send("initialize", self._initialize_params(), "initialize")
            _refuse_auth(reply, "initialize")
            result = self._check_initialize(reply)
            self.facts.phases["initialize"] = reply.seconds
            notified = await self._notify_initialized(
                lambda timeout: channel.send(_INITIALIZED, timeout=timeout)
            )
            if notified is not None:
                self._judge_notified(notified)
            await after_initialize(result, self.o, self.facts, send)
        finally:
            await channel.aclose()
