"""The ``history:`` section of the config: on by default, retention per resolution."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from alivemcp.durations import Duration

__all__ = ["HistoryConfig", "Retention"]

HOUR = 3600.0
DAY = 86400.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Retention(_Strict):
    """How long each resolution is kept. A window is answered from the resolution that
    serves it (1h: minutes; 24h: hours; 7d, 30d, 90d: days), so each must cover its windows."""

    minute: Duration = Field(2 * HOUR, description="Per-minute buckets (the 1h window).")
    hour: Duration = Field(7 * DAY, description="Per-hour buckets (the 24h window, hourly bars).")
    day: Duration = Field(90 * DAY, description="Per-day buckets (7d, 30d, 90d windows, reports).")
    incidents: Duration = Field(90 * DAY, description="Incidents, by when they ended.")

    @model_validator(mode="after")
    def _covers_windows(self) -> Retention:
        for field, least, window in (
            ("minute", HOUR, "1h"),
            ("hour", DAY, "24h"),
            ("day", 30 * DAY, "30d"),
        ):
            if getattr(self, field) < least:
                raise ValueError(
                    f"retention.{field} must be at least {window}: the {window} "
                    f"window is answered from {field} buckets"
                )
        return self


class HistoryConfig(_Strict):
    enabled: bool = Field(
        True, description="Keep uptime history, incidents and latency in data_dir/history.sqlite."
    )
    retention: Retention = Field(default_factory=Retention, description="Retention per resolution.")
    tool_surface_versions: int = Field(
        50,
        ge=2,
        le=10_000,
        description="Versions of each check's tool surface kept in data_dir/surfaces.sqlite "
        "(the oldest by last sight pruned first, never the approved one; pruned versions are "
        "counted). Kept whether or not `enabled` is on: approvals live there.",
    )
    metrics_window: Literal["24h", "7d", "30d"] | None = Field(
        None,
        description="Export alivemcp_check_uptime_ratio over this window (one series per "
        "check; off by default).",
    )
