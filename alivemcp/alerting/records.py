"""Alert state as one record per check (cluster mode): the value of the check's key in the
compacted alert-state topic.

A record holds what a replica taking the check over needs: the check's policy state (the
same fields the state file keeps) and its *outbox*, the notifications decided but not yet
confirmed by their receiver, each with its phase:

* ``queued``: decided, not handed to the receiver yet. A new owner sends it to its receiver.
* ``sending``: the receiver may have it (the record saying so was acknowledged before the
  request went out; a timeout leaves it so too). A new owner sends it again only to a
  receiver where a repeat is harmless (PagerDuty: the same dedup_key); Slack and webhooks
  must never see a duplicate, so there it is logged and counted as possibly undelivered.

A notification leaves the outbox once its receiver accepted it. A check with a quiet state and
an empty outbox has no record: its key gets a tombstone, so the compacted topic stays small.

Records come from Kafka, where anything may have written them: each is validated as strictly
as the state file (:mod:`alivemcp.alerting.saved`). A damaged record costs only itself (that
check starts from a clean state); a damaged outbox entry costs only that notification.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, ValidationError

from alivemcp.alerting.bounds import Labels, Name, Text, Timestamp
from alivemcp.alerting.model import Notification
from alivemcp.alerting.policy import CheckState
from alivemcp.alerting.saved import (
    DamagedEntry,
    _Record,
    check_from_json,
    describe,
    json_from_bytes,
    notification_from_json,
)

__all__ = [
    "MAX_OUTBOX",
    "MAX_RECORD_BYTES",
    "DamagedRecord",
    "Outbox",
    "Outgoing",
    "Phase",
    "RecordSink",
    "SharedRecord",
    "decode_record",
    "encode_record",
]

RECORD_VERSION = 1
#: A record is a few KiB (the state plus a handful of notifications); Kafka's default
#: message limit is 1 MiB. Anything bigger is not ours.
MAX_RECORD_BYTES = 1024 * 1024
#: Notifications of one check written into its record: a receiver down for days with
#: reminders every few minutes must not grow a record past Kafka's message limit. Beyond
#: this the oldest are left out of the record (they are still sent by this replica).
MAX_OUTBOX = 200

Phase = Literal["queued", "sending"]


class RecordSink(Protocol):
    """Where records go: the shared log (:class:`alivemcp.cluster.alert_state.AlertStateLog`)."""

    def write(self, check: str, record: bytes | None) -> asyncio.Future[bool]:
        """Write the check's latest record (None: a tombstone). The future is True once this
        record (or a later one of the same check) is acknowledged by the brokers, False if
        it never will be (the log stopped, or the check left this replica)."""
        ...


@dataclass(slots=True)
class Outgoing:
    """A notification in a check's outbox, for one receiver."""

    receiver: str
    notification: Notification
    phase: Phase = "queued"
    #: The receiver is being called with it now (its ``sending`` record acknowledged).
    handed: bool = False
    #: An earlier attempt may have reached the receiver (a timeout): its phase stays
    #: ``sending`` even when this replica hands the check over between attempts.
    maybe_delivered: bool = False

    @property
    def maybe_sent(self) -> bool:
        """Whether this process may have got it to the receiver."""
        return self.handed or self.maybe_delivered


class Outbox:
    """Per check: the notifications not yet confirmed, keyed by (receiver, id)."""

    def __init__(self) -> None:
        self._by_check: dict[str, dict[tuple[str, int], Outgoing]] = {}

    def add(self, receiver: str, notification: Notification, phase: Phase = "queued") -> None:
        entries = self._by_check.setdefault(notification.check, {})
        entries[(receiver, notification.id)] = Outgoing(receiver, notification, phase)

    def get(self, receiver: str, notification: Notification) -> Outgoing | None:
        entries = self._by_check.get(notification.check)
        return entries.get((receiver, notification.id)) if entries else None

    def remove(self, receiver: str, notification: Notification) -> bool:
        entries = self._by_check.get(notification.check)
        if not entries or entries.pop((receiver, notification.id), None) is None:
            return False
        if not entries:
            del self._by_check[notification.check]
        return True

    def of(self, check: str) -> list[Outgoing]:
        """Oldest first (ids increase with the order notifications were decided in)."""
        entries = self._by_check.get(check)
        if not entries:
            return []
        return sorted(entries.values(), key=lambda e: (e.notification.id, e.receiver))

    def pop_check(self, check: str) -> list[Outgoing]:
        entries = self.of(check)
        self._by_check.pop(check, None)
        return entries

    def drop_receiver(self, receiver: str) -> set[str]:
        """Forget a receiver's entries (it left the config); returns the checks touched."""
        touched = set()
        for check, entries in list(self._by_check.items()):
            for key in [k for k in entries if k[0] == receiver]:
                del entries[key]
                touched.add(check)
            if not entries:
                del self._by_check[check]
        return touched

    def checks(self) -> Iterable[str]:
        return list(self._by_check)

    def __contains__(self, check: object) -> bool:
        return check in self._by_check


