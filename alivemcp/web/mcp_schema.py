"""The MCP face's tools as schemas: each tool's arguments and result, as pydantic models.

The arguments model is the tool's input schema and validates what a client sent (unknown
arguments are refused); the result model is its output schema and builds the structured
content it returns. One definition for both sides, so what a client is told and what it gets
cannot drift apart. Field descriptions are read by the model that calls the tools.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "MAX_CHECKS",
    "MAX_INCIDENTS",
    "MAX_SURFACE_CHANGES",
    "STATUSES",
    "CheckArgs",
    "CheckDetail",
    "ChecksList",
    "Explanation",
    "IncidentsArgs",
    "ListChecksArgs",
    "Status",
    "SurfaceChanges",
    "SurfaceChangesArgs",
    "Uptime",
    "UptimeArgs",
    "Window",
]

Status = Literal["up", "degraded", "down", "unknown", "pending"]
Window = Literal["1h", "24h", "7d", "30d", "90d"]
STATUSES: tuple[str, ...] = ("up", "degraded", "down", "unknown", "pending")
MAX_CHECKS = 200
MAX_INCIDENTS = 100
MAX_SURFACE_CHANGES = 50


def _one_or_many(value: Any) -> Any:
    """A single value where a list is also accepted (``"down"`` for ``["down"]``)."""
    return [value] if isinstance(value, str) else value


# -- arguments ---------------------------------------------------------------------------------


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


CheckName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1000,
        description="The check's exact name, as list_checks shows it.",
    ),
]


class ListChecksArgs(_Arguments):
    status: Annotated[
        list[Status] | None,
        BeforeValidator(_one_or_many, json_schema_input_type=Status | list[Status] | None),
    ] = Field(
        None,
        description='Only checks with this status, or any of these: e.g. "down", or '
        '["down", "degraded", "unknown"] for everything failing. pending: not run yet.',
    )
    label: Annotated[
        list[str] | None,
        BeforeValidator(_one_or_many, json_schema_input_type=str | list[str] | None),
    ] = Field(
        None,
        description='Only checks with this label: "key=value" (e.g. "team=payments"), or '
        '"key" for any value; several must all match.',
    )
    source: str | None = Field(
        None,
        max_length=200,
        description="Only checks found by this discovery source (e.g. an MCP registry), by "
        "the source's name; checks written in the config file have none.",
    )
    text: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Only checks whose name, probe type, reason or a label value contains "
        "this text (case does not matter).",
    )
    limit: int = Field(50, ge=1, le=MAX_CHECKS, description="At most this many rows.")
    offset: int = Field(0, ge=0, description="Skip this many matching rows (paging).")


class CheckArgs(_Arguments):
    check: CheckName


class UptimeArgs(_Arguments):
    check: CheckName
    window: Window = Field("24h", description="How far back: 1h, 24h, 7d, 30d or 90d.")


Since = Annotated[str, Field(min_length=1, max_length=64)]


class IncidentsArgs(_Arguments):
    check: CheckName
    since: Since = Field(
        "7d",
        description="Incidents still open at or after this moment: a duration before now "
        "(12h, 7d), a date (2026-11-01), an ISO-8601 time or unix seconds.",
    )
    limit: int = Field(20, ge=1, le=MAX_INCIDENTS, description="At most this many incidents.")


class SurfaceChangesArgs(_Arguments):
    since: Since = Field(
        "24h",
        description="Changes at or after this moment: a duration before now (12h, 7d), a "
        "date, an ISO-8601 time or unix seconds.",
    )
    check: str | None = Field(
        None, min_length=1, max_length=1000, description="Only this check's changes."
    )
    limit: int = Field(20, ge=1, le=MAX_SURFACE_CHANGES, description="At most this many changes.")


# -- results -----------------------------------------------------------------------------------


class StatusCounts(BaseModel):
    up: int
    degraded: int
    down: int
    unknown: int
    pending: int = Field(description="Not run yet.")


class RunCounts(BaseModel):
    up: int
    degraded: int
    down: int
    unknown: int


class CheckRow(BaseModel):
    check: str
    probe: str = Field(description="The probe type (what kind of target it checks).")
    status: Status
    reason: str = Field(description="What the last run said (cut at 300 characters).")
    since: datetime | None = Field(description="When the current status began.")
    last_run: datetime | None
    labels: dict[str, str]
    source: str | None = Field(description="The discovery source that found it, if any.")


class ChecksList(BaseModel):
    total_checks: int = Field(description="Checks this monitor runs.")
    summary: StatusCounts = Field(description="Every check counted by status.")
    matched: int = Field(description="Checks matching the filters.")
    offset: int
    returned: int
    truncated: bool = Field(description="More matching checks than returned.")
    next_offset: int | None = Field(description="The offset that continues the list.")
    checks: list[CheckRow]


class Ratios(BaseModel):
    up_ratio: float | None = Field(description="Share of decided runs that were up.")
    available_ratio: float | None = Field(description="Share that were up or degraded.")


class Origin(BaseModel):
    source: str
    target: str
    server: str | None
    version: str | None
    transport: str | None


class CheckDetail(BaseModel):
    check: str
    probe: str
    status: Status
    reason: str
    since: datetime | None
    status_for_seconds: float | None = Field(description="How long it has had this status.")
    last_run: datetime | None
    duration_seconds: float | None = Field(description="How long the last run took.")
    labels: dict[str, str]
    owner: str | None = Field(description="Cluster mode: the replica that ran it last.")
    discovered: Origin | None = Field(description="Where a discovered check came from.")
    depends_on: list[str]
    runs_since_start: RunCounts = Field(description="Runs by status since the daemon started.")
    uptime: dict[str, Ratios] | None = Field(
        description="24h, 7d and 30d uptime; null when history is off."
    )
    locations: dict[str, Any] | None = Field(
        None, description="Several locations: each location's latest result (its vote)."
    )
    resource: str = Field(description="The check's resource URI.")


class Latency(BaseModel):
    p50: float | None
    p95: float | None
    p99: float | None


class Uptime(BaseModel):
    check: str
    window: Window
    window_start: datetime = Field(description="The window covers from here to now.")
    up_ratio: float | None = Field(description="Share of decided runs that were up.")
    available_ratio: float | None = Field(description="Share that were up or degraded.")
    runs: RunCounts
    latency_seconds: Latency


class Incident(BaseModel):
    started_at: datetime
    ended_at: datetime | None = Field(description="null: still open.")
    open: bool
    duration_seconds: float
    worst_status: str
    first_reason: str
    last_reason: str


class Incidents(BaseModel):
    check: str
    since: datetime
    returned: int
    truncated: bool = Field(description="Older incidents in the period were left out.")
    incidents: list[Incident] = Field(description="Newest first.")


class Finding(BaseModel):
    rule: str
    severity: str
    item: str
    message: str


class SurfaceChange(BaseModel):
    id: int
    check: str
    at: datetime
    from_digest: str | None = Field(description="The version before (null: first seen).")
    to_digest: str
    mode: str | None = Field(description="pin (changes alert) or observe.")
    summary: str = Field(description="What changed, in the server's own words where quoted.")
    findings: list[Finding] = Field(description="Poisoning signs found in the new version.")
    findings_left_out: int


class SurfaceChanges(BaseModel):
    since: datetime
    returned: int
    truncated: bool
    changes: list[SurfaceChange] = Field(description="Newest first.")


class Run(BaseModel):
    started_at: datetime
    status: str
    duration_seconds: float


class Dependency(BaseModel):
    check: str
    status: str
    reason: str


class FiringAlert(BaseModel):
    alert: str
    severity: str
    since: datetime | None
    reason: str
    notified: bool = Field(description="false: held back (maintenance, dependency, flapping).")


class SurfaceNote(BaseModel):
    state: str = Field(description="pinned, changed (not approved) or observed.")
    digest: str
    findings: int


class Explanation(BaseModel):
    check: str
    probe: str
    status: Status
    summary: str = Field(description="The explanation in a few sentences.")
    reason: str = Field(description="The probe's own words about its last run.")
    since: datetime | None
    status_for_seconds: float | None
    last_run: datetime | None
    details: dict[str, Any] | None = Field(description="What the probe saw (bounded).")
    observations: dict[str, float | None]
    recent_runs: list[Run] = Field(description="Newest first.")
    recent_counts: RunCounts = Field(description="The recent runs counted by status.")
    dependencies: list[Dependency]
    firing_alerts: list[FiringAlert]
    recent_incidents: list[Incident] | None = Field(
        description="The last incidents of 7 days; null when history is off."
    )
    tool_surface: SurfaceNote | None = Field(description="null: no tool surface seen.")
