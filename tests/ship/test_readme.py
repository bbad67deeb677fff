"""The README's examples work: its config validates, and its third-party probe, installed as a
plugin through the ``alivemcp.probes`` entry point, runs through the real CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from alivemcp.config import load_config_text
from tests.support import free_port, serve_http, subprocess_env

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def block(tag: str) -> str:
    """The fenced code block right after ``<!-- readme-test: TAG -->``."""
    match = re.search(
        rf"<!-- readme-test: {re.escape(tag)} -->\n```\w+\n(.*?)\n```", README, re.DOTALL
    )
    assert match, f"README has no block tagged {tag}"
    return match.group(1)


def test_quickstart_is_exactly_the_two_make_commands() -> None:
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ")]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)


def test_readme_config_is_valid() -> None:
    env = {
        "MCP_TOKEN": "t0ken-value",
        "PAGERDUTY_ROUTING_KEY": "R0UTINGKEY0000000000000000000000",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/XXXX",
    }
    loaded = load_config_text(block("config"), source="README", env=env)
    assert {c.name for c in loaded.checks} == {
        "mcp/https://mcp.example.com/mcp",
        "mcp/https://search.example.com/mcp",
        "orders-replica",
    }


def test_readme_locations_example_is_valid() -> None:
    loaded = load_config_text(block("locations"), source="README", env={})
    cluster = loaded.config.cluster
    assert cluster is not None and cluster.location == "eu-west"
    (check,) = loaded.checks
    assert check.locations == ("eu-west", "us-east", "ap-south") and check.quorum == 2


def test_readme_mentions_every_builtin_probe_type() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from gen_reference import builtin_entry_points

    for name in builtin_entry_points():
        assert f"### `{name}`" in README, name
        assert f"| `{name}` |" in README, name


def test_kafka_verdict_table_names_tests_that_exist() -> None:
    """Every row of the Kafka verdict table names the test that guards it; a renamed or
    removed test leaves the table promising what nothing checks."""
    section = README.split("### What the Kafka probes tell apart", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 10, section
    named = 0
    for row in rows:
        guard = row.rstrip(" |").rsplit("|", 1)[1]
        for file, test in re.findall(r"`(test_\w+\.py)::(test_\w+)`", guard):
            source = (REPO / "tests" / "kafka" / file).read_text()
            assert re.search(rf"^(async )?def {test}\(", source, re.MULTILINE), (file, test)
            named += 1
        assert "`" in guard or guard.strip() == "same", row
    assert named >= 8


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/ok" else 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def health_server() -> Iterator[str]:
    with serve_http(_Health) as url:
        yield url


def test_readme_third_party_probe_runs_as_a_plugin(tmp_path: Path, health_server: str) -> None:
    # Install the README's module as a third-party package would be: the module plus a
    # dist-info whose entry_points.txt carries the README's entry point.
    package = tmp_path / "site" / "my_probes"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "health.py").write_text(block("probe") + "\n")
    toml = re.search(
        r'```toml\n(\[project\.entry-points\."alivemcp\.probes"\]\n.*?)\n```', README, re.DOTALL
    )
    assert toml
    dist = tmp_path / "site" / "my_probes-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-probes\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        toml.group(1)
        .replace('[project.entry-points."alivemcp.probes"]', "[alivemcp.probes]")
        .replace('"', "")
        + "\n"
    )
    config = tmp_path / "plugin.yaml"
    config.write_text(block("plugin-config") + "\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path / 'site'}:{env.get('PYTHONPATH', '')}"

    def check(url: str) -> tuple[int, dict[str, Any]]:
        env["HEALTH_URL"] = url
        proc = subprocess.run(
            [sys.executable, "-m", "alivemcp", "check", "--config", str(config), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=tmp_path,
        )
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        (line,) = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        return proc.returncode, json.loads(line)

    code, row = check(f"{health_server}/ok")
    assert (code, row["status"], row["probe"]) == (0, "up", "http_health")
    assert row["check"] == f"web/{health_server}/ok"
    assert "response_seconds" in row["observations"]
    code, row = check(f"{health_server}/broken")
    assert (code, row["status"], row["reason"]) == (1, "down", "HTTP 503")
    code, row = check(f"http://127.0.0.1:{free_port()}/nothing-listens")
    assert (code, row["status"]) == (1, "down")
    assert "cannot connect" in str(row["reason"])
    # `alivemcp probes` lists it with its params.
    listing = subprocess.run(
        [sys.executable, "-m", "alivemcp", "probes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert "http_health: GET a URL; 200 is up" in listing.stdout
    assert "degraded_after" in listing.stdout


def test_runbook_covers_every_alert_rule() -> None:
    import yaml

    rules = yaml.safe_load((REPO / "deploy/prometheus/alivemcp-rules.yaml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    runbook = (REPO / "docs" / "runbook.md").read_text()
    documented = set(re.findall(r"^### (\w+)$", runbook, re.MULTILINE))
    assert alerts == documented
