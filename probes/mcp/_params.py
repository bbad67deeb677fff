"""The configuration of an ``mcp_endpoint`` check (its ``params:``), checked when the config is
loaded: a URL, headers and a proxy the probe can put on the wire, TLS files, the optional
tools/call and its expectation, and how the tool surface is watched. The probe's own module
documents what each setting does to the verdict."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from alivemcp.plumbing.http import DEFAULT_MAX_BODY_BYTES, check_http_url, host_problem
from alivemcp.probe import Duration, DurationOrZero, ProbeParams
from probes.mcp.auth import OAuthParams

__all__ = ["McpEndpointParams", "TlsParams", "ToolCallParams", "ToolSurfaceParams"]

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


class ToolSurfaceParams(ProbeParams):
    mode: Literal["pin", "observe", "off"] | None = Field(
        None,
        description="Unset: `pin` for a check written in the config, `observe` for a "
        "discovered one. `pin`: the first surface seen is the approved baseline, and any later "
        "difference opens a `tool_surface_changed` alert until the new surface is approved "
        "(`alivemcp tools approve`); going back to the approved surface resolves it. "
        "`observe`: every version is recorded and listed, nobody is paged. `off`: the surface "
        "is not collected (no prompts/list or resources/list requests). The check's up/down "
        "verdict never depends on the surface.",
    )
    lists_every: DurationOrZero = Field(
        600.0,
        description="prompts/list and resources/list (for servers that offer them) are read "
        "at most this often, and the last lists read stand in between; tools and instructions "
        "are read every run. The two requests nearly double the cost of a run against such a "
        "server; a change of prompts or resources is seen within this time. 0: every run.",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as false: `mode: off` means off.
        return "off" if value is False else value


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
    tool_surface: ToolSurfaceParams | None = Field(
        None,
        description="Watch the server's tool surface: every tool's name, title, description, "
        "input and output schemas and annotations (all pages of tools/list), the server's "
        "`instructions`, and the names and descriptions of its prompts and resources "
        "(prompts/list and resources/list, requested only when the server advertises them, "
        "after the rest of the handshake; their time is `surface_seconds`, not part of "
        "`total_seconds`). Unset: `pin` for a check written in the config, `observe` for a "
        "discovered one, `off` when `list_tools` is false. Reordering or paging the lists "
        "differently, or formatting the JSON differently, is not a change.",
    )
    allow_private_addresses: bool = Field(
        True,
        description="Connect only to public addresses when false (set on checks made from a "
        "public list, e.g. an MCP registry): checked on the resolved address at every "
        "connection, redirects included; a refused address is `unknown`, naming the rule.",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_http_url(value)

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
            or host_problem(parts.hostname) is not None
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

    @model_validator(mode="after")
    def _surface_needs_tools(self) -> McpEndpointParams:
        if (
            self.tool_surface is not None
            and self.tool_surface.mode not in ("off", None)
            and not self.list_tools
        ):
            raise ValueError(
                f"tool_surface mode {self.tool_surface.mode} needs list_tools: the tools are "
                "most of the surface (set mode: off, or list_tools: true)"
            )
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
