"""Cluster mode's per-check records (what the alert-state topic holds): they round-trip, and
records from the topic are validated like the state file (a damaged record is refused with a
reason, a damaged notification inside a sound record costs only itself). Also what a failed
send says about delivery (a repeat after a timeout may duplicate; after an answer or a
refused connection it cannot)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.policy import AlertState, CheckState
from alivemcp.alerting.receivers.base import classify_response, post_json
from alivemcp.alerting.records import (
    MAX_OUTBOX,
    MAX_RECORD_BYTES,
    DamagedRecord,
    Outgoing,
    decode_record,
    encode_record,
)
from tests.support import free_port
from tests.support.alerting_receivers import HANG, Answer, StandIn


def notification(check: str, id: int, event: Event = Event.FIRING) -> Notification:
    now = time.time()
    return Notification(
        id=id,
        check=check,
        probe_type="http",
        kind=AlertKind.TARGET,
        event=event,
        severity="critical",
        status="down",
        reason="it is down",
        since=now - 30,
        created_at=now,
        dedup_key=dedup_key(check, AlertKind.TARGET),
        labels={"team": "core"},
        observations={"latency_seconds": 0.5},
    )


def firing_state() -> CheckState:
    now = time.time()
    return CheckState(
        fail_streak=3,
        last_status="down",
        last_reason="it is down",
        last_up=False,
        fail_since=now - 30,
        changes=[now - 30],
        alerts={
            "target": AlertState(
                active=True,
                severity="critical",
                since=now - 30,
                reason="it is down",
                status="down",
                notified=True,
                notified_severity="critical",
                last_notified_at=now - 25,
            )
        },
    )


def record(check: str = "api", **changes: Any) -> dict[str, Any]:
    outbox = [
        Outgoing("pd", notification(check, 7), "sending"),
        Outgoing("slack", notification(check, 8, Event.RESOLVED)),
    ]
    doc = json.loads(
        encode_record(
            check, firing_state(), "http", {"team": "core"}, outbox, "replica-a", time.time()
        )
    )
    doc.update(changes)
    return doc


def test_a_record_round_trips() -> None:
    decoded = decode_record("api", json.dumps(record()).encode())
    assert decoded.state.alerts["target"].notified is True
    assert decoded.state.fail_streak == 3 and decoded.probe_type == "http"
    assert [
        (e.receiver, e.phase, e.notification.id, e.notification.event) for e in decoded.outbox
    ] == [("pd", "sending", 7, Event.FIRING), ("slack", "queued", 8, Event.RESOLVED)]
    assert decoded.replica == "replica-a" and decoded.dropped == []


def test_a_quiet_state_and_the_oldest_notifications_beyond_the_cap_are_left_out() -> None:
    outbox = [Outgoing("pd", notification("api", i)) for i in range(MAX_OUTBOX + 5)]
    doc = json.loads(encode_record("api", None, "", {}, outbox, "r", time.time()))
    assert [e["notification"]["id"] for e in doc["outbox"]][:1] == [5]
    assert len(doc["outbox"]) == MAX_OUTBOX
    assert doc["state"]["alerts"] == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xff\xfe", "not_utf8"),
        (b"{not json", "not_json"),
        (b"[" * 100_000 + b"]" * 100_000, "not_json"),
        (b"x" * (MAX_RECORD_BYTES + 1), "too_large"),
        (json.dumps(record(version=2)).encode(), "bad_shape"),
        (json.dumps(record(version=True)).encode(), "bad_shape"),
        (json.dumps([1, 2]).encode(), "bad_shape"),
        (json.dumps(record(check="db")).encode(), "wrong_key"),
        (
            json.dumps({**record(), "state": {**record()["state"], "fail_streak": "3"}}).encode(),
            "bad_shape",
        ),
        (
            json.dumps({**record(), "state": {**record()["state"], "fail_since": 1e300}}).encode(),
            "bad_shape",
        ),
        (json.dumps({**record(), "outbox": "nope"}).encode(), "bad_shape"),
    ],
)
def test_an_untrusted_record_is_refused_with_a_reason(value: bytes, reason: str) -> None:
    with pytest.raises(DamagedRecord) as caught:
        decode_record("api", value)
    assert caught.value.reason == reason
    assert "core" not in str(caught.value)  # where and why, never the values


def test_a_damaged_notification_costs_only_itself() -> None:
    doc = record()
    good = doc["outbox"][0]
    other = {
        **good,
        "notification": {**good["notification"], "check": "db", "dedup_key": "alivemcp/db"},
    }
    forged_key = {**good, "notification": {**good["notification"], "dedup_key": "alivemcp/db"}}
    doc["outbox"] = [
        {"receiver": "pd", "phase": "maybe", "notification": good["notification"]},
        {**good, "notification": {**good["notification"], "severity": "urgent"}},
        other,  # a resolve for another check would close someone else's incident
        forged_key,
        good,
        good,  # twice: once is enough
    ]
    decoded = decode_record("api", json.dumps(doc).encode())
    assert [(e.receiver, e.notification.id) for e in decoded.outbox] == [("pd", 7)]
    assert len(decoded.dropped) == 5
    assert decoded.state.alerts["target"].active is True


async def test_a_failure_says_whether_the_request_may_have_arrived() -> None:
    async with httpx.AsyncClient() as client:
        refused = await post_json(client, f"http://127.0.0.1:{free_port()}/x", b"{}", 1.0)
        assert not isinstance(refused, httpx.Response) and not refused.maybe_delivered
        with StandIn("webhook") as hook:
            hook.script.extend([HANG, Answer(500, "boom")])
            hung = await post_json(client, hook.url, b"{}", 0.3)
            assert not isinstance(hung, httpx.Response) and hung.maybe_delivered
            answered = await post_json(client, hook.url, b"{}", 1.0)
            assert isinstance(answered, httpx.Response)
            failure = classify_response(answered, 1)
            assert failure is not None and not failure.maybe_delivered
