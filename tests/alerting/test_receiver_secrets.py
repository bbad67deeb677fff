"""Receiver secrets stay secret when an error body quotes only part of them.

Real receivers echo what they did not like: Slack's 404 may quote the webhook path, a webhook
gateway the token in its path or query, a 401 the bare bearer token. The whole URL or header
value is registered for redaction by the config; these tests make the receivers quote only
pieces, and look for the pieces everywhere the daemon writes: its log, the state file,
/status, /metrics, and `alivemcp alert-test`'s output.
"""

from __future__ import annotations

import json
from pathlib import Path

from alivemcp.alerting.secrets import looks_secret, secret_parts_of_url
from alivemcp.alerting.state import STATE_FILE
from tests.support import DaemonProcess, cli
from tests.support.alerting_daemon import file_check, log_events, write_config
from tests.support.alerting_receivers import Answer, StandIn

SLACK_TOKEN = "XXXXsecretXXXX"  # the stand-in's webhook path: /services/T000/B000/<this>
PATH_TOKEN = "s3cr3t-path-token"  # the webhook stand-in's path: /hook/<this>
QUERY_SIG = "Qx9zSIGVALUE7"
BEARER = "tok-ABCDEF123456"
API_KEY = "K3y-ZYXWVU98765"


def test_pieces_that_carry_a_secret_and_words_that_do_not() -> None:
    parts = secret_parts_of_url(
        "https://hooks.slack.com/services/T0ABCDEFG/B0HIJKLMN/aBcDeFgHiJkLmNoPqRsTuVwX"
    )
    assert "aBcDeFgHiJkLmNoPqRsTuVwX" in parts
    assert "/services/T0ABCDEFG/B0HIJKLMN/aBcDeFgHiJkLmNoPqRsTuVwX" in parts
    assert "services" not in parts
    parts = secret_parts_of_url("https://u:pa55word@gw.example/hooks/alerts?token=abcd&x=json")
    assert {"pa55word", "abcd"} <= set(parts)
    assert not {"hooks", "alerts", "json", "x", "u"} & set(parts)
    # A plain endpoint carries nothing secret: nothing to register, no word blanked out.
    assert secret_parts_of_url("https://events.pagerduty.com/v2/enqueue") == []
    assert not looks_secret("services") and not looks_secret("alert-hook")
    assert looks_secret("s3cr3t-path-token") and looks_secret("mysupersecretpassword")


def test_error_bodies_quoting_parts_of_secrets_are_redacted_everywhere(tmp_path: Path) -> None:
    with StandIn("slack") as slack, StandIn("webhook") as hook, StandIn("pagerduty") as pd:
        hook_url = f"http://127.0.0.1:{hook.port}/hook/{PATH_TOKEN}?sig={QUERY_SIG}&format=json"
        slack.script.extend(
            [
                Answer(500, f"rollup_error for T000/B000/{SLACK_TOKEN}"),
                Answer(404, f"no_service: B000/{SLACK_TOKEN} is not a webhook"),
            ]
        )
        hook.script.extend(
            [
                Answer(500, f"bad signature {QUERY_SIG} for hook {PATH_TOKEN}"),
                Answer(404, f"unknown hook /hook/{PATH_TOKEN}: token {BEARER}, key {API_KEY}"),
            ]
        )
        pd.script.append(
            Answer(
                400,
                json.dumps(
                    {"status": "invalid event", "errors": [f"Invalid routing key {pd.routing_key}"]}
                ),
            )
        )
        api = file_check(tmp_path, "api", "down")
        config = write_config(
            tmp_path,
            [api],
            {
                "group_wait": 0,
                "group_interval": 0,
                # A generous timeout: on a busy machine a 1 s timeout could turn the scripted
                # answers into timeouts and retries.
                "receivers": [
                    slack.receiver("slack", timeout=10),
                    pd.receiver("pd", timeout=10),
                    hook.receiver(
                        "hook",
                        url=hook_url,
                        timeout=10,
                        headers={"Authorization": f"Bearer {BEARER}", "X-Api-Key": API_KEY},
                    ),
                ],
                "default_receivers": ["slack", "hook", "pd"],
            },
        )
        secrets = [SLACK_TOKEN, PATH_TOKEN, QUERY_SIG, BEARER, API_KEY, pd.routing_key]
        with DaemonProcess(config) as d:
            for server in (slack, hook):
                server.wait_for(
                    lambda s=server: [r.status for r in s.requests] == [500, 404],
                    what="a retried 500, then a 404",
                )
            pd.wait_for(lambda: pd.requests, what="the rejected trigger")
            d.wait_for(
                lambda: (
                    len(
                        log_events(
                            d,
                            "receiver rejected notifications permanently; "
                            "not retrying them - fix the receiver's "
                            "configuration",
                        )
                    )
                    == 3
                ),
                what="3 rejections",
            )
            d.wait_for(lambda: d.status_of("api").get("status") == "down", what="api down")
            _, status = d.get("/status")
            _, metrics = d.get("/metrics")
            assert json.loads(status)["alerts"][0]["check"] == "api"
            assert d.stop() == 0
            logs = d.logs()
            rejected = {
                e["receiver"]: e["error"]
                for e in log_events(
                    d,
                    "receiver rejected notifications permanently; not retrying them - fix the "
                    "receiver's configuration",
                )
            }
            retried = {
                e["receiver"]: e["error"]
                for e in log_events(d, "notification delivery failed; will retry")
            }
        # The bodies did reach the log (so the checks below test something), redacted.
        assert rejected["slack"] == "HTTP 404 no_service: B000/[REDACTED] is not a webhook"
        assert rejected["hook"] == (
            "HTTP 404 unknown hook /hook/[REDACTED]: token [REDACTED], key [REDACTED]"
        )
        assert "Invalid routing key [REDACTED]" in rejected["pd"]
        assert retried["hook"] == "HTTP 500 bad signature [REDACTED] for hook [REDACTED]"
        assert retried["slack"] == "HTTP 500 rollup_error for T000/B000/[REDACTED]"
        state = (tmp_path / "data" / STATE_FILE).read_text()
        for secret in secrets:
            for where, text in (
                ("log", logs),
                ("state file", state),
                ("/status", status),
                ("/metrics", metrics),
            ):
                assert secret not in text, f"{secret} leaked into {where}"

        # `alivemcp alert-test` prints the receiver's answer: redacted the same way.
        hook.script.append(Answer(404, f"no such hook {PATH_TOKEN} (sig {QUERY_SIG})"))
        proc = cli("alert-test", "--config", str(config), "--receiver", "hook", timeout=60)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "no such hook [REDACTED] (sig [REDACTED])" in out, out
        assert not [s for s in secrets if s in out]
