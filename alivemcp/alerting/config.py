"""Alerting configuration: the top-level ``alerting:`` section and the per-check ``alert:`` block.

Durations share the syntax of the rest of the config (``alivemcp.durations``).
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from alivemcp.alerting.matchers import MatcherError, parse_matchers
from alivemcp.durations import Duration, DurationOrZero

__all__ = [
    "SEVERITIES",
    "AlertPolicy",
    "AlertPolicyOverride",
    "AlertingConfig",
    "LogReceiverConfig",
    "MaintenanceWindow",
    "PagerDutyReceiverConfig",
    "ReceiverConfig",
    "RecurringWindow",
    "Route",
    "Severity",
    "SlackReceiverConfig",
    "WebhookReceiverConfig",
]

#: A positive duration in seconds.
Seconds = Duration
#: A duration in seconds that may be zero (e.g. "no wait").
SecondsOrZero = DurationOrZero

#: PagerDuty's severities; Slack and webhooks carry them as text.
Severity = Literal["critical", "error", "warning", "info"]
SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_matchers(value: list[str]) -> list[str]:
    try:
        parse_matchers(value)
    except MatcherError as exc:
        raise ValueError(str(exc)) from exc
    return value


# -- policy ------------------------------------------------------------------------------------


class AlertPolicy(_Strict):
    """When a check's results turn into an alert, and how it is repeated."""

    failures_to_fire: int = Field(
        2, ge=1, description="Consecutive degraded/down results before an alert fires."
    )
    successes_to_resolve: int = Field(
        2, ge=1, description="Consecutive up results before a firing alert resolves."
    )
    severity_degraded: Severity = Field(
        "warning",
        description="Severity of an alert whose latest result is degraded "
        "(a check label `severity_degraded` overrides it).",
    )
    severity_down: Severity = Field(
        "critical",
        description="Severity of an alert whose latest result is down "
        "(a check label `severity` overrides it).",
    )
    repeat_interval: Seconds | None = Field(
        None, description="Send a reminder this often while an alert fires (unset: never)."
    )
    max_reminders: int | None = Field(
        None, ge=0, description="Stop reminding after this many reminders (unset: no cap)."
    )
    flap_window: Seconds = Field(
        600.0, description="Window in which state changes (up <-> not up) are counted."
    )
    flap_threshold: int = Field(
        6,
        ge=0,
        description="This many state changes within flap_window mark the check "
        "flapping: one notice instead of a stream (0 disables flap detection).",
    )


class AlertPolicyOverride(_Strict):
    """Per-check ``alert:`` block: overrides of the ``alerting.policy`` defaults."""

    enabled: bool = Field(True, description="false: this check never notifies.")
    failures_to_fire: int | None = Field(None, ge=1, description="See alerting.policy.")
    successes_to_resolve: int | None = Field(None, ge=1, description="See alerting.policy.")
    severity_degraded: Severity | None = Field(None, description="See alerting.policy.")
    severity_down: Severity | None = Field(None, description="See alerting.policy.")
    repeat_interval: Seconds | None = Field(None, description="See alerting.policy.")
    max_reminders: int | None = Field(None, ge=0, description="See alerting.policy.")
    flap_window: Seconds | None = Field(None, description="See alerting.policy.")
    flap_threshold: int | None = Field(None, ge=0, description="See alerting.policy.")
    receivers: list[str] | None = Field(
        None, description="Send this check's alerts to these receivers instead of routing."
    )

    def apply_to(self, base: AlertPolicy) -> AlertPolicy:
        """The effective policy: ``base`` with this block's set fields on top."""
        changes = {
            name: getattr(self, name)
            for name in AlertPolicy.model_fields
            if name in self.model_fields_set and getattr(self, name) is not None
        }
        return base.model_copy(update=changes) if changes else base


# -- receivers ---------------------------------------------------------------------------------


