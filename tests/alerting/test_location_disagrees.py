"""The ``location_disagrees`` alert in the alert manager (in-process, real local receivers):
some of a check's locations see it down, fewer than its quorum. One notification per set of
dissenting locations (it is fed about once per check interval), a resolve when they agree
again, routed by ``alert="location_disagrees"`` apart from the pages, held by maintenance
windows, evaluated only for the checks this replica owns, and kept across a restart (state
file) and a handover (the check's alert-state record)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alivemcp.alerting.config import AlertingConfig
from alivemcp.alerting.manager import AlertManager
from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.records import decode_record
from alivemcp.alerting.saved import notification_from_json
from alivemcp.alerting.state import STATE_FILE
from alivemcp.engine.results import CheckInfo
from tests.support.alerting_daemon import per_key
from tests.support.alerting_engine import FakeClock, check, fast, running
from tests.support.alerting_receivers import Answer, StandIn

KEY = "alivemcp/api/location_disagrees"
ROUTE = 'alert="location_disagrees"'


def reason(*down: str, up: tuple[str, ...] = ("ap-south",), total: int = 3, quorum: int = 2) -> str:
    """The quorum's reason for a degraded verdict (as alivemcp/cluster/quorum.py words it)."""
    said = ", ".join(f"{loc} (connect refused)" for loc in down)
    return (
        f"down from {len(down)} of {total} locations (quorum {quorum}): {said}; {', '.join(up)} up"
    )


@pytest.fixture
def regions() -> Iterator[StandIn]:
    """Where location_disagrees goes: a webhook (alivemcp's JSON body)."""
    with StandIn("webhook") as server:
        yield server


@pytest.fixture
def oncall() -> Iterator[StandIn]:
    """Where everything else goes (the pages)."""
    with StandIn("webhook") as server:
        yield server


def config(regions: StandIn, oncall: StandIn, **extra: Any) -> dict[str, Any]:
    return {
        **fast(failures_to_fire=1),
        "receivers": [regions.receiver("regions"), oncall.receiver("oncall")],
        "routes": [{"matchers": [ROUTE], "receivers": ["regions"]}],
        "default_receivers": ["oncall"],
        **extra,
    }


def seen(server: StandIn) -> list[tuple[str, str, list[str] | None]]:
    """(check, event, dissenting locations named) of each notification received."""
    return [
        (n["check"], n["event"], n.get("details", {}).get("locations"))
        for n in server.events()
        if n["alert"] == "location_disagrees"
    ]


async def test_one_notification_per_set_of_locations_and_one_resolve(
    tmp_path: Path, regions: StandIn, oncall: StandIn
) -> None:
    with StandIn("slack") as chat:
        doc = config(regions, oncall)
        doc["receivers"].append(chat.receiver("chat"))
        doc["routes"][0]["receivers"].append("chat")
        info, alert = check("api")
        async with running(doc, [(info, alert)], tmp_path) as h:
            m = h.manager
            for _ in range(3):  # the same dissent, interval after interval: told once
                m.observe_disagreement(info, ("eu-west",), reason("eu-west"))
            await h.delivered()
            assert seen(regions) == [("api", "firing", ["eu-west"])]
            [fired] = regions.events()
            assert fired["severity"] == "warning"
            assert fired["dedup_key"] == KEY
            assert "eu-west (connect refused)" in fired["reason"]
            assert [(a["alert"], a["severity"], a["notified"]) for a in m.firing_alerts()] == [
                ("location_disagrees", "warning", True)
            ]
            assert 'alivemcp_alerts_firing{severity="warning"} 1.0' in h.metrics()

            # Another location now: a new notification; the same one named twice: not.
            m.observe_disagreement(info, ("us-east",), reason("us-east", up=("eu-west",)))
            m.observe_disagreement(info, ("us-east", "us-east"), reason("us-east"))
            await h.delivered()
            assert seen(regions)[1:] == [("api", "firing", ["us-east"])]
            # Two of five under a quorum of three: a new set; the same set in another order:
            # nothing new.
            two = reason("us-east", "ap-south", up=("eu-west",), total=5, quorum=3)
            m.observe_disagreement(info, ("us-east", "ap-south"), two)
            m.observe_disagreement(info, ("ap-south", "us-east"), two)
            await h.delivered()
            assert seen(regions)[2:] == [("api", "firing", ["ap-south", "us-east"])]
            assert regions.events()[-1]["since"] == fired["since"]  # the same incident

            # They agree again: resolved, once.
            m.observe_disagreement(info, (), "up from 3 of 3 locations")
            m.observe_disagreement(info, (), "up from 3 of 3 locations")
            await h.delivered()
            assert seen(regions)[3:] == [("api", "resolved", None)]
            assert regions.events()[-1]["reason"] == "up from 3 of 3 locations"
            assert m.firing_alerts() == []
            assert 'alivemcp_alerts_firing{severity="warning"} 0.0' in h.metrics()

            # A page of the same check goes the default way, never to the regions receiver.
            h.feed("api", "down")
            await h.delivered()
        assert [(n["alert"], n["event"]) for n in oncall.events()] == [("target", "firing")]
        assert {n["alert"] for n in regions.events()} == {"location_disagrees"}
        assert {n["dedup_key"] for n in regions.events()} == {KEY}
        # Slack got the same four, titled for what they are.
        titles = [json.dumps(r.body) for r in chat.accepted]
        assert len(titles) == 4
        assert "FIRING [warning] api: locations disagree" in titles[0]
        assert "RESOLVED [warning] api: locations agree again" in titles[3]


