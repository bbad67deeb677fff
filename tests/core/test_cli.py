"""The CLI as a user meets it: exit codes, JSON lines, validation messages, schema."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import check_json, cli


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_validate_rejects_a_typo_with_path_and_suggestion(tmp_path: Path) -> None:
    bad = write(
        tmp_path / "bad.yaml",
        "checks:\n  - name: a\n    probe: test_static\n    params: {staus: up}\n",
    )
    proc = cli("validate", str(bad))
    assert proc.returncode == 2
    assert "checks[0].params.staus: unknown field; did you mean 'status'?" in proc.stderr
    good = write(tmp_path / "good.yaml", "checks: [{name: a, probe: test_static}]\n")
    proc = cli("validate", str(good))
    assert proc.returncode == 0
    assert "ok (1 checks: 1 test_static)" in proc.stdout


def test_check_json_runs_a_plugin_probe_and_sets_the_exit_code(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml",
        """
checks:
  - {name: fine, probe: test_static, params: {observations: {x_seconds: 2}}}
  - {name: slow, probe: test_hang, timeout: 0.2, interval: 1}
  - {name: many, probe: test_static, targets: [r1, r2]}
""",
    )
    code, rows = check_json(config)
    assert code == 1
    assert set(rows) == {"fine", "slow", "many/r1", "many/r2"}
    fine = rows["fine"]
    assert fine["status"] == "up" and fine["probe"] == "test_static"
    assert fine["observations"] == {"x_seconds": 2.0}
    assert isinstance(fine["duration_seconds"], float) and fine["reason"] == "ok"
    assert rows["slow"]["status"] == "down" and rows["slow"]["reason"] == "timeout after 0.2s"
    assert rows["many/r2"]["reason"] == "r2"
    code, rows = check_json(config, "fine", "many")
    assert code == 0 and set(rows) == {"fine", "many/r1", "many/r2"}


def test_check_with_unknown_only_name_is_a_usage_error(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "checks: [{name: fine, probe: test_static}]\n")
    proc = cli("check", "--config", str(config), "--only", "fien")
    assert proc.returncode == 2
    assert "no check named 'fien'; did you mean 'fine'?" in proc.stderr


def test_probes_lists_every_builtin_and_prints_a_schema() -> None:
    proc = cli("probes")
    assert proc.returncode == 0
    for name in (
        "mcp_endpoint",
        "kafka_canary",
        "kafka_consumer_lag",
        "kafka_partition_health",
        "s3_replication_lag",
        "s3_event_delivery",
        "s3_object_lambda",
        "s3_access_point",
        "firehose_freshness",
        "test_static",
    ):
        assert f"\n{name}: " in "\n" + proc.stdout, name
    assert "FAILED TO LOAD" not in proc.stdout.replace("test_broken: FAILED TO LOAD", "")
    schema = json.loads(cli("probes", "--schema").stdout)
    check = schema["$defs"]["CheckSpec"]
    assert "mcp_endpoint" in check["properties"]["probe"]["enum"]
    assert any(b["if"]["properties"]["probe"]["const"] == "test_file" for b in check["allOf"])


def test_help_and_missing_command() -> None:
    assert cli("--help").returncode == 0
    assert cli().returncode == 2
    proc = cli("run", "--config", "/nonexistent.yaml")
    assert proc.returncode == 2 and "cannot read" in proc.stderr


def test_validate_describes_cluster_mode_and_refuses_bad_cluster_settings(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    targets = ", ".join(f"http://127.0.0.1:1/{i}" for i in range(120))
    config.write_text(
        "cluster:\n"
        "  kafka: {bootstrap_servers: '127.0.0.1:9092'}\n"
        "  replica_id: prober-2\n"
        "  shards: 12\n"
        "checks:\n"
        f"  - {{name: mcp, probe: mcp_endpoint, targets: [{targets}]}}\n"
    )
    proc = cli("validate", str(config))
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.splitlines()[-1]
    assert line.startswith("cluster mode: replica 'prober-2' in group 'alivemcp', 12 shards")
    low, high = (int(n) for n in line.split("checks per shard: ")[1].split(")")[0].split(" to "))
    assert 0 < low <= 10 <= high < 20  # 120 checks over 12 shards: murmur2 spreads them

    config.write_text(
        "cluster:\n"
        "  kafka: {bootstrap_servers: '127.0.0.1:9092'}\n"
        "  session_timeout: 3s\n"
        "  heartbeat_interval: 2s\n"
        "  topics: {results: same, status_changes: same}\n"
    )
    proc = cli("validate", str(config))
    assert proc.returncode != 0
    assert "cluster.session_timeout" in proc.stderr
    assert "cluster.topics" in proc.stderr and "three topics" in proc.stderr
