"""``mcp_endpoint``: does this MCP server actually serve MCP right now?

It runs the handshake a real client runs, in whichever transport the server speaks:

* streamable HTTP (protocol revisions 2025-03-26 … 2025-11-25): ``initialize`` (JSON or SSE
  answer, matched by JSON-RPC id), a check that the negotiated protocol version is one we
  know (servers answer an unknown offer with a counter-offer, not an error),
  ``notifications/initialized``, ``tools/list`` when the server advertises tools, an optional
  ``tools/call``, ``prompts/list`` and ``resources/list`` for the tool surface (below), and
  always a ``DELETE`` of the session;
* 2026-07-28 (stateless; detected by a -32022 answer or a supported-versions list naming it):
  ``server/discover`` then ``tools/list`` (and the rest as above);
* legacy HTTP+SSE (2024-11-05; tried when the POST gets 400/404/405): GET the event stream,
  POST to its ``endpoint``.

The transport found is remembered per check and detected again after a failure.

Like the official SDK clients, the probe also:

* resumes an event stream the server ends before its response (2025-11-25 lets a server do
  so after an event carrying an ``id``): GET with ``Last-Event-ID``, ``Mcp-Session-Id`` and
  ``MCP-Protocol-Version``, after the stream's ``retry`` delay (at most 5 s, and within the
  check's timeout), up to 5 times per request (``details.sse_resumptions`` counts them);
* answers the server's own requests on a stream: ``ping`` with an empty result (as the spec
  requires), anything else with "method not found" (the probe offers no client features);
* follows a 307/308 redirect to the same scheme, host and port (``/mcp`` to ``/mcp/`` behind a
  proxy; at most 3), then uses the final URL for the rest of the run (the reason and
  ``details.redirected_to`` say so). Other redirects, and any redirect to another origin, are
  reported, not followed: credentials never go elsewhere.

Connections: ``proxy`` unset uses the ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` environment
variables (as curl does), ``direct`` never uses a proxy, a URL always uses that proxy (its
credentials are a secret). ``tls`` sets a CA bundle and a client certificate (mutual TLS);
``tls_ca_file`` is the older spelling of ``tls.ca_file``. A host that is not ASCII is sent in
its IDNA (punycode) form; one that has none, or a header that HTTP cannot carry (a name that is
not a token, a value with line breaks or characters beyond Latin-1), is a config error.

Verdicts:

* ``up``: the handshake and tools/list succeed within ``degraded_latency``. Also: a 401/403
  with a Bearer challenge, no credentials configured and ``auth_gated_ok: true`` (the reason
  says "auth-gated").
* ``degraded``: initialize works but ``notifications/initialized`` or ``tools/list`` fails or
  has the wrong shape; the handshake took longer than ``degraded_latency``; a required tool is
  missing; the optional tools/call fails or misses its expectation; the TLS certificate expires
  within ``tls_expiry_days``.
  A tools/list with the wrong shape includes: tools not a list, a tool that is not an object
  or has no string name, a name listed twice, an inputSchema that is not an object, a
  nextCursor that is not a string or repeats; a tools/call whose content is not a list of
  objects or whose isError is not a boolean.
* ``down``: DNS/connect/TLS failure, a proxy that refuses or fails, a request timeout
  (including a body that hangs after the headers), HTTP 5xx (or any other unexpected status),
  a body that is not MCP (HTML, invalid JSON, a truncated stream, a body over
  ``max_response_bytes``), a JSON-RPC error to initialize, an unknown negotiated protocol
  version, credentials configured and rejected (401/403), or authentication required while
  ``auth_gated_ok`` is false. Not MCP also covers every malformed answer, each named in the
  reason: JSON that is not strict (NaN, Infinity, invalid UTF-8, lone surrogates, numbers over
  4300 digits, nesting too deep), a batch or a bare value where one response belongs, an id
  that is not a string or number, an initialize result whose protocolVersion is not a string
  or whose serverInfo or capabilities have the wrong types, a session id or event id that is
  not printable ASCII, an event stream that ends without the response and cannot be resumed,
  a legacy ``endpoint`` event that is not a same-origin URL. Anything else the probe did not
  foresee while reading an answer is down too ("server sent something unexpected during
  <step>"); its traceback is logged, in case it is a probe bug.
* ``unknown``: the probe's own configuration is unusable: the OAuth token endpoint fails or
  refuses the client credentials, or a CA, client certificate or key file cannot be loaded.

Tool surface (``tool_surface``; unset: ``pin`` for a written check, ``observe`` for a
discovered one, ``off`` without ``list_tools``): what the server offers its clients' models,
returned as ``ProbeResult.surface`` (the contract's ``Surface``) for the surface consumers, who
keep its versions, compare it with the approved one and alert (``pin``) or only record
(``observe``). Its items, each document holding only the fields the server sent:

* ``tool`` (by name): ``name``, ``title``, ``description``, ``inputSchema``, ``outputSchema``,
  ``annotations``, from every page of tools/list;
* ``instructions`` (named ``instructions``): ``{"instructions": text}``, from the initialize
  or server/discover result, when it is a string;
* ``prompt`` (by name): ``name``, ``title``, ``description``, from every page of
  ``prompts/list``, requested only when the server advertises ``prompts``;
* ``resource`` (by URI): ``uri``, ``name``, ``title``, ``description``, from every page of
  ``resources/list``, requested only when the server advertises ``resources``.

Order, paging, whitespace and number spelling (``1.0`` is ``1``, ``1e2`` is ``100``) are not
part of it (see ``alivemcp.surface``). Tools and instructions are read every run, prompts and
resources every ``lists_every`` (default 10 minutes; the last lists read stand in between:
the two requests nearly doubled a run's CPU against the SDK's server, which offers both).
prompts/list and resources/list come last, after the
optional tools/call, with tools/list's bounds (20 pages, a repeated cursor is a loop); their
time is ``surface_seconds``, kept out of ``total_seconds`` and the latency verdict. The surface
never changes the verdict. When prompts/list or resources/list fails (an error, a wrong
shape, a name listed twice, a timeout, anything not MCP) after an earlier run read it whole,
that run's list stands in (``details.tool_surface.carried_over`` names it): a passing failure
is not a removal, and a server cannot hide a change of its tools by failing prompts/list. When
tools/list fails or is cut short, such a list fails with nothing to stand in, or a document
cannot be put in canonical form, the run has no surface at all (a partial one would read as
removals), ``details.tool_surface`` says why (``unavailable``) and a note says so. A returned
surface is summed up in
``details.tool_surface``: ``digest``, ``mode``, ``items`` (and ``dropped``: items whose
documents were not kept, past the contract's bound; their digests count).

Observations (all optional, present when measured): ``connect_seconds`` (DNS + TCP connect),
``tls_seconds``, ``tls_cert_expiry_seconds``, ``initialize_seconds`` (initialize or
server/discover, excluding connection set-up), ``tools_list_seconds``, ``tools_call_seconds``,
``total_seconds`` (the whole run but ``surface_seconds``), ``surface_seconds`` and ``tools``;
plus ``mcp_server_info{protocol_version, server_name, server_version, transport, tools_hash}
1``. ``details`` carries the same facts as strings, and the tool names on the first run and
whenever the tools hash (sorted names + input schemas; older and coarser than the surface's
digest, kept as it was) changes (the reason of an ``up`` result then says so).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
from typing import Any, ClassVar

from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.http import ClientConfigError, PrivateAddressRefused
from alivemcp.probe import (
    CheckContext,
    Observable,
    Probe,
    ProbeResult,
    Status,
    Surface,
    SurfaceMode,
)
from probes.mcp._jsonrpc import short
from probes.mcp._params import McpEndpointParams
from probes.mcp._report import build_details, decide, observe
from probes.mcp._surface import tool_surface
from probes.mcp.auth import ClientCredentials, TokenUnavailable, bearer_challenge
from probes.mcp.handshake import (
    AuthRejected,
    Down,
    Era,
    EraMismatch,
    Handshake,
    HandshakeFacts,
    HandshakeOptions,
    ToolCallSpec,
)

__all__ = ["McpEndpointParams", "McpEndpointProbe"]

#: Time kept back from the check's timeout so the probe reports its own reason first.
_DEADLINE_MARGIN = 0.25
#: What interpreting a server's data can raise when the data has a shape the probe did not
#: foresee (UnicodeError is a ValueError, KeyError and IndexError are LookupErrors).
_SURPRISES = (TypeError, LookupError, AttributeError, ValueError, RecursionError, ArithmeticError)
#: Distinct surprises logged (with their traceback) per check.
_MAX_LOGGED_SURPRISES = 32

_log = logging.getLogger(__name__)


class McpEndpointProbe(Probe[McpEndpointParams]):
    Params = McpEndpointParams
    summary: ClassVar[str] = "MCP handshake (initialize, tools/list) over any MCP transport"
    target_param: ClassVar[str | None] = "url"
    default_timeout: ClassVar[float | None] = 15.0
    observables = (
        Observable("total_seconds", "Duration of the whole handshake, connection included."),
        Observable("connect_seconds", "DNS lookup plus TCP connect of the first connection."),
        Observable("tls_seconds", "TLS handshake of the first connection."),
        Observable(
            "tls_cert_expiry_seconds",
            "Time until the server certificate expires (negative: expired).",
        ),
        Observable("initialize_seconds", "The server's share of the initialize request."),
        Observable("tools_list_seconds", "The tools/list request."),
        Observable("tools_call_seconds", "The configured tools/call request."),
        Observable("tools", "Tools the server listed."),
        Observable(
            "surface_seconds",
            "The prompts/list and resources/list requests of the tool surface (not in "
            "total_seconds).",
        ),
        Observable(
            "mcp_server_info",
            "1, labelled with what the server says it is.",
            ("transport", "protocol_version", "server_name", "server_version", "tools_hash"),
        ),
    )

    def __init__(self, context: CheckContext, params: McpEndpointParams) -> None:
        super().__init__(context, params)
        #: The transport this endpoint spoke last time (None: detect).
        self.era: Era | None = None
        #: The tools hash seen last time, to show names only when the tools change.
        self.tools_hash: str | None = None
        #: The prompts and resources of the last run that read them whole (see tool_surface),
        #: and when (monotonic; None: read them next run).
        self._carried_lists: dict[str, list[dict[str, Any]]] = {}
        self._lists_read_at: float | None = None
        #: How the tool surface is watched (None: not collected).
        self.surface_mode = _surface_mode(params, discovered=context.discovered)
        self._credentials = ClientCredentials(params.oauth) if params.oauth else None
        call = params.call
        self._call = (
            None
            if call is None
            else ToolCallSpec(
                name=call.name,
                arguments=call.arguments,
                expect_contains=call.expect_contains,
                expect_json_path=call.expect_json_path,
                expect_value=call.expect_value,
                has_expect_value="expect_value" in call.model_fields_set,
            )
        )
        self._static_headers = {k: v.get_secret_value() for k, v in params.headers.items()}
        #: Surprises already logged with a traceback: (exception type, where it was raised).
        self._logged_surprises: set[tuple[str, str]] = set()

    async def probe(self) -> ProbeResult:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        deadline = loop.time() + max(0.1, self.context.timeout - _DEADLINE_MARGIN)
        p = self.params
        retried_token = False
        while True:
            headers = dict(self._static_headers)
            if self._credentials is not None:
                try:
                    token = await self._credentials.token(
                        plumbing_of(self.context).http, timeout=deadline - loop.time()
                    )
                except TokenUnavailable as exc:
                    return ProbeResult.unknown(f"cannot authenticate: {exc}")
                headers["Authorization"] = f"Bearer {token}"
            try:
                session = plumbing_of(self.context).http.probe_session(
                    verify=p.tls_verify,
                    ca_file=p.ca_file,
                    cert_file=p.tls_cert_file,
                    key_file=p.tls_key_file,
                    proxy=p.proxy_setting,
                    max_body_bytes=p.max_response_bytes,
                    allow_private_addresses=p.allow_private_addresses,
                )
            except ClientConfigError as exc:
                return _unusable_settings(exc)
            handshake = Handshake(self._options(headers), session, deadline)
            try:
                result = await self._talk(handshake)
            except PrivateAddressRefused as exc:
                # The prober's own rule kept it from connecting: nothing is known of the
                # target (its name may point inward only today).
                result = ProbeResult.unknown(str(exc))
            except ClientConfigError as exc:
                result = _unusable_settings(exc)
            except AuthRejected as exc:
                if (
                    self._credentials is not None
                    and self._credentials.last_from_cache
                    and not retried_token
                ):
                    # The cached token may have been revoked: fetch a fresh one, once.
                    self._credentials.forget()
                    retried_token = True
                    continue
                result = self._auth_verdict(exc)
            finally:
                await session.aclose()
            break
        elapsed = time.perf_counter() - started
        self.era = handshake.facts.era if result.status in (Status.UP, Status.DEGRADED) else None
        return self._report(result, handshake, elapsed)

    def _options(self, headers: dict[str, str]) -> HandshakeOptions:
        p = self.params
        return HandshakeOptions(
            url=p.url,
            offer=p.protocol_version,
            headers=headers,
            request_timeout=p.request_timeout,
            list_tools=p.list_tools,
            required_tools=tuple(p.required_tools),
            call=self._call,
            collect_surface=self.surface_mode is not None,
            collect_lists=self._lists_due(),
        )

    def _lists_due(self) -> bool:
        """Whether this run reads prompts/list and resources/list (``lists_every``)."""
        if self._lists_read_at is None:
            return True
        every = self.params.tool_surface.lists_every if self.params.tool_surface else 600.0
        return time.monotonic() - self._lists_read_at >= every

    async def _talk(self, handshake: Handshake) -> ProbeResult:
        """Run the handshake; returns a preliminary verdict (latency/TLS are judged later)."""
        forced = self.params.transport
        try:
            if forced != "auto":
                await handshake.run(Era(forced), may_switch=False)
            elif self.era is not None and self.era is not Era.STREAMABLE:
                try:
                    await handshake.run(self.era, may_switch=True)
                except EraMismatch as exc:
                    handshake.facts.notes.append(f"transport changed ({exc}); re-detected")
                    await handshake.run(Era.STREAMABLE, may_switch=True)
            else:
                await handshake.run(Era.STREAMABLE, may_switch=True)
        except (Down, EraMismatch) as exc:
            return ProbeResult.down(str(exc))
        except _SURPRISES as exc:
            return self._surprised(exc, handshake)
        problems = handshake.facts.problems
        if problems:
            return ProbeResult.degraded("; ".join(problems))
        return ProbeResult.up("ok")

    def _surprised(self, exc: Exception, handshake: Handshake) -> ProbeResult:
        """A server answer the checks above did not foresee: the server broke the protocol
        (so it is down), but this may also be a probe bug, so its traceback is logged (once per
        kind and place) and the place is shown in the details."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename.rpartition('/')[2]}:{frames[-1].lineno}" if frames else "?"
        kind = type(exc).__name__
        key = (kind, where)
        if key not in self._logged_surprises and (
            len(self._logged_surprises) < _MAX_LOGGED_SURPRISES
        ):
            self._logged_surprises.add(key)
            _log.warning(
                "mcp_endpoint check %s: %s at %s while reading the server's answer "
                "during %s (the server broke the protocol, or this is a probe bug)",
                self.context.name,
                kind,
                where,
                handshake.phase,
                exc_info=exc,
            )
        text = str(exc)
        text = text if len(text) <= 200 else text[:200] + "…"
        return ProbeResult.down(
            f"server sent something unexpected during {handshake.phase}: {kind}: {text}",
            details={"unexpected_error": f"{kind} at {where}"},
        )

    def _auth_verdict(self, exc: AuthRejected) -> ProbeResult:
        reply = exc.reply
        challenge = bearer_challenge(reply.headers)
        status = reply.status
        if self._credentials is not None or self._static_headers:
            detail = f" ({challenge.error})" if challenge and challenge.error else ""
            return ProbeResult.down(f"credentials rejected: {exc.phase} got HTTP {status}{detail}")
        if challenge is None:
            return ProbeResult.down(
                f"{exc.phase}: HTTP {status} without an auth challenge (Bearer)"
            )
        if self.params.auth_gated_ok:
            return ProbeResult.up(
                f"auth-gated: HTTP {status} with an auth challenge (Bearer), auth_gated_ok",
                details=_gated(challenge),
            )
        return ProbeResult.down(
            f"authentication required: HTTP {status} with an auth challenge (Bearer); configure "
            "headers or oauth, or set auth_gated_ok",
            details=_gated(challenge),
        )

    def _report(self, result: ProbeResult, handshake: Handshake, elapsed: float) -> ProbeResult:
        """The run's result: what was measured, the verdict, the details, the surface."""
        f = handshake.facts
        surface, surface_details = self._surface(result, f)
        # The surface's own requests are not the handshake: they never make it slow.
        surface_seconds = f.surface.seconds if f.surface is not None else 0.0
        elapsed = max(0.0, elapsed - surface_seconds)
        observed = observe(f, handshake.session.timings, elapsed)
        if surface_seconds > 0.0:
            observed.values["surface_seconds"] = surface_seconds
        tools_hash = f.tools_hash()
        # The tools are news on the first run and whenever their hash changes.
        tools_news = (
            f.tools is not None and tools_hash is not None and tools_hash != self.tools_hash
        )
        changed_from = self.tools_hash if tools_news else None
        verdict = decide(
            result,
            f,
            observed,
            elapsed=elapsed,
            degraded_latency=self.params.degraded_latency,
            tls_expiry_days=self.params.tls_expiry_days,
            tools_changed_from=changed_from,
        )
        findings = verdict.findings
        findings.observations.update(observed.values)
        findings.labeled_observations.extend(observed.labeled)
        findings.details.update(
            build_details(
                result, f, findings.status, list_tools=tools_news, tools_changed_from=changed_from
            )
        )
        if surface_details is not None:
            findings.details["tool_surface"] = surface_details
        if tools_news:
            self.tools_hash = tools_hash
        final = findings.result(verdict.ok_reason)
        return final if surface is None else dataclasses.replace(final, surface=surface)

    def _surface(
        self, result: ProbeResult, f: HandshakeFacts
    ) -> tuple[Surface | None, dict[str, Any] | None]:
        """The run's surface and its line in the details (None, None: not watched, or the
        server was not reached). A surface the run could not complete is None, with the
        reason in the details and, when it is news, the notes."""
        mode = self.surface_mode
        if (
            mode is None
            or result.status not in (Status.UP, Status.DEGRADED)
            or f.protocol_version is None
        ):
            return None, None
        built = tool_surface(f, mode, self._carried_lists)
        parts = f.surface
        if parts is not None and not parts.skipped and not parts.failed and parts.missing is None:
            self._lists_read_at = time.monotonic()
        elif parts is not None and parts.skipped and isinstance(built, str):
            self._lists_read_at = None  # a list the last read did not have: read them next run
        if isinstance(built, str):
            f.notes.append(f"tool surface not recorded: {built}")
            return None, {"mode": mode.value, "unavailable": short(built)}
        details: dict[str, Any] = {
            "digest": built.digest,
            "mode": mode.value,
            "items": len(built.items),
        }
        if built.dropped:
            details["dropped"] = built.dropped
        if f.surface is not None and f.surface.failed and not f.surface.skipped:
            # Those lists failed this run: the last complete ones stand in (see tool_surface).
            details["carried_over"] = sorted(f.surface.failed)
        return built, details


def _surface_mode(params: McpEndpointParams, *, discovered: bool) -> SurfaceMode | None:
    """How the check watches the tool surface; None: it does not. Unset, a discovered check
    observes (nobody approved it), a written one pins, one that does not list tools is off."""
    chosen = params.tool_surface.mode if params.tool_surface is not None else None
    if chosen is None:
        if not params.list_tools:
            return None
        return SurfaceMode.OBSERVE if discovered else SurfaceMode.PIN
    return None if chosen == "off" else SurfaceMode(chosen)


def _unusable_settings(exc: ClientConfigError) -> ProbeResult:
    """The prober's own CA, certificate, key or proxy cannot be used: it cannot decide."""
    return ProbeResult.unknown(f"cannot use the TLS or proxy settings: {exc}")


def _gated(challenge: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"auth_gated": True}
    if challenge.resource_metadata:
        details["resource_metadata"] = challenge.resource_metadata
    return details