def encode_record(
    check: str,
    state: CheckState | None,
    probe_type: str,
    labels: Mapping[str, str],
    outbox: list[Outgoing],
    replica: str,
    now: float,
) -> bytes:
    """The record of a check, as the bytes of its Kafka value."""
    kept = outbox[-MAX_OUTBOX:]
    doc = {
        "version": RECORD_VERSION,
        "check": check,
        "replica": replica,
        "written_at": now,
        "state": (state or CheckState()).to_json(),
        "probe_type": probe_type,
        "labels": dict(labels),
        "outbox": [
            {"receiver": e.receiver, "phase": e.phase, "notification": e.notification.to_json()}
            for e in kept
        ],
    }
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


class _SharedOutgoing(_Record):
    receiver: Annotated[str, Field(min_length=1, max_length=200)]
    phase: Phase
    notification: Any  # validated by notification_from_json


class _SharedTop(_Record):
    # An int, not Literal[1]: a Literal would let ``true`` pass (True == 1 in Python).
    version: Annotated[int, Field(ge=1, le=RECORD_VERSION)]
    check: Name
    replica: Text = ""
    written_at: Timestamp = 0.0
    state: Any  # validated by check_from_json
    probe_type: Text = ""
    labels: Labels = Field(default_factory=dict)
    outbox: Annotated[list[Any], Field(max_length=MAX_OUTBOX)] = Field(default_factory=list)


class DamagedRecord(DamagedEntry):
    """A record that cannot be trusted; ``reason`` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


#: Labels of :attr:`DamagedRecord.reason`.
DAMAGE_REASONS = ("too_large", "not_utf8", "not_json", "bad_shape", "wrong_key")


@dataclass(slots=True)
class SharedRecord:
    """A validated record: everything in it can be used as is."""

    state: CheckState
    probe_type: str
    labels: dict[str, str]
    outbox: list[Outgoing]
    replica: str = ""
    written_at: float = 0.0
    #: Why outbox entries were left out (they were damaged), for the log and metrics.
    dropped: list[str] = field(default_factory=list)


def decode_record(key: str, value: bytes) -> SharedRecord:
    """Validate the record of ``key``; raises :class:`DamagedRecord` saying why (never the
    values: they came from a shared topic)."""
    if len(value) > MAX_RECORD_BYTES:
        raise DamagedRecord("too_large", f"{len(value)} bytes (limit {MAX_RECORD_BYTES})")
    raw = json_from_bytes(value, DamagedRecord)
    try:
        top = _SharedTop.model_validate(raw)
    except ValidationError as exc:
        raise DamagedRecord("bad_shape", describe(exc)) from None
    if top.check != key:
        # A record under another check's key would move that check's incident here.
        raise DamagedRecord("wrong_key", "check: does not match the record's key")
    try:
        state, probe_type, labels = check_from_json(
            {"state": top.state, "probe_type": top.probe_type, "labels": top.labels}
        )
    except DamagedEntry as exc:
        raise DamagedRecord("bad_shape", str(exc)) from None
    record = SharedRecord(state, probe_type, labels, [], top.replica, top.written_at)
    seen: set[tuple[str, int]] = set()
    for index, item in enumerate(top.outbox):
        try:
            entry = _SharedOutgoing.model_validate(item)
            notification = notification_from_json(entry.notification)
        except ValidationError as exc:
            record.dropped.append(f"outbox.{index}: {describe(exc)}")
            continue
        except DamagedEntry as exc:
            record.dropped.append(f"outbox.{index}.notification: {exc}")
            continue
        if notification.check != key:
            # A resolve for another check would close someone else's incident.
            record.dropped.append(f"outbox.{index}: notification of another check")
            continue
        if (entry.receiver, notification.id) in seen:
            record.dropped.append(f"outbox.{index}: duplicate")
            continue
        seen.add((entry.receiver, notification.id))
        record.outbox.append(Outgoing(entry.receiver, notification, entry.phase))
    return record
