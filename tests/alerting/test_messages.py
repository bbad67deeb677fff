"""What receivers get: Slack Block Kit content, the Alertmanager v4 body, PagerDuty fields,
config validation errors that name the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from alivemcp.alerting.config import AlertingConfig
from alivemcp.config import ConfigError, load_config_text
from tests.support.alerting_engine import check, fast, running
from tests.support.alerting_receivers import StandIn

RUNBOOK = "https://runbooks.example/kafka"


async def test_message_contents(tmp_path: Path) -> None:
    with StandIn("slack") as slack, StandIn("pagerduty") as pd, StandIn("webhook") as am:
        doc = {
            **fast(),
            "external_url": "http://alivemcp.local:9464",
            "receivers": [
                slack.receiver("slack"),
                pd.receiver("pd"),
                am.receiver("am", format="alertmanager"),
            ],
            "default_receivers": ["slack", "pd", "am"],
        }
        labels = {"team": "data", "runbook_url": RUNBOOK}
        async with running(doc, [check("kafka/orders", labels=labels)], tmp_path) as h:
            h.feed(
                "kafka/orders",
                "down",
                "down",
                reason="x" * 5000,
                observations={"lag_seconds": 42.5, "isr": 1},
            )
            await h.delivered()
            h.feed("kafka/orders", "up", "up", reason="ok")
            await h.delivered()

    firing = slack.accepted[0].body
    text = json.dumps(firing["blocks"])
    assert firing["text"].startswith("FIRING [critical] kafka/orders: down: xxx")
    assert "lag_seconds = 42.5" in text and f"<{RUNBOOK}|Runbook>" in text
    assert "*Since*" in text and "http://alivemcp.local:9464/status" in text
    assert slack.texts()[1].startswith("RESOLVED [critical] kafka/orders: recovered")

    trigger, resolve = pd.events()
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] == "alivemcp/kafka/orders"
    payload = trigger["payload"]
    assert len(payload["summary"]) == 1024 and payload["severity"] == "critical"
    assert payload["component"] == "kafka/orders" and payload["source"] == "alivemcp"
    assert payload["custom_details"]["observations"] == {"isr": 1, "lag_seconds": 42.5}
    assert trigger["links"][0] == {"href": RUNBOOK, "text": "Runbook"}

    body = am.accepted[0].body
    assert set(body) == {
        "version",
        "groupKey",
        "truncatedAlerts",
        "status",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    }
    assert body["version"] == "4" and body["status"] == "firing"
    alert = body["alerts"][0]
    assert alert["labels"]["alertname"] == "CheckFailing"
    assert alert["labels"]["team"] == "data" and alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == RUNBOOK
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and len(alert["fingerprint"]) == 16
    resolved = am.accepted[1].body
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] != alert["endsAt"]
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]


def test_config_errors_name_the_problem() -> None:
    with pytest.raises(ValidationError, match="no receiver named 'pager'"):
        AlertingConfig.model_validate({"receivers": [], "default_receivers": ["pager"]})
    with pytest.raises(ValidationError, match="unique"):
        AlertingConfig.model_validate(
            {
                "receivers": [
                    {"name": "a", "type": "webhook", "url": "http://x"},
                    {"name": "a", "type": "webhook", "url": "http://y"},
                ]
            }
        )
    with pytest.raises(ValidationError, match="not a matcher"):
        AlertingConfig.model_validate({"routes": [{"matchers": ["team"], "receivers": ["a"]}]})
    with pytest.raises(ValidationError, match="either start and end, or recurring"):
        AlertingConfig.model_validate({"maintenance": [{"name": "m"}]})
    with pytest.raises(ValidationError, match="unknown time zone"):
        AlertingConfig.model_validate(
            {
                "maintenance": [
                    {
                        "name": "m",
                        "recurring": {
                            "start": "02:00",
                            "duration": "1h",
                            "timezone": "Mars/Olympus",
                        },
                    }
                ]
            }
        )
    yaml_text = """