async def test_a_disabled_or_unknown_check_is_not_evaluated(
    tmp_path: Path, regions: StandIn, oncall: StandIn
) -> None:
    quiet, quiet_alert = check("quiet", alert={"enabled": False})
    stranger = CheckInfo(name="stranger", probe_type="test_file")
    async with running(config(regions, oncall), [(quiet, quiet_alert)], tmp_path) as h:
        h.manager.observe_disagreement(quiet, ("eu-west",), reason("eu-west"))
        h.manager.observe_disagreement(stranger, ("eu-west",), reason("eu-west"))
        await h.delivered()
        assert h.manager.firing_alerts() == []
    assert regions.requests == [] and oncall.requests == []


async def test_maintenance_holds_it_and_the_true_state_is_sent_at_the_end(
    tmp_path: Path, regions: StandIn, oncall: StandIn
) -> None:
    clock = FakeClock(datetime(2030, 1, 1, 1, 0, tzinfo=UTC).timestamp())
    window = {
        "name": "network-work",
        "matchers": ["team=data"],
        "start": "2030-01-01T02:00:00Z",
        "end": "2030-01-01T03:00:00Z",
    }
    checks = [
        check("api", labels={"team": "data"}),
        check("cache", labels={"team": "data"}),
        check("db", labels={"team": "data"}),
        check("web", labels={"team": "web"}),
    ]
    infos = {info.name: info for info, _ in checks}

    def disagree(name: str, *down: str) -> None:
        h.manager.observe_disagreement(infos[name], down, reason(*down) if down else "all up")

    async with running(config(regions, oncall, maintenance=[window]), checks, tmp_path, clock) as h:
        disagree("api", "eu-west")  # 01:00, before the window: told
        disagree("cache", "eu-west")
        h.tick(advance=3600)  # 02:00: the window opens
        disagree("api", "us-east")  # a new set, held
        disagree("db", "eu-west")  # opened inside the window: held...
        disagree("db")  # ...and over inside it: nothing to tell
        disagree("cache")  # a resolve is never held
        disagree("web", "ap-south")  # not in the window
        h.tick(advance=60)
        await h.delivered()
        assert seen(regions) == [
            ("api", "firing", ["eu-west"]),
            ("cache", "firing", ["eu-west"]),
            ("cache", "resolved", None),
            ("web", "firing", ["ap-south"]),
        ]
        disagree("api", "us-east")  # the same held set: still nothing
        h.tick(advance=3600)  # 03:01: the window closed; us-east still disagrees
        await h.delivered()
        assert seen(regions)[4:] == [("api", "firing", ["us-east"])]
        h.tick(advance=60)
        disagree("api", "us-east")
        await h.delivered()
        assert len(seen(regions)) == 5
    assert oncall.requests == []


