"""The schema of the saved alert state, checked field by field before anything uses it.

The state file is ours, but a disk, an editor or a crashed writer can damage it, and every
value in it ends up in arithmetic, comparisons, message rendering and dedup keys. So each
entry is validated strictly (no coercion: ``"3"`` is not a streak, ``true`` is not a count),
with bounds on every number (no negative streaks, no NaN, no year-33658 timestamps) and on
every text. An entry that fails is dropped on its own; the rest of the state is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from alivemcp.alerting.bounds import (
    MAX_ID,
    Count,
    Labels,
    Name,
    Observations,
    Text,
    Timestamp,
)
from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.policy import ALERT_FIELDS, SAVED_SCALARS, CheckState

__all__ = [
    "MAX_ID",
    "DamagedEntry",
    "SavedCheck",
    "SavedFile",
    "check_from_json",
    "describe",
    "json_from_bytes",
    "notification_from_json",
]

Severity = Literal["critical", "error", "warning", "info"]
Status = Literal["up", "degraded", "down", "unknown"]
Kind = Literal["target", "probe_broken", "flapping", "tool_surface_changed", "location_disagrees"]
#: A test notification is sent directly, never queued.
QueuedEvent = Literal["firing", "resolved", "reminder"]


#: Saved alert fields newer than the state files already on disk: an entry without one is
#: from an older version, not damaged (the field's default applies).
_ADDED_ALERT_FIELDS = frozenset({"fingerprint"})
#: The JSON size of a notification's ``details`` (tool-surface alerts: bounded when made).
_MAX_DETAILS_CHARS = 64_000


def _bounded_details(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, separators=(",", ":"))) > _MAX_DETAILS_CHARS:
        raise ValueError(f"larger than {_MAX_DETAILS_CHARS} characters of JSON")
    return value


Details = Annotated[dict[str, Any], AfterValidator(_bounded_details)]


class DamagedEntry(ValueError):
    """An entry that cannot be trusted; the message says where and why (never the values)."""


class _Record(BaseModel):
    # Unknown keys are ignored (they carry nothing we would read); known ones must be exact.
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class SavedCheck(_Record):
    """One check's entry: its policy state, and what is needed to resolve its open alerts
    should the check have left the configuration."""

    # Not strict as a model: strict, pydantic takes only a CheckState instance for ``state``.
    # Every field of it is strict by its type (alivemcp.alerting.bounds).
    model_config = ConfigDict(strict=False, extra="ignore", allow_inf_nan=False)

    #: Validated against the policy's own dataclass: its field types carry the bounds.
    state: CheckState
    probe_type: Text = ""
    labels: Labels = Field(default_factory=dict)


class _SavedNotification(_Record):
    id: Count
    check: Name
    probe_type: Text
    kind: Kind
    event: QueuedEvent
    severity: Severity
    status: Status
    reason: Text
    since: Timestamp
    created_at: Timestamp
    dedup_key: Annotated[str, Field(min_length=1, max_length=255)]
    labels: Labels = Field(default_factory=dict)
    observations: Observations = Field(default_factory=dict)
    note: Text = ""
    enqueued_at: Timestamp = 0.0
    summary: Text = ""
    details: Details = Field(default_factory=dict)


class SavedFile(_Record):
    """The top level. Anything wrong here and nothing below can be trusted: the whole file
    is set aside. ``checks``, ``queues`` and ``receivers`` hold raw entries, validated one
    by one so that one damaged entry costs only itself."""

    # An int, not Literal[1]: a Literal would let ``true`` pass (True == 1 in Python).
    version: Annotated[int, Field(ge=1, le=1)]
    next_id: Annotated[int, Field(ge=1, le=MAX_ID)]
    checks: dict[str, Any]
    queues: dict[str, Any]
    receivers: dict[str, Any]


def check_from_json(raw: Any) -> tuple[CheckState, str, dict[str, str]]:
    """A saved check entry as (state, probe type, labels); raises :class:`DamagedEntry`."""
    missing = _missing_field(raw)
    if missing is not None:
        raise DamagedEntry(f"{missing}: Field required")
    try:
        entry = SavedCheck.model_validate(raw)
    except ValidationError as exc:
        raise DamagedEntry(describe(exc)) from None
    state = entry.state
    state.observations = {}  # never saved: the next result brings fresh ones
    state.changes.sort()  # flap ageing reads the oldest first
    return state, entry.probe_type, dict(entry.labels)


def _missing_field(raw: Any) -> str | None:
    """The first saved field absent from an entry (the dataclasses have defaults, a saved
    entry has every field: one without is damaged, not a fresh state), or None. Shapes other
    than dicts are left to the validation to name."""
    state = raw.get("state") if isinstance(raw, dict) else None
    if not isinstance(state, dict):
        return None
    for name in (*SAVED_SCALARS, "changes", "alerts"):
        if name not in state:
            return f"state.{name}"
    alerts = state["alerts"]
    if isinstance(alerts, dict):
        for kind, alert in alerts.items():
            if isinstance(alert, dict):
                for name in ALERT_FIELDS:
                    if name not in alert and name not in _ADDED_ALERT_FIELDS:
                        return f"state.alerts.{_short(str(kind))}.{name}"
    return None


def notification_from_json(raw: Any) -> Notification:
    """A queued notification; raises :class:`DamagedEntry` (also when its dedup key is not
    the one its check and kind give: a resolve must never close someone else's incident)."""
    try:
        saved = _SavedNotification.model_validate(raw)
    except ValidationError as exc:
        raise DamagedEntry(describe(exc)) from None
    kind = AlertKind(saved.kind)
    if saved.dedup_key != dedup_key(saved.check, kind):
        raise DamagedEntry("dedup_key: does not match the check and alert kind")
    return Notification(
        id=saved.id,
        check=saved.check,
        probe_type=saved.probe_type,
        kind=kind,
        event=Event(saved.event),
        severity=saved.severity,
        status=saved.status,
        reason=saved.reason,
        since=saved.since,
        created_at=saved.created_at,
        dedup_key=saved.dedup_key,
        labels=dict(saved.labels),
        observations=dict(saved.observations),
        note=saved.note,
        enqueued_at=saved.enqueued_at,
        summary=saved.summary,
        details=dict(saved.details),
    )


def json_from_bytes(data: bytes, damaged: Callable[[str, str], Exception]) -> Any:
    """Parse UTF-8 JSON from bytes we wrote but cannot trust (the state file, a shared
    record); on failure raises ``damaged(reason, detail)`` with reason ``not_utf8`` or
    ``not_json`` and a detail that never quotes the bytes at length."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise damaged("not_utf8", f"invalid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise damaged("not_json", "nested too deeply") from None
    except ValueError as exc:
        raise damaged("not_json", str(exc)[:200]) from None


def describe(exc: ValidationError, limit: int = 3) -> str:
    """Where and why validation failed, without the offending values (they may be huge, or
    hold what a redactor would not recognise)."""
    problems = [
        f"{'.'.join(_short(p) for p in err['loc']) or '(entry)'}: {err['msg']}"
        for err in exc.errors(include_input=False, include_url=False)[:limit]
    ]
    more = exc.error_count() - limit
    if more > 0:
        problems.append(f"+{more} more")
    return "; ".join(problems)


def _short(part: str | int, limit: int = 60) -> str:
    """A location part (a dict key can be any text: keep the log line readable)."""
    text = str(part)
    return text if len(text) <= limit else text[: limit - 1] + "…"
