"""Alert state is defined once: the policy's dataclasses carry the bounds, and a saved entry is
read back by validating against those same classes."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest

from alivemcp.alerting.policy import AlertState, CheckState
from alivemcp.alerting.saved import DamagedEntry, check_from_json


def _firing() -> CheckState:
    state = CheckState(
        fail_streak=3,
        known_streak=3,
        fail_since=1_700_000_000.5,
        last_status="down",
        last_reason="HTTP 503",
        last_up=False,
        changes=[1_700_000_100.0, 1_700_000_000.0],
    )
    state.alerts["target"] = AlertState(
        active=True,
        severity="critical",
        since=1_700_000_000.5,
        reason="HTTP 503",
        status="down",
        notified=True,
        notified_severity="critical",
        last_notified_at=1_700_000_001.0,
        reminders_sent=2,
    )
    return state


def _saved(state: CheckState) -> dict[str, Any]:
    return {"state": json.loads(json.dumps(state.to_json())), "probe_type": "http", "labels": {}}


def test_every_field_survives_a_save_and_a_read() -> None:
    state = _firing()
    read, probe_type, labels = check_from_json(_saved(state))
    assert (probe_type, labels) == ("http", {})
    for f in fields(CheckState):
        if f.name not in ("changes", "observations"):
            assert getattr(read, f.name) == getattr(state, f.name), f.name
    assert read.changes == sorted(state.changes)  # flap ageing reads the oldest first


@pytest.mark.parametrize(
    "field_name", [f.name for f in fields(AlertState) if f.name != "fingerprint"]
)
def test_an_alert_missing_any_field_is_damaged(field_name: str) -> None:
    raw = _saved(_firing())
    del raw["state"]["alerts"]["target"][field_name]
    with pytest.raises(DamagedEntry, match=f"state.alerts.target.{field_name}: Field required"):
        check_from_json(raw)


def test_an_alert_saved_before_fingerprints_existed_is_not_damaged() -> None:
    """``fingerprint`` came later than the state files on disk: its absence is an older
    version's entry (the default applies), not damage."""
    raw = _saved(_firing())
    del raw["state"]["alerts"]["target"]["fingerprint"]
    state, _, _ = check_from_json(raw)
    assert state.alerts["target"].fingerprint == ""


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("reminders_sent", "2"),
        ("reminders_sent", True),
        ("reminders_sent", -1),
        ("since", float("inf")),
        ("severity", "apocalyptic"),
        ("status", "sideways"),
        ("notified", 1),
        ("reason", "x" * 10_001),
    ],
)
def test_a_value_out_of_its_fields_bounds_is_damaged(where: str, value: Any) -> None:
    raw = _saved(_firing())
    raw["state"]["alerts"]["target"][where] = value
    with pytest.raises(DamagedEntry, match=f"state.alerts.target.{where}"):
        check_from_json(raw)
