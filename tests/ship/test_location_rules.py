"""The cluster rules that depend on locations, evaluated by promtool on made-up series of a
deployment of three locations scraped as one job: AlivemcpLocationSilent takes the minimum
over the replicas that report a location (a replica cut off from Kafka calls every other
location silent, and never its own), and the shard rules count each location's replicas
against the shards on their own (three locations hold every shard three times)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import binary

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "alivemcp-rules.yaml"
#: Replica -> location: eu-west has two (r1 of them cut off from Kafka), us-east one that
#: holds only 50 of the 60 shards (a replica of it just left), ap-south none left.
REPLICAS = {"r0": "eu-west", "r1": "eu-west", "u0": "us-east"}
HELD = {"r0": 30, "r1": 30, "u0": 50}
#: What each replica reports silent (1) or not (0), by location.
SILENT = {
    "r0": {"us-east": 0, "ap-south": 1},
    "r1": {"us-east": 1, "ap-south": 1},  # cut off: every other location looks silent
    "u0": {"eu-west": 0, "ap-south": 1},
}


def _expr(alert: str) -> str:
    doc = yaml.safe_load(RULES.read_text())
    (rule,) = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert]
    return str(rule["expr"])


def _series(name: str, labels: dict[str, str], value: float) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in {"job": "alivemcp", **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": f"{value:g}x10"}


def _promtool(tests: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    series = [
        _series("alivemcp_cluster_location_info", {"instance": r, "location": loc}, 1)
        for r, loc in REPLICAS.items()
    ]
    series += [_series("alivemcp_cluster_shards", {"instance": r}, 60) for r in REPLICAS]
    series += [_series("alivemcp_cluster_shards_held", {"instance": r}, HELD[r]) for r in HELD]
    series += [
        _series("alivemcp_cluster_location_silent", {"instance": r, "location": loc}, value)
        for r, seen in SILENT.items()
        for loc, value in seen.items()
    ]
    spec = {
        "evaluation_interval": "30s",
        "tests": [{"interval": "30s", "input_series": series, "promql_expr_test": tests}],
    }
    path = tmp_path / "location-rules-test.yaml"
    path.write_text(yaml.safe_dump(spec))
    return subprocess.run(
        [binary("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_location_rules_judge_each_location_on_its_own(tmp_path: Path) -> None:
    tests = [
        # ap-south: silent as everyone sees it. us-east: only the cut-off r1 says so.
        {
            "expr": _expr("AlivemcpLocationSilent"),
            "eval_time": "2m",
            "exp_samples": [{"labels": "{location='ap-south'}", "value": 1}],
        },
        # us-east's replicas hold 50 of 60 shards; eu-west's all 60 (three locations would
        # hold 180 in all: more than exist, yet nothing is held twice).
        {
            "expr": _expr("AlivemcpClusterShardsUnprobed"),
            "eval_time": "2m",
            "exp_samples": [{"labels": "{job='alivemcp',location='us-east'}", "value": 10}],
        },
        {"expr": _expr("AlivemcpClusterShardsHeldTwice"), "eval_time": "2m", "exp_samples": []},
    ]
    proc = _promtool(tests, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_location_test_would_catch_a_sum_over_locations(tmp_path: Path) -> None:
    # Guard: the rules of before locations (a sum over the job) see 110 shards held of 60,
    # "held twice", where each location holds each shard at most once.
    naive = "sum by (job) (alivemcp_cluster_shards_held) > max by (job) (alivemcp_cluster_shards)"
    proc = _promtool([{"expr": naive, "eval_time": "2m", "exp_samples": []}], tmp_path)
    assert proc.returncode != 0, proc.stdout
    assert '{job="alivemcp"} 1.1E+02' in proc.stdout + proc.stderr, proc.stdout