async def test_an_open_alert_and_a_queued_notification_survive_a_restart(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd, StandIn("webhook") as oncall:
        doc = {
            **fast(),
            "receivers": [pd.receiver("pd"), oncall.receiver("oncall")],
            "routes": [{"matchers": [ROUTE], "receivers": ["pd"]}],
            "default_receivers": ["oncall"],
        }
        info, alert = check("api")
        pd.script.extend([Answer(500, "{}")] * 10_000)  # PagerDuty down: the trigger waits
        async with running(doc, [(info, alert)], tmp_path) as h:
            h.manager.observe_disagreement(info, ("eu-west",), reason("eu-west"))
            await pd.await_for(lambda: pd.requests, what="a first attempt")
        saved = json.loads((tmp_path / STATE_FILE).read_text())
        assert saved["checks"]["api"]["state"]["alerts"]["location_disagrees"]["active"] is True
        assert [(n["kind"], n["event"]) for n in saved["queues"]["pd"]] == [
            ("location_disagrees", "firing")
        ]
        assert pd.accepted == []
        pd.script.clear()

        async with running(doc, [(info, alert)], tmp_path) as h:
            await h.delivered()  # the queued trigger, from the file
            h.manager.observe_disagreement(info, ("eu-west",), reason("eu-west"))
            await h.delivered()
            assert per_key(pd.events()) == {KEY: ["trigger"]}  # the open alert: no second
            h.manager.observe_disagreement(info, (), "up from 3 of 3 locations")
            await h.delivered()
        assert per_key(pd.events()) == {KEY: ["trigger", "resolve"]}
        [trigger, _] = pd.events()
        assert trigger["payload"]["severity"] == "warning"
        assert trigger["payload"]["custom_details"]["alert"] == "location_disagrees"
        assert oncall.requests == []


def test_a_saved_notification_of_the_kind_reads_back() -> None:
    notification = Notification(
        id=7,
        check="api",
        probe_type="mcp_endpoint",
        kind=AlertKind.LOCATION_DISAGREES,
        event=Event.FIRING,
        severity="warning",
        status="degraded",
        reason=reason("eu-west"),
        since=1_900_000_000.0,
        created_at=1_900_000_000.0,
        dedup_key=dedup_key("api", AlertKind.LOCATION_DISAGREES),
        details={"locations": ["eu-west"]},
    )
    assert notification.dedup_key == KEY
    assert notification_from_json(notification.to_json()) == notification


class AcknowledgedLog:
    """The alert-state log as one replica sees it: the latest record of each check, every
    write acknowledged at once (the brokers' side is tests/cluster/test_cluster_alerting.py)."""

    def __init__(self) -> None:
        self.latest: dict[str, bytes | None] = {}

    def write(self, check: str, record: bytes | None) -> asyncio.Future[bool]:
        self.latest[check] = record
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done


def shard_of(name: str) -> int:
    return 0 if name == "api" else 1


async def replica(
    name: str, doc: dict[str, Any], checks: list[Any], tmp: Path, clock: FakeClock
) -> tuple[AlertManager, AcknowledgedLog]:
    manager = AlertManager(
        AlertingConfig.model_validate(doc),
        checks,
        tmp / name,
        CollectorRegistry(),
        clock=clock,
        tick_interval=3600,
        shared=True,
    )
    await manager.start()
    log = AcknowledgedLog()
    manager.attach(log, shard_of, name)
    return manager, log


async def test_only_the_owner_evaluates_it_and_a_new_owner_carries_it_on(
    tmp_path: Path, regions: StandIn, oncall: StandIn
) -> None:
    checks = [check("api"), check("other")]
    api, other = (info for info, _ in checks)
    doc = config(regions, oncall)
    clock = FakeClock()
    first, log = await replica("r1", doc, checks, tmp_path, clock)
    try:
        # Nothing adopted yet: this replica owns no check.
        first.observe_disagreement(api, ("eu-west",), reason("eu-west"))
        first.adopt(frozenset({0}), {})  # api's shard; other's belongs to another replica
        first.observe_disagreement(other, ("eu-west",), reason("eu-west"))
        first.observe_disagreement(api, ("us-east",), reason("us-east"))
        first.observe_disagreement(api, ("us-east",), reason("us-east"))
        assert await first.wait_delivered(20)
        assert seen(regions) == [("api", "firing", ["us-east"])]
        assert [a["check"] for a in first.firing_alerts()] == ["api"]
    finally:
        await first.stop(grace=1)
    assert "other" not in log.latest
    record = log.latest["api"]
    assert record is not None
    adopted = decode_record("api", record)
    told = adopted.state.alerts["location_disagrees"]
    assert (told.active, told.notified, told.fingerprint) == (True, True, "us-east")
    assert adopted.outbox == []  # delivered before the handover

    second, _ = await replica("r2", doc, checks, tmp_path, clock)
    try:
        second.adopt(frozenset({0}), {"api": adopted})
        second.observe_disagreement(api, ("us-east",), reason("us-east"))  # told already
        second.observe_disagreement(api, (), "up from 3 of 3 locations")
        assert await second.wait_delivered(20)
    finally:
        await second.stop(grace=1)
    assert seen(regions) == [("api", "firing", ["us-east"]), ("api", "resolved", None)]
    assert oncall.requests == []
