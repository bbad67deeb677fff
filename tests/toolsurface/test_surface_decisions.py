"""The tool-surface alert in the alert manager (in-process, real webhook stand-ins): one
notification per distinct surface, one more when it flaps and then quiet, resolved on
approval, routed by ``alert="tool_surface_changed"``, kept across a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from alivemcp.alerting.policy import ALERT_FIELDS, CheckState
from alivemcp.alerting.saved import check_from_json
from alivemcp.engine.results import CheckInfo
from alivemcp.toolsurface.tracker import SurfaceVerdict
from tests.support.alerting_engine import FakeClock, check, fast, running
from tests.support.alerting_receivers import StandIn

KEY = "alivemcp/api/tool_surface_changed"


@pytest.fixture
def security() -> Iterator[StandIn]:
    with StandIn("webhook") as server:
        yield server


@pytest.fixture
def ops() -> Iterator[StandIn]:
    with StandIn("webhook") as server:
        yield server


def verdict(info: CheckInfo, digest: str | None, *, flapping: bool = False) -> SurfaceVerdict:
    if digest is None:
        return SurfaceVerdict(info, True, "a" * 16, "a" * 16, "tool surface approved")
    return SurfaceVerdict(
        info,
        False,
        digest,
        "a" * 16,
        f"tool surface changed to {digest}",
        summary=f"tool:echo changed ({digest})",
        details={"from": "a" * 16, "to": digest},
        flapping=flapping,
    )


def config(security: StandIn, ops: StandIn) -> dict[str, object]:
    return {
        **fast(failures_to_fire=1),
        "receivers": [security.receiver("security"), ops.receiver("ops")],
        "routes": [{"matchers": ['alert="tool_surface_changed"'], "receivers": ["security"]}],
        "default_receivers": ["ops"],
    }


async def test_one_notification_per_surface_then_flapping_then_resolved(
    tmp_path: Path, security: StandIn, ops: StandIn
) -> None:
    info, alert = check("api")
    async with running(config(security, ops), [(info, alert)], tmp_path) as h:
        m = h.manager
        m.observe_surface(verdict(info, "b" * 16))
        m.observe_surface(verdict(info, "b" * 16))  # the same surface again: told already
        m.observe_surface(verdict(info, "c" * 16))  # a new one: told
        m.observe_surface(verdict(info, "d" * 16, flapping=True))  # flapping: told once
        m.observe_surface(verdict(info, "e" * 16, flapping=True))
        m.observe_surface(verdict(info, "f" * 16))  # still flapping until approved
        m.observe_surface(verdict(info, None))  # approved
        m.observe_surface(verdict(info, None))
        await h.delivered()
        h.feed("api", "down")  # a target alert goes the default way, not to security
        await h.delivered()
    events = [(n["event"], n.get("details", {}).get("to")) for n in security.events()]
    assert events == [
        ("firing", "b" * 16),
        ("firing", "c" * 16),
        ("firing", "d" * 16),
        ("resolved", None),
    ]
    assert {n["dedup_key"] for n in security.events()} == {KEY}
    assert [n["alert"] for n in ops.events()] == ["target"]


async def test_the_open_alert_survives_a_restart_without_a_second_notification(
    tmp_path: Path, security: StandIn, ops: StandIn
) -> None:
    info, alert = check("api")
    clock = FakeClock()
    async with running(config(security, ops), [(info, alert)], tmp_path, clock) as h:
        h.manager.observe_surface(verdict(info, "b" * 16))
        await h.delivered()
    async with running(config(security, ops), [(info, alert)], tmp_path, clock) as h:
        h.manager.observe_surface(verdict(info, "b" * 16))
        h.manager.observe_surface(verdict(info, None))
        await h.delivered()
    assert [n["event"] for n in security.events()] == ["firing", "resolved"]


def test_a_saved_alert_from_before_fingerprints_still_loads() -> None:
    saved = CheckState().to_json()
    assert "fingerprint" in ALERT_FIELDS and "fingerprint" not in _older_alert()
    entry = {
        "state": {**saved, "alerts": {"target": _older_alert()}},
        "probe_type": "test_file",
        "labels": {},
    }
    loaded, _, _ = check_from_json(entry)
    assert loaded.alerts["target"].fingerprint == ""
    assert loaded.alerts["target"].active is True


def _older_alert() -> dict[str, object]:
    return {
        "active": True,
        "severity": "critical",
        "since": 1.0,
        "reason": "down",
        "status": "down",
        "notified": True,
        "notified_severity": "critical",
        "last_notified_at": 1.0,
        "reminders_sent": 0,
    }
