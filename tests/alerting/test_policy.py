"""Alert policy through the real manager and a real local receiver: thresholds, severities,
probe-broken alerts, reminders, flapping, maintenance windows and dependencies."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.support.alerting_engine import FakeClock, check, fast, running
from tests.support.alerting_receivers import StandIn


def seen(hook: StandIn) -> list[tuple[str, str, str, str]]:
    return [(n["check"], n["alert"], n["event"], n["severity"]) for n in hook.events()]


def config(hook: StandIn, **policy: object) -> dict:
    return {**fast(**policy), "receivers": [hook.receiver("hook")], "default_receivers": ["hook"]}


async def test_fires_after_threshold_and_resolves_after_threshold(
    hook: StandIn, tmp_path: Path
) -> None:
    async with running(config(hook), [check("api")], tmp_path) as h:
        h.feed("api", "down")
        await h.delivered()
        assert seen(hook) == []  # one failure is not an alert (default failures_to_fire: 2)
        h.feed("api", "down", "up")
        await h.delivered()
        assert seen(hook) == [("api", "target", "firing", "critical")]
        h.feed("api", "up")
        await h.delivered()
        assert seen(hook) == [
            ("api", "target", "firing", "critical"),
            ("api", "target", "resolved", "critical"),
        ]
        first = hook.events()[0]
        assert first["reason"] == "it is down" and first["dedup_key"] == "alivemcp/api"
        assert 'alivemcp_alerts_firing{severity="critical"} 0.0' in h.metrics()


async def test_severity_follows_status_and_labels(hook: StandIn, tmp_path: Path) -> None:
    checks = [check("slow"), check("paged", labels={"severity": "error"})]
    async with running(config(hook, failures_to_fire=1), checks, tmp_path) as h:
        h.feed("slow", "degraded")
        await h.delivered()
        assert 'alivemcp_alerts_firing{severity="warning"} 1.0' in h.metrics()
        h.feed("slow", "down")  # escalation: a new notification with the higher severity
        h.feed("paged", "down")
        await h.delivered()
        assert seen(hook) == [
            ("slow", "target", "firing", "warning"),
            ("slow", "target", "firing", "critical"),
            ("paged", "target", "firing", "error"),
        ]


async def test_unknown_raises_probe_broken_alert_to_owners_only(tmp_path: Path) -> None:
    with StandIn("webhook") as targets, StandIn("webhook") as owners:
        doc = {
            **fast(),
            "receivers": [targets.receiver("oncall"), owners.receiver("owners")],
            "default_receivers": ["oncall"],
            "owner_receivers": ["owners"],
        }
        async with running(doc, [check("s3")], tmp_path) as h:
            h.feed("s3", "down", "unknown", "unknown", "down")
            await h.delivered()
            # unknown neither pages the target nor resets its failure streak
            assert seen(targets) == [("s3", "target", "firing", "critical")]
            assert seen(owners) == [("s3", "probe_broken", "firing", "warning")]
            h.feed("s3", "up", "up")
            await h.delivered()
            assert seen(owners)[-1] == ("s3", "probe_broken", "resolved", "warning")
            assert seen(targets)[-1] == ("s3", "target", "resolved", "critical")


async def test_reminders_repeat_while_firing_up_to_the_cap(hook: StandIn, tmp_path: Path) -> None:
    async with running(
        config(hook, repeat_interval="1m", max_reminders=2), [check("db")], tmp_path
    ) as h:
        h.feed("db", "down", "down", "unknown")
        for _ in range(6):
            h.tick(advance=61)
        await h.delivered()
        assert [e for _, _, e, _ in seen(hook)] == ["firing", "reminder", "reminder"]
        # A reminder names the status that fired the alert, not an unknown run in between.
        assert {n["status"] for n in hook.events()} == {"down"}
        h.feed("db", "up", "up")
        await h.delivered()
        assert seen(hook)[-1][2] == "resolved"


async def test_flapping_sends_one_notice_instead_of_a_stream(hook: StandIn, tmp_path: Path) -> None:
    policy = {
        "failures_to_fire": 1,
        "successes_to_resolve": 1,
        "flap_window": "60s",
        "flap_threshold": 4,
    }
    async with running(config(hook, **policy), [check("wobbly")], tmp_path) as h:
        for _ in range(20):
            h.feed("wobbly", "down", "up")
        await h.delivered()
        events = seen(hook)
        flapping = [e for e in events if e[1] == "flapping"]
        assert flapping == [("wobbly", "flapping", "firing", "warning")]
        # Before the flap threshold a few changes get through; after it, nothing but the notice.
        assert len(events) <= 6, events
        # It settles down: once the window has no changes, flapping ends and the true state
        # (down) is sent.
        h.feed("wobbly", "down")
        h.tick(advance=120)
        await h.delivered()
        assert seen(hook)[-2:] == [
            ("wobbly", "flapping", "resolved", "warning"),
            ("wobbly", "target", "firing", "critical"),
        ]


async def test_maintenance_holds_pages_and_sends_true_state_at_the_end(
    hook: StandIn, tmp_path: Path
) -> None:
    clock = FakeClock(datetime(2030, 1, 1, 1, 0, tzinfo=UTC).timestamp())
    doc = config(hook)
    doc["maintenance"] = [
        {
            "name": "upgrade",
            "matchers": ["team=data"],
            "start": "2030-01-01T02:00:00Z",
            "end": "2030-01-01T03:00:00Z",
        }
    ]
    checks = [
        check("kafka", labels={"team": "data"}),
        check("flaky", labels={"team": "data"}),
        check("web", labels={"team": "web"}),
    ]
    async with running(doc, checks, tmp_path, clock) as h:
        h.tick(advance=3600)  # 02:00: the window opens
        h.feed("kafka", "down", "down", "down")
        h.feed("flaky", "down", "down", "up", "up")  # fails and recovers inside the window
        h.feed("web", "down", "down")  # not matched: pages as usual
        h.tick(advance=60)
        await h.delivered()
        assert seen(hook) == [("web", "target", "firing", "critical")]
        # Held, not forgotten: the held alert counts as firing.
        assert 'alivemcp_alerts_firing{severity="critical"} 2.0' in h.metrics()
        assert [(a["check"], a["notified"]) for a in h.manager.firing_alerts()] == [
            ("kafka", False),
            ("web", True),
        ]
        h.tick(advance=3600)  # 03:00+: the window closed; kafka is still down
        await h.delivered()
        assert seen(hook) == [
            ("web", "target", "firing", "critical"),
            ("kafka", "target", "firing", "critical"),
        ]


async def test_resolve_is_not_held_by_maintenance(hook: StandIn, tmp_path: Path) -> None:
    clock = FakeClock(datetime(2030, 1, 6, 1, 0, tzinfo=UTC).timestamp())  # a Sunday
    doc = config(hook)
    doc["maintenance"] = [
        {
            "name": "weekly",
            "matchers": ["check=~db.*"],
            "recurring": {
                "weekdays": ["sun"],
                "start": "02:00",
                "duration": "2h",
                "timezone": "UTC",
            },
        }
    ]
    async with running(doc, [check("db1")], tmp_path, clock) as h:
        h.feed("db1", "down", "down")  # 01:00, before the window: pages
        h.tick(advance=3600 + 60)  # 02:01 inside the weekly window
        h.feed("db1", "up", "up")
        await h.delivered()
        assert seen(hook) == [
            ("db1", "target", "firing", "critical"),
            ("db1", "target", "resolved", "critical"),
        ]
        h.feed("db1", "down", "down")  # held now
        await h.delivered()
        assert len(seen(hook)) == 2
        h.tick(advance=7 * 86400)  # a week later, at 02:03 again: still inside a window
        await h.delivered()
        assert len(seen(hook)) == 2
        h.tick(advance=2 * 3600)  # 04:03: outside
        await h.delivered()
        assert seen(hook)[-1] == ("db1", "target", "firing", "critical")


async def test_dependants_do_not_page_while_their_dependency_fails(
    hook: StandIn, tmp_path: Path
) -> None:
    checks = [
        check("cluster"),
        check("canary", depends_on=["cluster"]),
        check("lag", depends_on=["cluster"]),
    ]
    async with running(config(hook), checks, tmp_path) as h:
        # The canary reaches its threshold before the cluster does: still suppressed, because
        # the cluster's latest result already failed.
        h.feed("cluster", "down")
        h.feed("canary", "down", "down", "down")
        h.feed("cluster", "down")
        h.feed("lag", "down", "down")
        await h.delivered()
        assert seen(hook) == [("cluster", "target", "firing", "critical")]
        # The cluster recovers, the canary does not: now the canary pages (its true state);
        # lag recovered meanwhile and never pages.
        h.feed("lag", "up", "up")
        h.feed("cluster", "up", "up")
        await h.delivered()
        assert seen(hook) == [
            ("cluster", "target", "firing", "critical"),
            ("cluster", "target", "resolved", "critical"),
            ("canary", "target", "firing", "critical"),
        ]


async def test_disabled_and_explicit_receivers(tmp_path: Path) -> None:
    with StandIn("webhook") as a, StandIn("webhook") as b:
        doc = {
            **fast(failures_to_fire=1),
            "receivers": [a.receiver("a"), b.receiver("b")],
            "default_receivers": ["a"],
            "routes": [{"matchers": ["team=~pay.*"], "receivers": ["b"]}],
        }
        checks = [
            check("quiet", alert={"enabled": False}),
            check("pay", labels={"team": "payments"}),
            check("mine", alert={"receivers": ["b"], "failures_to_fire": 3}),
            check("other"),
        ]
        async with running(doc, checks, tmp_path) as h:
            for name in ("quiet", "pay", "other"):
                h.feed(name, "down")
            h.feed("mine", "down", "down")
            await h.delivered()
            assert [n for n, *_ in seen(a)] == ["other"]
            assert [n for n, *_ in seen(b)] == ["pay"]
            h.feed("mine", "down")
            await h.delivered()
            assert [n for n, *_ in seen(b)] == ["pay", "mine"]
