"""The Grafana dashboard and the Prometheus config query only what alivemcp exports, and every
query works in a real Prometheus scraping a real daemon.

"Exports" = the families on the real daemon's /metrics plus ``alivemcp_probe_<name>`` for
every observation name in the probes' source. The Prometheus part runs Debian's
``prometheus`` against a daemon whose test checks emit every one of those observation names,
so each panel must come back with data, and the alert rules must evaluate without error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import DaemonProcess
from tests.support.cluster import cluster_metric_names
from tests.support.metric_names import (
    observation_metric_names,
    promql_metric_names,
    sample_names_from_exposition,
    unknown_names,
)
from tests.support.prometheus import Prometheus
from tests.support.prometheus import binary as prometheus_binary

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import gen_dashboard  # noqa: E402
from gen_reference import probe_observations  # noqa: E402

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "alivemcp-rules.yaml"
# Prometheus's own per-target series, which the rules may use.
PROMETHEUS_BUILTINS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """The real daemon: checks in every state, every observation name a probe can emit, and
    one receiver that cannot be reached (so alert delivery has something to show)."""
    tmp = tmp_path_factory.mktemp("dashboard")
    observations = {name: 1.5 for names in probe_observations().values() for name in names}
    config = tmp / "dashboard.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp / "data"),
                "defaults": {"interval": 1, "labels": {"team": "ship"}},
                "checks": [
                    {
                        "name": "everything",
                        "probe": "test_static",
                        "params": {"observations": observations},
                    },
                    {
                        "name": "broken-endpoint",
                        "probe": "test_static",
                        "params": {"status": "down", "reason": "connect refused"},
                    },
                    {
                        "name": "slow-endpoint",
                        "probe": "test_static",
                        "params": {"status": "degraded", "reason": "slow"},
                    },
                    {
                        "name": "no-credentials",
                        "probe": "test_static",
                        "params": {"status": "unknown", "reason": "AccessDenied"},
                    },
                ],
                "alerting": {
                    "receivers": [
                        {"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}
                    ],
                    "default_receivers": ["hook"],
                    "policy": {"failures_to_fire": 1},
                    "group_wait": 0,
                },
            }
        )
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.get("/readyz")[0] == 200, what="readyz")
        yield d


@pytest.fixture(scope="module")
def exported(daemon: DaemonProcess) -> set[str]:
    daemon.wait_for(
        lambda: "alivemcp_probe_replication_lag_seconds{" in daemon.get("/metrics")[1],
        what="observations in /metrics",
    )
    # A cluster replica's families too: the cluster rules query them.
    return (
        sample_names_from_exposition(daemon.get("/metrics")[1])
        | observation_metric_names()
        | cluster_metric_names()
    )


def test_dashboard_is_up_to_date_and_well_formed() -> None:
    path = REPO / "deploy" / "grafana" / "alivemcp-dashboard.json"
    assert path.read_text() == gen_dashboard.render(), (
        "deploy/grafana/alivemcp-dashboard.json is out of date: run "
        ".venv/bin/python scripts/gen_dashboard.py"
    )
    board = json.loads(path.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "probe", "check"}
    # What the issue asks the dashboard to show.
    titles = " ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("not up", "latency", "lag", "replication", "freshness", "notification"):
        assert topic in titles, topic


def test_dashboard_queries_only_metrics_alivemcp_exports(exported: set[str]) -> None:
    queries = gen_dashboard.all_queries()
    assert unknown_names(queries, exported) == {}
    used = set().union(*(promql_metric_names(q) for q in queries))
    # The overview families and one observation per probe type family are really on it.
    assert {
        "alivemcp_check_status",
        "alivemcp_probe_replication_lag_seconds",
        "alivemcp_probe_group_max_time_lag_seconds",
        "alivemcp_probe_data_freshness_seconds",
        "alivemcp_notification_queue_depth",
    } <= used


def test_alert_rules_query_only_metrics_alivemcp_exports(exported: set[str]) -> None:
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert unknown_names(exprs, exported | PROMETHEUS_BUILTINS) == {}


def test_name_extraction_is_not_fooled() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, check) (rate(alivemcp_x_bucket{a="b c",'
        'check=~"$check"}[$__rate_interval]))) > 5 unless on (check) alivemcp_y offset 5m'
    )
    assert promql_metric_names(expr) == {"alivemcp_x_bucket", "alivemcp_y"}
    assert unknown_names(["nonexistent_metric"], {"up"}) == {
        "nonexistent_metric": {"nonexistent_metric"}
    }


# -- a real Prometheus -----------------------------------------------------------------------


def _substitute(expr: str) -> str:
    return expr.replace("$__rate_interval", "30s").replace("$probe", ".*").replace("$check", ".*")


def test_example_prometheus_config_is_valid() -> None:
    proc = subprocess.run(
        [prometheus_binary("promtool"), "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_query_returns_data_in_a_real_prometheus(
    daemon: DaemonProcess, exported: set[str], tmp_path: Path
) -> None:
    # The example config, pointed at the test daemon, scraping and evaluating every second.
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    job = config["scrape_configs"][0]
    job.update(
        scrape_interval="1s",
        scrape_timeout="1s",
        static_configs=[{"targets": [f"127.0.0.1:{daemon.port}"]}],
    )
    config["rule_files"] = [str(RULES)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    prom = Prometheus(tmp_path, path)
    try:
        prom.wait_for("readiness", lambda: prom.api("/api/v1/status/buildinfo"))

        def scrapes() -> float:
            result = prom.api("/api/v1/query", query='sum_over_time(up{job="alivemcp"}[1m])')
            return (
                float(result["data"]["result"][0]["value"][1]) if result["data"]["result"] else 0.0
            )

        # rate() needs a few samples in its window.
        prom.wait_for("five successful scrapes", lambda: scrapes() >= 5)

        empty = {}
        for expr in gen_dashboard.all_queries():
            query = _substitute(expr)
            answer = prom.api("/api/v1/query", query=query)
            assert answer["status"] == "success", (expr, answer)
            if not answer["data"]["result"]:
                empty[expr] = answer
        assert empty == {}, "dashboard queries with no data against the daemon"

        # The alert rules load and evaluate without errors; the test daemon's down check fires.
        def rules_evaluated() -> list[dict[str, Any]]:
            groups = prom.api("/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return (
                rules
                if rules
                and all(
                    r.get("lastEvaluation", "").startswith("20")
                    and not r["lastEvaluation"].startswith("0001")
                    for r in rules
                )
                else []
            )

        rules = prom.wait_for("rule evaluation", rules_evaluated)
        unhealthy = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
        assert unhealthy == {}
        expected = yaml.safe_load(RULES.read_text())
        assert len(rules) == sum(len(g["rules"]) for g in expected["groups"])
        prom.wait_for(
            "AlivemcpCheckDown pending",
            lambda: any(
                a["labels"].get("check") == "broken-endpoint"
                for a in prom.api("/api/v1/alerts")["data"]["alerts"]
                if a["labels"]["alertname"] == "AlivemcpCheckDown"
            ),
        )
    finally:
        prom.stop()
