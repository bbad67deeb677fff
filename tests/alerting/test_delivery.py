"""Delivery against local stand-ins answering like Slack and PagerDuty: retries on 429 (with
Retry-After), 500 and hangs deliver every notification exactly once and in order per check;
permanent errors are surfaced and not retried; storms are grouped; alert-test works."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from pathlib import Path

import structlog

from alivemcp.alerting.config import AlertingConfig
from alivemcp.alerting.manager import send_test_notification
from alivemcp.alerting.receivers.webhook import signature
from tests.support import cli
from tests.support.alerting_daemon import per_key
from tests.support.alerting_engine import check, fast, running
from tests.support.alerting_receivers import HANG, Answer, StandIn, rate_limited


async def test_slack_rate_limit_errors_and_hang_then_recovery(tmp_path: Path) -> None:
    with StandIn("slack") as slack:
        slack.script.extend([rate_limited(1), Answer(500, "rollup_error"), HANG, Answer(503, "")])
        doc = {
            **fast(failures_to_fire=1, successes_to_resolve=1),
            "receivers": [slack.receiver("slack", timeout=0.5, max_batch=1)],
            "default_receivers": ["slack"],
        }
        names = ["a", "b", "c"]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for n in names:
                h.feed(n, "down")
            for n in names:
                h.feed(n, "up")
            h.feed("a", "down")
            await h.delivered(30)
            metrics = h.metrics()
        texts = slack.texts()
        expected = [f"FIRING [critical] {n}: down" for n in names]
        expected += [f"RESOLVED [critical] {n}: recovered" for n in names]
        expected += ["FIRING [critical] a: down"]
        assert [t.split(": it is")[0].split(": ok")[0] for t in texts] == expected, texts
        # 4 failed attempts (429, 500, hang, 503), then one request per notification.
        assert [r.status for r in slack.requests[:4]] == [429, 500, 0, 503]
        assert len(slack.requests) == 4 + 7
        assert 'alivemcp_notifications_total{outcome="delivered",receiver="slack"} 7.0' in metrics
        assert 'alivemcp_notifications_total{outcome="retried",receiver="slack"} 4.0' in metrics
        # Retry-After: 1 was honoured.
        assert slack.requests[1].at - slack.requests[0].at >= 1.0
        assert 'alivemcp_notification_queue_depth{receiver="slack"} 0.0' in metrics


async def test_pagerduty_outage_then_recovery_exactly_once_in_order(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        pd.script.extend([Answer(500, "{}"), rate_limited(0.5), HANG, Answer(502, "bad gw")])
        doc = {
            **fast(failures_to_fire=1, successes_to_resolve=1),
            "receivers": [pd.receiver("pd", timeout=0.5)],
            "default_receivers": ["pd"],
        }
        names = [f"svc{i}" for i in range(5)]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for n in names:
                h.feed(n, "down")
            # Mid-outage (the first attempt refused): more notifications queue behind.
            await pd.await_for(lambda: pd.requests, what="the first refused attempt")
            for n in names:
                h.feed(n, "up")
                h.feed(n, "degraded")
            await h.delivered(30)
        keys = per_key(pd.events())
        assert keys == {f"alivemcp/{n}": ["trigger", "resolve", "trigger"] for n in names}
        triggers = [e for e in pd.events() if e["event_action"] == "trigger"]
        assert {e["payload"]["severity"] for e in triggers} == {"critical", "warning"}
        assert all(e["payload"]["custom_details"]["reason"] for e in triggers)


async def test_webhook_batches_survive_failures_without_loss_or_duplicates(tmp_path: Path) -> None:
    with StandIn("webhook") as hook:
        hook.script.extend([Answer(500), HANG, rate_limited(0.2), Answer(500)])
        doc = {
            **fast(failures_to_fire=1, successes_to_resolve=1),
            "receivers": [
                hook.receiver("hook", timeout=0.5, max_batch=7, hmac_secret="sign-me-please")
            ],
            "default_receivers": ["hook"],
        }
        names = [f"c{i}" for i in range(10)]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for round_ in range(3):
                for n in names:
                    h.feed(n, "down" if round_ % 2 == 0 else "up")
                await asyncio.sleep(0.1)  # why: the rounds' pace (they arrive over the outage)
            await h.delivered(30)
        ids = [n["id"] for n in hook.events()]
        assert len(ids) == 30 and len(set(ids)) == 30 and ids == sorted(ids)
        by_check: dict[str, list[str]] = defaultdict(list)
        for n in hook.events():
            by_check[n["check"]].append(n["event"])
        assert all(v == ["firing", "resolved", "firing"] for v in by_check.values())
        for request in hook.accepted:
            raw = json.dumps(request.body).encode()
            assert request.headers["X-Alivemcp-Signature"] == signature("sign-me-please", raw)


async def test_permanent_errors_are_surfaced_and_not_retried(tmp_path: Path) -> None:
    with StandIn("slack") as slack, StandIn("pagerduty") as pd:
        slack.script.extend(
            [
                Answer(404, "no_service"),
                Answer(410, "channel_is_archived"),
                Answer(403, "action_prohibited"),
            ]
        )
        doc = {
            **fast(failures_to_fire=1),
            "receivers": [
                slack.receiver("slack", max_batch=1),
                pd.receiver("pd", routing_key="not-the-right-key"),
            ],
            "default_receivers": ["slack", "pd"],
        }
        with structlog.testing.capture_logs() as logs:
            async with running(doc, [check("x"), check("y"), check("z")], tmp_path) as h:
                for n in ("x", "y", "z"):
                    h.feed(n, "down")
                await h.delivered()
                metrics = h.metrics()
        # Nothing is retried later either: a rejected notification left its queue (a retry
        # would need it there; a transient failure keeps it queued).
        assert 'alivemcp_notification_queue_depth{receiver="slack"} 0.0' in metrics
        assert 'alivemcp_notification_queue_depth{receiver="pd"} 0.0' in metrics
        assert [r.status for r in slack.requests] == [404, 410, 403]
        assert [r.status for r in pd.requests] == [400, 400, 400]
        assert 'alivemcp_notification_permanent_failures_total{receiver="slack"} 3.0' in metrics
        assert 'alivemcp_notification_permanent_failures_total{receiver="pd"} 3.0' in metrics
        assert (
            'alivemcp_notifications_total{outcome="permanent_failure",receiver="slack"} 3.0'
            in metrics
        )
        errors = [e for e in logs if e["log_level"] == "error"]
        assert len(errors) == 6
        assert {e["error"] for e in errors if e["receiver"] == "slack"} == {
            "HTTP 404 no_service",
            "HTTP 410 channel_is_archived",
            "HTTP 403 action_prohibited",
        }
        dumped = repr(logs)
        assert "XXXXsecretXXXX" not in dumped and "not-the-right-key" not in dumped


async def test_pagerduty_rejects_one_event_and_the_rest_still_flow(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        pd.script.append(Answer(400, json.dumps({"status": "invalid event"})))
        doc = {
            **fast(failures_to_fire=1),
            "receivers": [pd.receiver("pd")],
            "default_receivers": ["pd"],
        }
        async with running(doc, [check("p"), check("q")], tmp_path) as h:
            h.feed("p", "down")
            h.feed("q", "down")
            await h.delivered()
        assert [r.status for r in pd.requests] == [400, 202]
        assert per_key(pd.events()) == {"alivemcp/q": ["trigger"]}


async def test_500_simultaneous_failures_become_a_few_grouped_messages(tmp_path: Path) -> None:
    with StandIn("slack") as slack, StandIn("pagerduty") as pd, StandIn("webhook") as hook:
        doc = {
            "group_wait": 0.5,
            "group_interval": 1,
            "policy": {"failures_to_fire": 1, "successes_to_resolve": 1},
            "receivers": [
                slack.receiver("slack", min_interval=1),
                pd.receiver("pd", min_interval=0.01),
                hook.receiver("hook"),
            ],
            "default_receivers": ["slack", "pd", "hook"],
        }
        names = [f"partition-{i:03d}" for i in range(500)]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for n in names:
                h.feed(n, "down", step=0.001)
            await h.delivered(30)
            assert len(slack.accepted) <= 3, len(slack.accepted)
            counted = sum(int(re.match(r"(\d+) alert", t).group(1)) for t in slack.texts())
            assert counted == 500
            assert "partition-000" in json.dumps(slack.accepted[0].body["blocks"])
            assert len(hook.accepted) <= 3 and len(hook.events()) == 500
            # PagerDuty: one page for the whole storm, not 500.
            assert len(pd.accepted) == 1
            group = pd.accepted[0].body
            assert group["payload"]["summary"].startswith("500 checks firing: partition-000")
            assert group["payload"]["custom_details"]["total"] == 500
            for n in names:
                h.feed(n, "up", step=0.001)
            await h.delivered(30)
        assert len(slack.accepted) <= 6
        # Members resolve silently; the last one resolves the group.
        assert per_key(pd.events()) == {group["dedup_key"]: ["trigger", "resolve"]}


async def test_alert_test_command(tmp_path: Path) -> None:
    with StandIn("slack") as slack, StandIn("pagerduty") as pd:
        slack_cfg = slack.receiver("team-slack")
        gone = {**slack.receiver("revoked"), "webhook_url": slack.url.replace("XXXX", "gone")}
        config = AlertingConfig.model_validate({"receivers": [slack_cfg, pd.receiver("pd"), gone]})
        ok, message = await send_test_notification(config, "team-slack")
        assert ok, message
        assert "TEST alivemcp-test" in slack.texts()[0]
        ok, message = await send_test_notification(config, "pd")
        assert ok, message
        assert per_key(pd.events()) == {"alivemcp/alert-test": ["trigger", "resolve"]}
        slack.script.append(Answer(404, "no_service"))
        ok, message = await send_test_notification(config, "revoked")
        assert not ok and "no_service" in message and "gone" not in message
        ok, message = await send_test_notification(config, "nope")
        assert not ok and "team-slack" in message
        # The real CLI, end to end.
        path = tmp_path / "c.yaml"
        path.write_text(json.dumps({"alerting": {"receivers": [slack_cfg]}}))
        proc = await asyncio.to_thread(
            cli, "alert-test", "--config", str(path), "--receiver", "team-slack", timeout=60
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "delivered to team-slack" in proc.stdout
        assert len(slack.accepted) == 2


async def test_a_storm_that_keeps_growing_is_summarised_every_group_interval(
    tmp_path: Path,
) -> None:
    """Checks of one interval fail spread over time (the scheduler staggers them): after
    the first grouped message the rest accumulate for group_interval instead of trickling
    out one message a second."""
    with StandIn("slack") as slack:
        doc = {
            "group_wait": 0,
            "group_interval": 30,
            "policy": {"failures_to_fire": 1},
            "receivers": [slack.receiver("slack", min_interval=0)],
            "default_receivers": ["slack"],
        }
        names = [f"n{i:02d}" for i in range(60)]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for wave in range(6):
                for n in names[wave * 10 : (wave + 1) * 10]:
                    h.feed(n, "down")
                await asyncio.sleep(0.3)  # why: the waves' pace (the storm spreads over time)
            # Stopping flushes what is held back (a shutdown does not wait out the interval).
        counted = sum(int(re.match(r"(\d+) alert", t).group(1)) for t in slack.texts())
        assert counted == 60
        assert len(slack.accepted) <= 2, slack.texts()
