"""The ``discovery:`` section of the config: where targets are found, and the check each
becomes.

Each source names exactly one kind (``mcp_registry``, ``http_sd`` or ``file_sd``) and a
``template``: the check every target it lists becomes. The template is validated when the
config loads by the same rules as a hand-written check (``alivemcp.config.templates``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.cluster.config import check_locations, check_quorum
from alivemcp.durations import Duration
from alivemcp.plumbing.http import check_http_url

__all__ = [
    "SOURCE_KINDS",
    "DiscoverySource",
    "DiscoveryTemplate",
    "FileSdSource",
    "HttpSdSource",
    "McpRegistrySource",
    "OverrideMatch",
    "TemplateOverride",
    "no_items",
]

#: The kinds of source, as their config keys.
SOURCE_KINDS = ("mcp_registry", "http_sd", "file_sd")
SourceKind = Literal["mcp_registry", "http_sd", "file_sd"]
#: Shortest refresh: a source is another service, not a busy loop.
MIN_REFRESH_SECONDS = 0.1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def no_items() -> list[Any]:
    """An empty list, as a field's default. Not ``default_factory=list``: pydantic reads a
    built-in's signature from its text form, which defines a class at every call, and that
    class is garbage in a reference cycle (the daemon freezes its heap after a load: what is
    not collected by then stays for good)."""
    return []


def _refresh(value: float) -> float:
    if value < MIN_REFRESH_SECONDS:
        raise ValueError(f"must be at least {MIN_REFRESH_SECONDS:g}s")
    return value


class McpRegistrySource(_Strict):
    url: str = Field(
        description="Base URL of a registry serving the MCP registry API v0.1 (the list is "
        "`GET {url}/v0.1/servers`), e.g. `https://registry.modelcontextprotocol.io`."
    )
    refresh: Duration = Field(3600.0, description="How often the whole list is read again.")
    page_size: int = Field(100, ge=1, le=1000, description="Servers asked for per page (`limit`).")
    timeout: Duration = Field(30.0, description="Time allowed for each page.")
    allow_private_addresses: bool = Field(
        False,
        description="Whether discovered URLs may point at loopback, link-local, private or "
        "other non-public addresses (checked on the resolved address at every connection). "
        "Not about the registry's own URL.",
    )

    _url = field_validator("url")(check_http_url)
    _refresh = field_validator("refresh")(_refresh)


class HttpSdSource(_Strict):
    url: str = Field(
        description="A Prometheus HTTP service discovery endpoint: 200 and `application/json` "
        'with `[{"targets": [...], "labels": {...}}]`.'
    )
    refresh: Duration = Field(60.0, description="How often the list is read again.")
    timeout: Duration = Field(30.0, description="Time allowed for each read.")
    allow_private_addresses: bool = Field(
        True,
        description="Whether discovered targets may point at non-public addresses "
        "(loopback, link-local, private).",
    )

    _url = field_validator("url")(check_http_url)
    _refresh = field_validator("refresh")(_refresh)


class FileSdSource(_Strict):
    files: list[str] = Field(
        min_length=1,
        description="Globs of Prometheus file_sd files (JSON `.json`, YAML `.yml`/`.yaml`), "
        "relative to the config file's directory; read again every refresh and as soon as "
        "one changes.",
    )
    refresh: Duration = Field(30.0, description="How often the files are read again.")
    allow_private_addresses: bool = Field(
        True,
        description="Whether discovered targets may point at non-public addresses "
        "(loopback, link-local, private).",
    )

    _refresh = field_validator("refresh")(_refresh)


class OverrideMatch(_Strict):
    server: str = Field(
        min_length=1,
        description="Glob over the registry's server name (`io.github.acme/*`); for http_sd "
        "and file_sd, over the target.",
    )


class TemplateOverride(_Strict):
    match: OverrideMatch = Field(description="Which discovered targets this applies to.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Params over the template's (e.g. credentials: `headers: "
        "{Authorization: Bearer ${TOKEN}}`).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Labels over the template's.")


class DiscoveryTemplate(_Strict):
    probe: str = Field(description="Probe type; each target fills its target param.")
    interval: Duration | None = Field(
        None, description="How often each check runs (default: defaults)."
    )
    timeout: Duration | None = Field(
        None,
        description="Per-run timeout, at most the interval (default: defaults, then the "
        "probe type's, then min(10s, 80% interval)).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels on every check, merged over defaults."
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="The probe type's params, but the target param."
    )
    overrides: list[TemplateOverride] = Field(
        default_factory=no_items,
        description="Params and labels for some targets, applied in order (later ones win).",
    )
    locations: list[str] | None = Field(
        None,
        description="Cluster mode: the locations that probe these checks and vote on their "
        "verdicts (default: every location seen), as a check's `locations`.",
    )
    quorum: int | None = Field(
        None, ge=1, description="Cluster mode: as a check's `quorum` (default: a majority)."
    )

    @field_validator("locations")
    @classmethod
    def _location_names(cls, value: list[str] | None) -> list[str] | None:
        return check_locations(value)

    @model_validator(mode="after")
    def _quorum_fits(self) -> DiscoveryTemplate:
        check_quorum(self.quorum, self.locations)
        return self


class DiscoverySource(_Strict):
    name: str = Field(
        pattern=r"^[a-z0-9-]+$",
        max_length=63,
        description="Unique source name ([a-z0-9-]+): its checks are named `<name>/...` and "
        'labelled `discovery="<name>"`.',
    )
    mcp_registry: McpRegistrySource | None = Field(
        None, description="Read an MCP registry (API v0.1): one check per remote endpoint."
    )
    http_sd: HttpSdSource | None = Field(
        None, description="Read a Prometheus HTTP service discovery endpoint."
    )
    file_sd: FileSdSource | None = Field(
        None, description="Read Prometheus file_sd files (JSON or YAML)."
    )
    max_per_host: int = Field(
        4,
        ge=1,
        description="Runs of this source's checks in flight at once against one host.",
    )
    template: DiscoveryTemplate = Field(description="The check each discovered target becomes.")

    @model_validator(mode="after")
    def _one_kind(self) -> DiscoverySource:
        given = [kind for kind in SOURCE_KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            said = f" (given: {', '.join(given)})" if given else ""
            raise ValueError(f"give exactly one of {', '.join(SOURCE_KINDS)}{said}")
        return self

    @property
    def kind(self) -> SourceKind:
        for kind in SOURCE_KINDS:
            if getattr(self, kind) is not None:
                return kind  # type: ignore[return-value]
        raise AssertionError("validated: one kind is set")  # pragma: no cover

    @property
    def settings(self) -> McpRegistrySource | HttpSdSource | FileSdSource:
        """The kind's own block."""
        found = self.mcp_registry or self.http_sd or self.file_sd
        assert found is not None
        return found