class _ReceiverBase(_Strict):
    name: str = Field(min_length=1, description="Name used by routes and `alert-test`.")
    timeout: Seconds = Field(10.0, description="Per-request timeout (a hang counts as a failure).")
    backoff_initial: Seconds = Field(1.0, description="First retry delay after a 429/5xx/error.")
    backoff_max: Seconds = Field(300.0, description="Cap on the exponential retry delay.")
    max_retry_after: Seconds = Field(
        900.0, description="Cap on a receiver's Retry-After (a bogus huge value cannot stall us)."
    )


class SlackReceiverConfig(_ReceiverBase):
    """Slack incoming webhook: Block Kit messages."""

    type: Literal["slack"]
    webhook_url: SecretStr = Field(description="The incoming webhook URL (a secret).")
    min_interval: SecondsOrZero = Field(
        1.0, description="Minimum time between messages (Slack allows ~1/s per webhook)."
    )
    max_batch: int = Field(
        1000,
        ge=1,
        description="Notifications folded into one grouped message at most "
        "(it lists the first 20 and counts the rest).",
    )


class PagerDutyReceiverConfig(_ReceiverBase):
    """PagerDuty Events API v2: trigger/resolve with a stable dedup_key per check."""

    type: Literal["pagerduty"]
    routing_key: SecretStr = Field(description="Integration (routing) key (a secret).")
    url: str = Field(
        "https://events.pagerduty.com/v2/enqueue", description="Events API v2 enqueue URL."
    )
    source: str = Field("alivemcp", description="payload.source of every event.")
    min_interval: SecondsOrZero = Field(
        0.5, description="Minimum time between events (PagerDuty allows ~120/min per key)."
    )
    max_batch: int = Field(
        1000,
        ge=1,
        description="Queued events looked at together (for storm grouping); "
        "each event is still its own request.",
    )
    group_threshold: int = Field(
        10,
        ge=2,
        description="When more triggers than this are queued at once, page once "
        "for the whole group instead of once per check.",
    )


class WebhookReceiverConfig(_ReceiverBase):
    """Generic webhook: JSON POST, optionally an Alertmanager v4 body and an HMAC signature."""

    type: Literal["webhook"]
    url: SecretStr = Field(description="Where to POST (a secret: URLs often embed tokens).")
    format: Literal["json", "alertmanager"] = Field(
        "json", description="json: alivemcp's own body; alertmanager: webhook body version 4."
    )
    hmac_secret: SecretStr | None = Field(
        None, description="Sign the body with HMAC-SHA256 (hex) in signature_header."
    )
    signature_header: str = Field(
        "X-Alivemcp-Signature", description="Header carrying `sha256=<hex digest>`."
    )
    headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="Extra request headers (values are secrets)."
    )
    min_interval: SecondsOrZero = Field(0.0, description="Minimum time between requests.")
    max_batch: int = Field(200, ge=1, description="Notifications per request at most.")


class LogReceiverConfig(_ReceiverBase):
    """Writes notifications to the daemon's own log (event ``alert``): for trying alerting
    without external services, or for shipping alerts with the logs."""

    type: Literal["log"]
    min_interval: SecondsOrZero = Field(0.0, description="Minimum time between batches.")
    max_batch: int = Field(1000, ge=1, description="Notifications logged per batch at most.")


ReceiverConfig = Annotated[
    SlackReceiverConfig | PagerDutyReceiverConfig | WebhookReceiverConfig | LogReceiverConfig,
    Field(discriminator="type"),
]


# -- routing and maintenance -------------------------------------------------------------------


