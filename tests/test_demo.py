"""`make demo` end to end: the embedded stack comes up and every demo check gets its verdict."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import yaml

from tests.support import ALIVEMCP, REPO, free_port, subprocess_env

#: Demo checks that are meant to fail: they show what a caught failure looks like.
EXPECTED_NOT_UP = {"s3-object-lambda-pii-leaky": "down"}


def demo_checks() -> list[dict]:
    return list(yaml.safe_load((REPO / "config" / "demo.yaml").read_text())["checks"])


def demo_check_names() -> set[str]:
    return {c["name"] for c in demo_checks()}


def test_the_demo_shows_every_built_in_probe_type() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    built_in = set(pyproject["project"]["entry-points"]["alivemcp.probes"])
    assert built_in - {c["probe"] for c in demo_checks()} == set()


def test_demo_runs_every_check_against_the_local_stack(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "demo.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*ALIVEMCP, "demo", "--listen", f"127.0.0.1:{port}", "--duration", "400"],
            stdout=log, stderr=subprocess.STDOUT, env=subprocess_env(), cwd=REPO,
        )
    try:
        names = demo_check_names()
        deadline = time.monotonic() + 240
        rows: dict[str, dict] = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
                    rows = {row["check"]: row for row in json.load(r)["checks"]}
            except OSError:
                time.sleep(1)
                continue
            settled = all(
                rows.get(n, {}).get("status") == EXPECTED_NOT_UP.get(n, "up") for n in names
            )
            if settled:
                break
            time.sleep(1)
        summary = {n: (rows.get(n, {}).get("status"), rows.get(n, {}).get("reason")) for n in names}
        for name in names:
            assert rows.get(name, {}).get("status") == EXPECTED_NOT_UP.get(name, "up"), summary
        # Up for the reasons the demo parts set up, not by accident.
        assert "consumer markers in" in rows["kinesis-tool-stream"]["reason"], summary
        assert rows["kinesis-tool-stream"]["observations"]["open_shards"] == 2
        assert "RUNNING on 3 KPUs" in rows["flink-tool-analytics"]["reason"], summary
        assert rows["flink-tool-analytics"]["observations"]["input_records"] > 0
        dr_members = rows["dr-ready"]["details"]["members"]
        assert [(m["check"], m["status"]) for m in dr_members] == [
            ("mcp-sdk", "up"), ("s3-replication-lag", "up")], dr_members
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for name in names:
            assert f'alivemcp_check_up{{check="{name}"' in metrics, name
        # Every probe type's series together, as Prometheus' own linter sees them: names,
        # units, types and help text (a bad name here fails CI, not a user's dashboard).
        lint = subprocess.run(["promtool", "check", "metrics"], input=metrics,
                              capture_output=True, text=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert "process_resident_memory_bytes" in metrics
        assert "python_gc_collections_total" in metrics
        assert "Probe observation" not in metrics  # every observation has real help text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log_path.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log_path.read_text()
