"""Alerting in the real daemon process (`alivemcp run`), with checks whose state a file sets
(the `test_file` probe) and local stand-ins for Slack, PagerDuty and a webhook."""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from alivemcp.alerting.state import STATE_FILE
from tests.support import REPO, DaemonProcess
from tests.support.alerting_daemon import file_check, log_events, per_key, set_state, write_config
from tests.support.alerting_receivers import HANG, Answer, StandIn, rate_limited


def status_of(d: DaemonProcess, name: str) -> dict[str, Any]:
    """The check's row in /status, empty until the daemon has loaded it."""
    rows = {row["check"]: row for row in d.get_json("/status")["checks"]}
    return rows.get(name) or {}


def ts(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00")).timestamp()


RULES = REPO / "deploy" / "prometheus" / "alivemcp-rules.yaml"


def assert_rules_use_exported_metrics(exposition: str) -> None:
    """deploy/prometheus rules are well-formed and name only metrics the daemon exports
    (the cluster group's: a replica in cluster mode, tests/cluster/test_cluster_daemon.py; the
    discovery group's: a daemon with a discovery source, tests/discovery)."""
    doc = yaml.safe_load(RULES.read_text())
    apart = ("alivemcp-cluster", "alivemcp-discovery", "alivemcp-tool-surface")
    rules = [r for g in doc["groups"] if g["name"] not in apart for r in g["rules"]]
    assert rules and all({"alert", "expr", "labels", "annotations"} <= set(r) for r in rules)
    assert all(r["labels"]["severity"] in ("critical", "warning") for r in rules)
    exported = {
        line.split("{")[0].split(" ")[0]
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }
    used = {m for r in rules for m in re.findall(r"\balivemcp_[a-z_]+", r["expr"])}
    assert used and used <= exported, used - exported


def test_kill_and_restart_mid_incident(tmp_path: Path, slack: StandIn, pd: StandIn) -> None:
    """Fire, kill -9, restart: no duplicate trigger, the resolve is delivered. Slack meets a
    429, a 500 and a hang on the way and still gets each message exactly once, in order."""
    api = file_check(tmp_path, "api")
    config = write_config(
        tmp_path,
        [api],
        {
            "group_wait": 0,
            "group_interval": 0,
            "receivers": [slack.receiver("slack", timeout=1), pd.receiver("pd")],
            "default_receivers": ["slack", "pd"],
        },
    )
    state = Path(api["params"]["path"])
    slack.script.extend([rate_limited(1), Answer(500, "rollup_error"), HANG])
    with DaemonProcess(config) as d:
        d.wait_for(lambda: status_of(d, "api").get("status") == "up", what="api up")
        flipped = time.time()
        set_state(state, "down", "connection refused")
        pd.wait_for(lambda: pd.accepted, what="trigger")
        decided = [r for r in log_events(d, "alert notification") if r["check"] == "api"]
        assert decided and decided[0]["notification_event"] == "firing"
        latency = pd.accepted[0].at - ts(decided[0])
        print(
            f"\nPagerDuty: flip->delivery {pd.accepted[0].at - flipped:.3f}s "
            f"(2 failures at 0.5s interval), decision->delivery {latency * 1000:.1f} ms"
        )
        slack.wait_for(lambda: slack.accepted, timeout=30, what="slack firing after faults")
        print(
            f"Slack (429 Retry-After 1, 500, 1s hang first): decision->delivery "
            f"{slack.accepted[0].at - ts(decided[0]):.3f}s"
        )
        d.wait_for(
            lambda: not json.loads((tmp_path / "data" / STATE_FILE).read_text())["queues"]["slack"],
            what="slack queue persisted empty",
        )
        d.kill()  # SIGKILL mid-incident: no shutdown code runs
    with DaemonProcess(config) as d:
        d.wait_for(
            lambda: len(status_of(d, "api").get("history", [])) >= 6,
            what="several runs after restart",
        )
        assert per_key(pd.events()) == {"alivemcp/api": ["trigger"]}  # not re-paged
        set_state(state, "up")
        pd.wait_for(lambda: len(pd.accepted) >= 2, what="resolve after restart")
        slack.wait_for(lambda: len(slack.accepted) >= 2, what="slack resolve")
        # The daemon has the answers too (the stand-ins count a request when they answer it).
        delivered = [
            f'alivemcp_notifications_total{{outcome="delivered",receiver="{r}"}} 1.0'
            for r in ("pd", "slack")
        ]
        metrics = d.wait_for(
            lambda: metrics_with(d, *delivered),
            what="the resolve's deliveries counted",
        )
        assert_rules_use_exported_metrics(metrics)
        assert 'alivemcp_notifications_total{outcome="delivered",receiver="pd"} 1.0' in metrics
        assert 'alivemcp_alerts_firing{severity="critical"} 0.0' in metrics
        assert d.stop() == 0
        logs = d.logs()
    assert per_key(pd.events()) == {"alivemcp/api": ["trigger", "resolve"]}
    texts = slack.texts()
    assert len(texts) == 2
    assert texts[0].startswith("FIRING [critical] api: down: connection refused")
    assert texts[1].startswith("RESOLVED [critical] api: recovered")
    assert [r.status for r in slack.requests] == [429, 500, 0, 200, 200]
    assert f":{slack.port}/" not in logs  # not even redacted request lines from httpx
    for secret in ("XXXXsecretXXXX", pd.routing_key):
        assert secret not in logs and secret not in (tmp_path / "data" / STATE_FILE).read_text()


def metrics_with(d: DaemonProcess, *lines: str) -> str:
    """The daemon's /metrics once it holds every one of ``lines`` ("" until then)."""
    text = d.get("/metrics")[1]
    return text if all(line in text for line in lines) else ""


def test_outage_across_a_kill_is_delivered_once(tmp_path: Path, pd: StandIn) -> None:
    """PagerDuty answers 500 while the incident starts; the daemon is killed with the trigger
    still queued; after restart (and PagerDuty's recovery) it is delivered exactly once."""
    db = file_check(tmp_path, "db")
    config = write_config(
        tmp_path,
        [db],
        {
            "group_wait": 0,
            "group_interval": 0,
            "receivers": [pd.receiver("pd")],
            "default_receivers": ["pd"],
        },
    )
    pd.script.extend([Answer(500, "{}")] * 10_000)
    with DaemonProcess(config) as d:
        d.wait_for(lambda: status_of(d, "db").get("status") == "up", what="db up")
        set_state(Path(db["params"]["path"]), "down", "disk full")
        pd.wait_for(lambda: len(pd.requests) >= 2, what="failed attempts")
        _, metrics = d.get("/metrics")
        assert 'alivemcp_notification_queue_depth{receiver="pd"} 1.0' in metrics
        d.kill()
    saved = json.loads((tmp_path / "data" / STATE_FILE).read_text())
    assert [n["check"] for n in saved["queues"]["pd"]] == ["db"]
    pd.script.clear()
    with DaemonProcess(config) as d:
        pd.wait_for(lambda: pd.accepted, what="queued trigger after restart")
        d.wait_for(lambda: len(status_of(d, "db").get("history", [])) >= 4, what="more runs")
        set_state(Path(db["params"]["path"]), "up")
        pd.wait_for(lambda: len(pd.accepted) >= 2, what="resolve")
        assert d.stop() == 0
    assert per_key(pd.events()) == {"alivemcp/db": ["trigger", "resolve"]}


def test_policy_scenarios_in_the_daemon(tmp_path: Path, hook: StandIn) -> None:
    """Thresholds, reminders with a cap, flapping, a maintenance window ending, dependency
    suppression and unknown -> probe-broken, all in one running daemon. The maintenance
    window arrives by a config reload (SIGHUP), as an operator would add one."""
    checks = [
        file_check(tmp_path, "reminded", alert={"repeat_interval": "1s", "max_reminders": 2}),
        file_check(
            tmp_path,
            "wobbly",
            alert={
                "failures_to_fire": 1,
                "successes_to_resolve": 1,
                "flap_threshold": 4,
                "flap_window": "60s",
            },
        ),
        file_check(tmp_path, "maint", labels={"team": "storage"}),
        file_check(tmp_path, "cluster"),
        file_check(tmp_path, "canary", depends_on=["cluster"]),
        file_check(tmp_path, "prober"),
    ]
    alerting: dict[str, Any] = {
        "group_wait": 0,
        "group_interval": 0,
        "receivers": [hook.receiver("hook")],
        "default_receivers": ["hook"],
    }
    config = write_config(tmp_path, checks, alerting)
    path = {c["name"]: Path(c["params"]["path"]) for c in checks}

    def events(name: str) -> list[tuple[str, str]]:
        return [(n["alert"], n["event"]) for n in hook.events() if n["check"] == name]

    with DaemonProcess(config) as d:
        d.wait_for(
            lambda: all(status_of(d, c["name"]).get("status") == "up" for c in checks),
            what="all up",
        )
        now = datetime.now(UTC)
        window_end = now + timedelta(seconds=8)
        alerting["maintenance"] = [
            {
                "name": "disk swap",
                "matchers": ["team=storage"],
                "start": (now - timedelta(minutes=1)).isoformat(),
                "end": window_end.isoformat(),
            }
        ]
        write_config(tmp_path, checks, alerting)
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: log_events(d, "config reloaded"), what="reload")
        for name in ("reminded", "maint", "canary", "cluster"):
            set_state(path[name], "down")
        maint_down_at = time.time()
        set_state(path["prober"], "unknown", "AccessDenied on our own role")
        for i in range(14):  # the flapping check changes state faster than anyone can act
            state = "down" if i % 2 == 0 else "up"
            set_state(path["wobbly"], state)
            d.wait_for(
                lambda state=state: status_of(d, "wobbly").get("status") == state,
                what=f"wobbly's run to see it {state} (change {i + 1})",
            )
        hook.wait_for(lambda: len(events("reminded")) >= 3, what="reminders")
        hook.wait_for(lambda: events("prober"), what="probe broken")
        # Maintenance: held while the window is open, the true state once it closes.
        assert maint_down_at < window_end.timestamp() - 3, "machine too slow for this window"
        hook.wait_for(lambda: events("maint"), timeout=30, what="maint after window")
        maint = next(n for n in hook.events() if n["check"] == "maint")
        assert datetime.fromisoformat(maint["at"].replace("Z", "+00:00")) >= window_end.replace(
            microsecond=0
        )
        # Dependency: the canary stays quiet while the cluster fires ...
        assert events("cluster") == [("target", "firing")]
        assert events("canary") == []
        # ... and pages once the cluster has recovered but it has not.
        set_state(path["cluster"], "up")
        hook.wait_for(lambda: events("canary"), what="canary after cluster recovery")
        # why: a negative check (past the reminder cap: no more reminders), anchored on the
        # last reminder: another would come a repeat_interval (1 s) after it; 2.5 s is past.
        last_reminder = max(
            r.at
            for r in hook.accepted
            if any(
                n["check"] == "reminded"
                for n in r.body.get("notifications") or r.body.get("alerts") or []
            )
        )
        time.sleep(max(0.0, last_reminder + 2.5 - time.time()))
        assert d.stop() == 0
    assert events("reminded") == [
        ("target", "firing"),
        ("target", "reminder"),
        ("target", "reminder"),
    ]
    assert events("maint") == [("target", "firing")]
    assert events("cluster") == [("target", "firing"), ("target", "resolved")]
    assert events("canary") == [("target", "firing")]
    assert events("prober") == [("probe_broken", "firing")]
    wobbly = events("wobbly")
    assert wobbly.count(("flapping", "firing")) == 1, wobbly
    assert len(wobbly) <= 6, wobbly  # ~14 state changes, a handful of notifications


