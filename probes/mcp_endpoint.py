"""``mcp_endpoint``: does this MCP server actually serve MCP right now?

It runs the handshake a real client runs, in whichever transport the server speaks:

* streamable HTTP (protocol revisions 2025-03-26 … 2025-11-25): ``initialize`` (JSON or SSE
  answer, matched by JSON-RPC id), a check that the negotiated protocol version is one we
  know (servers answer an unknown offer with a counter-offer, not an error),
  ``notifications/initialized``, ``tools/list`` when the server advertises tools, an optional
  ``tools/call``, and always a ``DELETE`` of the session;
* 2026-07-28 (stateless; detected by a -32022 answer or a supported-versions list naming it):
  ``server/discover`` then ``tools/list``;
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

Observations (all optional, present when measured): ``connect_seconds`` (DNS + TCP connect),
``tls_seconds``, ``tls_cert_expiry_seconds``, ``initialize_seconds`` (initialize or
server/discover, excluding connection set-up), ``tools_list_seconds``, ``tools_call_seconds``,
``total_seconds`` and ``tools``; plus ``mcp_server_info{protocol_version, server_name,
server_version, transport, tools_hash} 1``. ``details`` carries the same facts as strings, and
the tool names on the first run and whenever the tools hash (sorted names + input schemas)
changes (the reason of an ``up`` result then says so).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import traceback
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.http import DEFAULT_MAX_BODY_BYTES, ClientConfigError, idna_host
from alivemcp.probe import (
    CheckContext,
    Duration,
    Findings,
    LabeledObservation,
    Observable,
    Probe,
    ProbeParams,
    ProbeResult,
    Status,
)
from probes.mcp.auth import ClientCredentials, OAuthParams, TokenUnavailable, bearer_challenge
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
_LABEL_MAX = 64
#: What interpreting a server's data can raise when the data has a shape the probe did not
#: foresee (UnicodeError is a ValueError, KeyError and IndexError are LookupErrors).
_SURPRISES = (TypeError, LookupError, AttributeError, ValueError, RecursionError, ArithmeticError)
#: Distinct surprises logged (with their traceback) per check.
_MAX_LOGGED_SURPRISES = 32
#: RFC 9110 token: what a header name may be.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: RFC 9110 field-value characters (visible ASCII, space, tab, obs-text); no CR, LF or NUL.
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: Headers the probe writes itself: a second copy would break the request or the session.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)

_log = logging.getLogger(__name__)


class ToolCallParams(ProbeParams):
    name: str = Field(description="Tool to call.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    expect_contains: str | None = Field(
        None, description="Substring the result's text (or structured content) must contain."
    )
    expect_json_path: str | None = Field(
        None,
        description="Path into the result that must exist, e.g. `structuredContent.sum` or "
        "`content[0].text`.",
    )
    expect_value: Any = Field(
        None, description="With expect_json_path: the value found there must equal this."
    )


class TlsParams(ProbeParams):
    ca_file: str | None = Field(None, description="CA bundle (PEM) to verify the server with.")
    cert_file: str | None = Field(
        None, description="Client certificate (PEM; may hold the key too) for mutual TLS."
    )
    key_file: str | None = Field(
        None, description="The client certificate's private key, when not in `cert_file`."
    )

    @model_validator(mode="after")
    def _key_needs_cert(self) -> TlsParams:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file")
        return self


class McpEndpointParams(ProbeParams):
    url: str = Field(
        description="The MCP endpoint (e.g. `https://host/mcp`, or `/sse` for "
        "the legacy transport)."
    )
    transport: Literal["auto", "streamable_http", "stateless", "sse"] = Field(
        "auto",
        description="`auto` detects (and remembers) the transport; `streamable_http` "
        "(2025 revisions), `stateless` (2026-07-28) or `sse` (legacy 2024-11-05) force one.",
    )
    protocol_version: str = Field(
        "2025-11-25", description="Protocol version offered in initialize."
    )
    headers: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Extra request headers, e.g. `Authorization: Bearer ${MCP_TOKEN}`; values "
        "are secrets and never shown.",
    )
    oauth: OAuthParams | None = Field(
        None, description="OAuth2 client credentials; the token is cached until it expires."
    )
    auth_gated_ok: bool = Field(
        False,
        description="With no credentials configured, a 401/403 carrying a Bearer challenge "
        "counts as up (the server is alive behind auth).",
    )
    list_tools: bool = Field(True, description="Call tools/list when the server has tools.")
    required_tools: list[str] = Field(
        default_factory=list, description="Tool names that must be listed (else degraded)."
    )
    call: ToolCallParams | None = Field(
        None, description="Optional tools/call for a deep check, with an expected result."
    )
    degraded_latency: Duration = Field(2.0, description="A handshake slower than this is degraded.")
    request_timeout: Duration = Field(
        10.0, description="Per-request timeout (also capped by the check's timeout)."
    )
    tls_verify: bool = Field(
        True,
        description="Verify the server certificate (its expiry is reported only when verified).",
    )
    tls_ca_file: str | None = Field(
        None, description="CA bundle to verify the server with (same as `tls.ca_file`)."
    )
    tls: TlsParams | None = Field(
        None,
        description="TLS files: `ca_file` to verify the server, `cert_file` and "
        "`key_file` for a client certificate (mutual TLS).",
    )
    proxy: Literal["direct"] | SecretStr | None = Field(
        None,
        description="HTTP proxy: unset uses the `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` "
        "environment variables, `direct` never uses one, or an `http://host:port` URL "
        "(credentials in it, `http://user:pass@host:port`, are a secret and never shown).",
    )
    tls_expiry_days: float = Field(
        14.0, ge=0, description="A certificate expiring within this many days is degraded."
    )
    max_response_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES, gt=0, description="Largest response body accepted."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as exc:
            raise ValueError(f"bad port: {exc}") from None
        problem = _host_problem(parts.hostname)
        if problem is not None:
            raise ValueError(problem)
        if any(c in value for c in " \t\r\n\x00"):
            raise ValueError("must not contain spaces or control characters")
        return value

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        seen: set[str] = set()
        for name, secret in value.items():
            shown = repr(name[:60])
            if not _TOKEN.fullmatch(name):
                raise ValueError(
                    f"header name {shown} is not an HTTP token (letters, digits "
                    "and !#$%&'*+-.^_`|~ only)"
                )
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"header {shown} is set by the probe itself")
            if name.lower() in seen:
                raise ValueError(f"header {shown} is given twice (header names ignore case)")
            seen.add(name.lower())
            # The value is a secret: say what is wrong with it, never what it is.
            if not _FIELD_VALUE.fullmatch(secret.get_secret_value()):
                raise ValueError(
                    f"header {shown} has a value that cannot be sent: only "
                    "Latin-1 characters without line breaks or control "
                    "characters"
                )
        return value

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: str | SecretStr | None) -> str | SecretStr | None:
        if not isinstance(value, SecretStr):
            return value
        # Never echo the URL: it may carry credentials.
        parts = urlsplit(value.get_secret_value())
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError("must be `direct` or an http://host:port URL")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError("has a bad port") from None
        if (
            parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or _host_problem(parts.hostname) is not None
        ):
            raise ValueError("must be an http://host:port URL (no path; an encodable host)")
        return value

    @model_validator(mode="after")
    def _one_ca_file(self) -> McpEndpointParams:
        if (
            self.tls is not None
            and self.tls.ca_file
            and self.tls_ca_file
            and (self.tls.ca_file != self.tls_ca_file)
        ):
            raise ValueError("tls_ca_file and tls.ca_file name different files: keep one")
        return self

    @property
    def ca_file(self) -> str | None:
        return (self.tls.ca_file if self.tls is not None else None) or self.tls_ca_file

    @property
    def tls_cert_file(self) -> str | None:
        return self.tls.cert_file if self.tls is not None else None

    @property
    def tls_key_file(self) -> str | None:
        return self.tls.key_file if self.tls is not None else None

    @property
    def proxy_setting(self) -> str | None:
        """The proxy for the HTTP client: None (environment), "direct" or the URL."""
        if isinstance(self.proxy, SecretStr):
            return self.proxy.get_secret_value()
        return self.proxy


def _host_problem(host: str) -> str | None:
    """Why ``host`` cannot be put on the wire (None: it can). A name that is not ASCII must
    have an IDNA (punycode) form, as DNS and the Host header need one."""
    try:
        idna_host(host)
    except (ValueError, UnicodeError):
        return f"host {host[:100]!r} has no IDNA (punycode) form"
    return None


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
                )
            except ClientConfigError as exc:
                return ProbeResult.unknown(f"cannot use the TLS or proxy settings: {exc}")
            handshake = Handshake(self._options(headers), session, deadline)
            try:
                result = await self._talk(handshake)
            except ClientConfigError as exc:
                result = ProbeResult.unknown(f"cannot use the TLS or proxy settings: {exc}")
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
        )

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
        f = handshake.facts
        timings = handshake.session.timings
        observations: dict[str, float] = {"total_seconds": elapsed}
        connect = (timings.dns_seconds or 0.0) + (timings.connect_seconds or 0.0)
        setup = connect + (timings.tls_seconds or 0.0)
        if timings.connect_seconds is not None:
            observations["connect_seconds"] = connect
        if timings.tls_seconds is not None:
            observations["tls_seconds"] = timings.tls_seconds
        expiry_days: float | None = None
        if timings.cert_not_after is not None:
            expiry_days = (timings.cert_not_after - time.time()) / 86400.0
            observations["tls_cert_expiry_seconds"] = timings.cert_not_after - time.time()
        if "initialize" in f.phases:
            # The first request also opened the connection: report the server's share.
            observations["initialize_seconds"] = max(0.0, f.phases["initialize"] - setup)
        if "tools_list" in f.phases:
            observations["tools_list_seconds"] = f.phases["tools_list"]
        if "tools_call" in f.phases:
            observations["tools_call_seconds"] = f.phases["tools_call"]
        if f.tools is not None:
            observations["tools"] = float(len(f.tools))

        # The handshake's verdict, then what latency and the certificate add to it: every
        # problem is named (worst first) through the contract's findings builder.
        findings = Findings()
        ok_reason = result.reason
        expiring = expiry_days is not None and expiry_days < self.params.tls_expiry_days
        expiry = f"TLS certificate expires in {expiry_days:.1f} days" if expiring else ""
        if result.status is Status.UP and f.protocol_version is not None:
            ok_reason = _summary(f)
            if elapsed > self.params.degraded_latency:
                findings.add(
                    Status.DEGRADED,
                    f"slow: the handshake took {elapsed:.2f}s "
                    f"(degraded_latency {self.params.degraded_latency:g}s)",
                )
            if expiring:
                findings.add(Status.DEGRADED, expiry)
        else:
            findings.add(result.status, result.reason)
            if result.status is Status.DEGRADED and expiring:
                findings.add(Status.DEGRADED, expiry)
        status = findings.status

        details: dict[str, Any] = dict(result.details or {})
        tools_hash = f.tools_hash()
        facts = {
            "transport": f.era.value if f.era else None,
            "protocol_version": f.protocol_version,
            "server_name": f.server_name,
            "server_version": f.server_version,
            "tools_hash": tools_hash,
        }
        details.update({k: v for k, v in facts.items() if v is not None})
        if f.tools is not None and tools_hash is not None and tools_hash != self.tools_hash:
            # Tool names only on the first run and when they change: every string in details
            # is redacted on every run, and a server may list hundreds of tools.
            details["tools"] = [str(t.get("name"))[:_LABEL_MAX] for t in f.tools[:200]]
            if self.tools_hash is not None:
                details["tools_changed_from"] = self.tools_hash
                if status is Status.UP:
                    ok_reason += f" (tools changed: hash {self.tools_hash} -> {tools_hash})"
            self.tools_hash = tools_hash
        if f.delete_status is not None:
            details["delete_status"] = f.delete_status
        if f.resumptions:
            details["sse_resumptions"] = f.resumptions
        if f.redirected_to is not None:
            details["redirected_to"] = f.redirected_to
        if f.notes:
            details["notes"] = f.notes
        if f.problems and status is not Status.DEGRADED:
            details["problems"] = f.problems
        labeled: list[LabeledObservation] = []
        if f.protocol_version is not None:
            labeled.append(
                LabeledObservation(
                    "mcp_server_info",
                    1.0,
                    {k: (v or "")[:_LABEL_MAX] for k, v in facts.items()},
                )
            )
        findings.observations.update(observations)
        findings.labeled_observations.extend(labeled)
        findings.details.update(details)
        return findings.result(ok_reason)


def _summary(f: HandshakeFacts) -> str:
    server = " ".join(x for x in (f.server_name, f.server_version) if x) or "unnamed server"
    era = f.era.value if f.era else "?"
    tools = f", {len(f.tools)} tools" if f.tools is not None else ""
    extra = f" ({'; '.join(f.notes)})" if f.notes else ""
    return f"MCP {f.protocol_version} over {era}: {server}{tools}{extra}"


def _gated(challenge: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"auth_gated": True}
    if challenge.resource_metadata:
        details["resource_metadata"] = challenge.resource_metadata
    return details
