"""Alerting configuration models (filled in by the alerting work)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class AlertPolicyOverride(BaseModel):
    """Per-check overrides of the alert policy."""

    model_config = ConfigDict(extra="forbid")


class AlertingConfig(BaseModel):
    """Top-level ``alerting:`` section."""

    model_config = ConfigDict(extra="forbid")