def test_storm_of_500_checks_and_a_revoked_webhook(
    tmp_path: Path, slack: StandIn, pd: StandIn
) -> None:
    shared = tmp_path / "shared.state"
    set_state(shared, "up")
    checks = [
        {
            "name": "partition",
            "probe": "test_file",
            "interval": 1,
            "params": {"path": str(shared)},
            "targets": [{"name": f"{i:03d}"} for i in range(500)],
        }
    ]
    with StandIn("slack") as revoked:
        revoked.script.extend([Answer(404, "no_service")] * 100)
        config = write_config(
            tmp_path,
            checks,
            {
                "group_wait": 3,
                "receivers": [
                    slack.receiver("slack", min_interval=1),
                    pd.receiver("pd"),
                    revoked.receiver("revoked"),
                ],
                "default_receivers": ["slack", "pd"],
                "routes": [
                    {"matchers": ["check=partition/000"], "receivers": ["revoked", "slack", "pd"]}
                ],
            },
        )
        with DaemonProcess(config) as d:
            d.wait_for(
                lambda: status_of(d, "partition/499").get("status") == "up",
                timeout=60,
                what="all checks ran",
            )
            set_state(shared, "down", "broker unreachable")
            pd.wait_for(lambda: pd.accepted, timeout=60, what="storm page")

            def in_slack() -> int:
                return sum(
                    int(r.body["text"].split(" ", 1)[0])
                    if "alert notifications" in r.body["text"]
                    else 1
                    for r in slack.accepted
                )

            slack.wait_for(lambda: in_slack() >= 500, timeout=60, what="500 in slack")
            # Every queue empty (the storm's PagerDuty messages included): nothing more can
            # be sent, so the counts below are final.
            empty = [
                f'alivemcp_notification_queue_depth{{receiver="{r}"}} 0.0'
                for r in ("slack", "pd", "revoked")
            ]
            metrics = d.wait_for(
                lambda: metrics_with(d, *empty),
                timeout=60,
                what="every notification queue empty",
            )
            assert d.stop() == 0
        # A bounded number of messages, not 500.
        assert in_slack() == 500
        assert len(slack.accepted) <= 4, [r.body["text"] for r in slack.accepted]
        assert len(pd.accepted) <= 3, [e["payload"]["summary"][:80] for e in pd.events()]
        assert " checks firing: partition/" in pd.accepted[0].body["payload"]["summary"]
        # The revoked webhook: tried once, surfaced, not retried.
        assert [r.status for r in revoked.requests] == [404]
        assert 'alivemcp_notification_permanent_failures_total{receiver="revoked"} 1.0' in metrics
        assert 'alivemcp_alerts_firing{severity="critical"} 500.0' in metrics