class Route(_Strict):
    """Alerts whose labels match all matchers go to these receivers."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    matchers: list[str] = Field(
        default_factory=list,
        description="`label=value`, `label!=value`, `label=~regex`, `label!~regex`; "
        "`check` and `probe` match the check's name and probe type; `alert` is "
        "`tool_surface_changed` for a tool-surface alert and `location_disagrees` for "
        "locations that see a check down below its quorum (empty for the others), e.g. "
        '`alert="tool_surface_changed"` to send those to a security channel.',
    )
    receivers: list[str] = Field(min_length=1, description="Receiver names.")
    continue_matching: bool = Field(
        False, alias="continue", description="Also try the routes after this one."
    )

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, value: list[str]) -> list[str]:
        return _check_matchers(value)


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class RecurringWindow(_Strict):
    """A window that repeats weekly: on ``weekdays``, from ``start`` for ``duration``."""

    weekdays: list[Weekday] = Field(
        default_factory=lambda: list(_WEEKDAYS), description="Days the window starts on."
    )
    start: time = Field(description="Local start time, HH:MM.")
    duration: Seconds = Field(description="How long the window lasts (may cross midnight).")
    timezone: str = Field("UTC", description="IANA time zone of `start`.")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    def weekday_numbers(self) -> frozenset[int]:
        return frozenset(_WEEKDAYS.index(day) for day in self.weekdays)


class MaintenanceWindow(_Strict):
    """Hold alerts of matching checks during a one-off or recurring window; the true state is
    sent when it ends."""

    name: str = Field(min_length=1, description="Shown in logs.")
    matchers: list[str] = Field(
        default_factory=list, description="Label matchers (as in routes); empty matches all."
    )
    start: datetime | None = Field(None, description="One-off window start (ISO 8601).")
    end: datetime | None = Field(None, description="One-off window end (ISO 8601).")
    recurring: RecurringWindow | None = Field(None, description="A weekly window instead.")

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, value: list[str]) -> list[str]:
        return _check_matchers(value)

    @field_validator("start", "end")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> MaintenanceWindow:
        one_off = self.start is not None or self.end is not None
        if one_off == (self.recurring is not None):
            raise ValueError("give either start and end, or recurring")
        if one_off:
            if self.start is None or self.end is None:
                raise ValueError("a one-off window needs both start and end")
            if self.end <= self.start:
                raise ValueError("end must be after start")
        return self


# -- the section -------------------------------------------------------------------------------


class AlertingConfig(_Strict):
    """Top-level ``alerting:`` section."""

    receivers: list[ReceiverConfig] = Field(
        default_factory=list,
        description="Where notifications go (slack, pagerduty, webhook, log).",
    )
    routes: list[Route] = Field(
        default_factory=list, description="Label-matcher routes, tried in order."
    )
    default_receivers: list[str] = Field(
        default_factory=list, description="Receivers of alerts no route matched."
    )
    owner_receivers: list[str] | None = Field(
        None,
        description="Receivers of 'probe broken' alerts (checks stuck at unknown: the "
        "prober's owners, not the target's); default: default_receivers.",
    )
    policy: AlertPolicy = Field(
        default_factory=lambda: AlertPolicy.model_validate({}), description="Policy defaults."
    )
    probe_broken_severity: Severity = Field(
        "warning", description="Severity of 'probe broken' alerts."
    )
    group_wait: SecondsOrZero = Field(
        2.0,
        description="Hold a new notification this long so alerts that fire together "
        "reach each receiver as one grouped message.",
    )
    group_interval: SecondsOrZero = Field(
        10.0,
        description="After a grouped message, send the next one to that receiver no "
        "sooner than this: a storm that keeps growing over a check interval is summarised in "
        "a few messages, not one a second.",
    )
    maintenance: list[MaintenanceWindow] = Field(
        default_factory=list, description="Maintenance windows / silences."
    )
    external_url: str | None = Field(
        None, description="This daemon's URL, for links in messages (e.g. its /status)."
    )

    @model_validator(mode="after")
    def _references(self) -> AlertingConfig:
        names = [r.name for r in self.receivers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"receiver names must be unique: {', '.join(dupes)}")
        known = set(names)
        refs: list[tuple[str, str]] = [("default_receivers", n) for n in self.default_receivers]
        refs += [("owner_receivers", n) for n in self.owner_receivers or []]
        for i, route in enumerate(self.routes):
            refs += [(f"routes[{i}].receivers", n) for n in route.receivers]
        for where, name in refs:
            if name not in known:
                raise ValueError(
                    f"{where}: no receiver named {name!r} (known: {', '.join(names) or 'none'})"
                )
        return self

    def receiver(
        self, name: str
    ) -> (
        SlackReceiverConfig
        | PagerDutyReceiverConfig
        | WebhookReceiverConfig
        | LogReceiverConfig
        | None
    ):
        return next((r for r in self.receivers if r.name == name), None)
