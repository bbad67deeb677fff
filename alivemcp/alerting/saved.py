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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.policy import AlertState, CheckState

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

#: Ids, streaks and counters: far beyond anything a daemon reaches, small enough to stay exact
#: as a JSON number.
MAX_ID = 2**53
#: Unix times up to the year 3000: messages render them as dates, and Python's datetime
#: stops at the year 9999.
_MAX_TIMESTAMP = 32_503_680_000.0
#: Texts (reasons, names, labels): results are capped at 1,000 characters on the way in.
_MAX_TEXT = 10_000
#: State changes kept for flap detection: one per run inside the flap window.
_MAX_CHANGES = 100_000
_MAX_ITEMS = 1_000  # labels or observations of one check

Count = Annotated[int, Field(ge=0, le=MAX_ID)]
Timestamp = Annotated[float, Field(ge=0, le=_MAX_TIMESTAMP)]
Text = Annotated[str, Field(max_length=_MAX_TEXT)]
Name = Annotated[str, Field(min_length=1, max_length=_MAX_TEXT)]
Labels = Annotated[dict[Text, Text], Field(max_length=_MAX_ITEMS)]
SeverityOrNone = Literal["", "critical", "error", "warning", "info"]
Severity = Literal["critical", "error", "warning", "info"]
StatusOrNone = Literal["", "up", "degraded", "down", "unknown"]
Status = Literal["up", "degraded", "down", "unknown"]
Kind = Literal["target", "probe_broken", "flapping"]
#: A test notification is sent directly, never queued.
QueuedEvent = Literal["firing", "resolved", "reminder"]


class DamagedEntry(ValueError):
    """An entry that cannot be trusted; the message says where and why (never the values)."""


class _Record(BaseModel):
    # Unknown keys are ignored (they carry nothing we would read); known ones must be exact.
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class _SavedAlert(_Record):
    active: bool
    severity: SeverityOrNone
    since: Timestamp
    reason: Text
    status: StatusOrNone
    notified: bool
    notified_severity: SeverityOrNone
    last_notified_at: Timestamp
    reminders_sent: Count


class _SavedCheckState(_Record):
    fail_streak: Count
    ok_streak: Count
    unknown_streak: Count
    known_streak: Count
    fail_since: Timestamp
    unknown_since: Timestamp
    last_status: StatusOrNone
    last_reason: Text
    last_up: bool | None
    changes: Annotated[list[Timestamp], Field(max_length=_MAX_CHANGES)]
    alerts: dict[Kind, _SavedAlert]


class SavedCheck(_Record):
    """One check's entry: its policy state, and what is needed to resolve its open alerts
    should the check have left the configuration."""

    state: _SavedCheckState
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
    observations: Annotated[dict[Text, float], Field(max_length=_MAX_ITEMS)] = Field(
        default_factory=dict
    )
    note: Text = ""
    enqueued_at: Timestamp = 0.0


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
    try:
        entry = SavedCheck.model_validate(raw)
    except ValidationError as exc:
        raise DamagedEntry(describe(exc)) from None
    saved = entry.state
    state = CheckState(
        fail_streak=saved.fail_streak,
        ok_streak=saved.ok_streak,
        unknown_streak=saved.unknown_streak,
        known_streak=saved.known_streak,
        fail_since=saved.fail_since,
        unknown_since=saved.unknown_since,
        last_status=saved.last_status,
        last_reason=saved.last_reason,
        last_up=saved.last_up,
        changes=sorted(saved.changes),  # flap ageing reads the oldest first
        alerts={kind: AlertState(**alert.model_dump()) for kind, alert in saved.alerts.items()},
    )
    return state, entry.probe_type, dict(entry.labels)


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