checks:
  - name: c
    probe: test_noop
    alert: {failures_to_fire: 3, repeat_interval: 10m, failure_to_fire: 1}
alerting:
  policy: {repeat_interval: "5m"}
  receivers:
    - {name: s, type: slack, webhook_url: "https://hooks.slack.com/services/T/B/sekrit"}
"""
    with pytest.raises(ConfigError) as err:
        load_config_text(yaml_text, env={})
    assert any("failure_to_fire" in e and "did you mean" in e for e in err.value.errors)
    loaded = load_config_text(yaml_text.replace(", failure_to_fire: 1", ""), env={})
    override = loaded.checks[0].alert
    assert override is not None
    policy = override.apply_to(loaded.config.alerting.policy)
    assert policy.failures_to_fire == 3 and policy.repeat_interval == 600
    assert "sekrit" not in repr(loaded.config.alerting)


async def test_log_receiver_and_the_demo_alerting_section(tmp_path: Path) -> None:
    import structlog
    import yaml

    from tests.support import REPO

    demo = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    section = AlertingConfig.model_validate(demo["alerting"])
    assert [r.type for r in section.receivers] == ["log", "log"]
    doc = {**demo["alerting"], "group_wait": 0, "group_interval": 0}
    with structlog.testing.capture_logs() as logs:
        async with running(doc, [check("demo")], tmp_path) as h:
            h.feed("demo", "down", "down", reason="connection refused")
            await h.delivered()
    alerts = [e for e in logs if e["event"] == "alert"]
    assert len(alerts) == 1 and alerts[0]["log_level"] == "warning"
    assert alerts[0]["title"] == "FIRING [critical] demo: down"
    assert alerts[0]["reason"] == "connection refused"


def test_routes_first_match_wins_unless_continue() -> None:
    from alivemcp.alerting.routing import Router

    hook = {"type": "webhook", "url": "http://127.0.0.1:9/x"}
    config = AlertingConfig.model_validate(
        {
            "receivers": [{**hook, "name": n} for n in ("all", "data", "prod", "default")],
            "default_receivers": ["default"],
            "routes": [
                {"matchers": ["env=prod"], "receivers": ["prod"], "continue": True},
                {"matchers": ["team=data", "check!~test-.*"], "receivers": ["data"]},
                {"matchers": ["team=~.+"], "receivers": ["all"]},
            ],
        }
    )
    router = Router(config)
    assert router.receivers_for({"env": "prod", "team": "data", "check": "k"}) == ("prod", "data")
    assert router.receivers_for({"team": "data", "check": "test-1"}) == ("all",)
    assert router.receivers_for({"env": "dev"}) == ("default",)
    assert router.owners == ("default",)


def test_routes_remembered_per_combination_of_the_labels_they_read() -> None:
    """A router answers each check of a load; the answers it remembers are keyed by the labels
    its matchers read, so two checks differing only elsewhere share one, and none is reused
    across a label the routes do read (the check's name included)."""
    import random

    from alivemcp.alerting.routing import Router

    hook = {"type": "webhook", "url": "http://127.0.0.1:9/x"}
    config = AlertingConfig.model_validate(
        {
            "receivers": [{**hook, "name": n} for n in ("a", "b", "c", "default")],
            "default_receivers": ["default"],
            "routes": [
                {"matchers": ["check=~web-.*"], "receivers": ["a"], "continue": True},
                {"matchers": ["team!=", "env!=dev"], "receivers": ["b"]},
                {"matchers": ["region=~eu-.*"], "receivers": ["c"]},
            ],
        }
    )
    rng = random.Random(5)
    remembering, fresh = Router(config), Router(config)
    for i in range(2000):
        labels = {"check": rng.choice(["web-1", "api", f"web-{i}", "x"])}
        for key, values in (
            ("team", ["", "data", None]),
            ("env", ["dev", "prod", None]),
            ("region", ["eu-west", "us", None]),
            ("other", [str(i), None]),
        ):
            value = rng.choice(values)
            if value is not None:
                labels[key] = value
        assert remembering.receivers_for(labels) == fresh._match(labels), labels
