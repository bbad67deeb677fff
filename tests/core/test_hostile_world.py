"""The hostile-world guarantees of the engine, on the real daemon process and the real CLI:
target strings cannot break /metrics or /status, secrets in params never leave, and configs
that validate are configs that run (finite durations, no alias bombs, clear errors for bytes
that are not UTF-8), on start and on reload."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import DaemonProcess, check_json, cli, serve_http, write_daemon_config

KEY = "k3y-from-the-environment-0042"
QUERY_KEY = "qk-in-the-target-url-9931"


# -- target strings --------------------------------------------------------------------------


class _McpAnswers(BaseHTTPRequestHandler):
    """A minimal stateless MCP server whose serverInfo.name is the JSON string "\\udc80"."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in body:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        result: dict[str, Any]
        if body["method"] == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "\udc80", "version": "1\u0000"},
            }
        else:
            result = {"tools": [{"name": "echo\udc80", "inputSchema": {"type": "object"}}]}
        # json.dumps escapes the lone surrogate: valid JSON text on the wire.
        payload = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_DELETE(self) -> None:
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class _EchoAnswers(BaseHTTPRequestHandler):
    """Answers every request with a 500 whose body quotes the path and every header."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        echo = f"no such route {self.path}; you sent " + "; ".join(
            f"{k}: {v}" for k, v in self.headers.items()
        )
        payload = echo.encode()
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def surrogate_server() -> Iterator[str]:
    with serve_http(_McpAnswers) as url:
        yield url


@pytest.fixture
def echo_server() -> Iterator[str]:
    with serve_http(_EchoAnswers) as url:
        yield url


def _scrape_ok(d: DaemonProcess) -> str:
    status, text = d.get("/metrics")
    assert status == 200, text[:500]
    families = {f.name for f in text_string_to_metric_families(text)}  # parses, or raises
    assert "alivemcp_check_up" in families
    return text


def test_target_strings_cannot_break_metrics_status_or_logs(
    tmp_path: Path, surrogate_server: str
) -> None:
    deep: Any = "bottom"
    for _ in range(60):
        deep = {"d": deep}
    details = {
        "\udc80key": "x" * 300_000,
        "deep": deep,
        "many": list(range(5000)),
        "nan": "NaN",
        "ctl": "\u001b[31mred\u0000",
    }
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            {
                "name": "mcp",
                "probe": "mcp_endpoint",
                "interval": 1,
                "timeout": 0.9,
                "params": {"url": surrogate_server + "/mcp"},
            },
            {
                "name": "hostile",
                "probe": "test_hostile",
                "interval": 0.5,
                "params": {
                    "reason_json": json.dumps("bad \udc80 \u0000\u001b[2J" + "y" * 5000),
                    "label_json": json.dumps('\udc80\n"' + "z" * 1000),
                    "details_json": json.dumps(details),
                },
            },
        ],
    )
    with DaemonProcess(config) as d:
        d.wait_for(
            lambda: d.status_of("mcp").get("history") and d.status_of("hostile").get("history"),
            what="both checks ran",
        )
        # Invalid Unicode from the server is the server's fault: a verdict about the target.
        mcp = d.status_of("mcp")
        assert mcp["status"] == "down" and "surrogate" in mcp["reason"], mcp
        text = _scrape_ok(d)
        assert 'server_name="\ufffd\ufffd\\"zzz' in text  # made safe, escaped, capped
        assert "z" * 300 not in text
        status, body = d.get("/status")
        assert status == 200
        row = {r["check"]: r for r in json.loads(body)["checks"]}["hostile"]
        assert row["status"] == "down"
        assert len(row["reason"]) <= 1000 and "\u0000" not in row["reason"]
        assert len(body) < 2_000_000
        # Several runs later the daemon is still healthy and scrapes still work.
        seen = {name: len(d.status_of(name)["history"]) for name in ("mcp", "hostile")}
        d.wait_for(
            lambda: all(
                len(d.status_of(name)["history"]) >= min(seen[name] + 2, 20) for name in seen
            ),
            what=f"two more runs of each check (after {seen})",
        )
        assert d.get("/healthz")[0] == 200
        _scrape_ok(d)
        assert d.stop() == 0
    assert "Traceback" not in d.logs()


# -- secrets in params -----------------------------------------------------------------------


def test_secrets_in_params_and_target_urls_never_leave(tmp_path: Path, echo_server: str) -> None:
    data = tmp_path / "data"
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            {
                "name": "echo",
                "probe": "mcp_endpoint",
                "interval": 1,
                "timeout": 0.9,
                "params": {"headers": {"X-Api-Key": "${MCP_HEADER_VALUE}"}},
                "targets": [f"{echo_server}/mcp?api_key={QUERY_KEY}&v=2"],
            }
        ],
        alerting={"receivers": [{"name": "log", "type": "log"}], "policy": {"failures_to_fire": 1}},
    )
    env = {"MCP_HEADER_VALUE": KEY}
    with DaemonProcess(config, env=env) as d:
        d.wait_for(
            lambda: (d.get_json("/status")["checks"] or [{}])[0].get("status") == "down",
            what="echo check down",
            timeout=60,
        )
        d.wait_for(lambda: d.get_json("/status")["alerts"], what="alert fired")
        status = d.get("/status")[1]
        metrics = d.get("/metrics")[1]
        assert d.stop() == 0
    name = json.loads(status)["checks"][0]["check"]
    assert name == f"echo/{echo_server}/mcp?api_key=[REDACTED]&v=[REDACTED]"
    _, results = check_json(config, env=env)
    state = "".join(p.read_text() for p in data.glob("*.json"))
    assert state, "the alert state file was written"
    for where, text in {
        "status": status,
        "metrics": metrics,
        "logs": d.logs(),
        "check --json": json.dumps(results),
        "state file": state,
    }.items():
        assert KEY not in text, where
        assert QUERY_KEY not in text, where
    # The target was really sent the secrets (so the test proves redaction, not absence).
    assert "HTTP 500" in json.loads(status)["checks"][0]["reason"] or "500" in status


# -- configs that validate are configs that run ---------------------------------------------

ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)

BAD_CONFIGS: dict[str, tuple[bytes, str]] = {
    "infinite interval": (
        b"checks: [{name: a, probe: test_static, interval: .inf}]\n",
        "checks[0].interval: inf is not a finite duration",
    ),
    "huge interval": (
        b"checks: [{name: a, probe: test_static, interval: 100000000d}]\n",
        "checks[0].interval: '100000000d' is longer than",
    ),
    "nan timeout": (
        b"checks: [{name: a, probe: test_static, timeout: .nan}]\n",
        "checks[0].timeout: nan is not a finite duration",
    ),
    "huge grace": (
        b"scheduler: {shutdown_grace: 1.0e+300}\n",
        "scheduler.shutdown_grace: 1e+300 is longer than",
    ),
    "tiny interval": (
        b"checks: [{name: a, probe: test_static, interval: 1ms}]\n",
        "checks[0].interval: 0.001s is shorter than",
    ),
    "zero per-type limit": (
        b"scheduler: {per_probe_type: {test_static: 0}}\n",
        "scheduler.per_probe_type.test_static: Input should be greater",
    ),
    "unknown per-type name": (
        b"scheduler: {per_probe_type: {test_statik: 2}}\n",
        "did you mean 'test_static'?",
    ),
    "not UTF-8": (
        b"checks:\n  - name: caf\xe9\n    probe: test_static\n",
        "not UTF-8 text: byte 0xe9 at offset 21 (line 2)",
    ),
    "alias bomb": (ALIAS_BOMB.encode(), "refused as an alias bomb"),
    "recursive alias": (b"a: &a [*a]\n", "recursive alias"),
    "YAML syntax": (b"checks: [{name: a\n", "c.yaml:2:1"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_validate_refuses_with_one_clear_line(tmp_path: Path, case: str) -> None:
    data, expected = BAD_CONFIGS[case]
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    proc = cli("validate", str(path), timeout=60)
    assert time.monotonic() - started < 20
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_targets_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "targets.txt").write_bytes(b"ok\n\xff\xfe\n")
    path = write_daemon_config(
        tmp_path / "c.yaml", [{"name": "a", "probe": "test_static", "targets_file": "targets.txt"}]
    )
    proc = cli("validate", str(path))
    assert proc.returncode == 2 and "checks[0].targets_file" in proc.stderr, proc.stderr
    assert "not UTF-8 text: byte 0xff" in proc.stderr and "Traceback" not in proc.stderr


def test_reload_onto_bad_configs_is_refused_and_the_old_config_runs_on(tmp_path: Path) -> None:
    good = write_daemon_config(
        tmp_path / "c.yaml", [{"name": "a", "probe": "test_static", "interval": 0.3}]
    )
    good_text = good.read_bytes()
    with DaemonProcess(good) as d:
        d.wait_for(lambda: d.status_of("a").get("status") == "up", what="a up")
        for case in (
            "infinite interval",
            "huge interval",
            "zero per-type limit",
            "not UTF-8",
            "alias bomb",
        ):
            good.write_bytes(BAD_CONFIGS[case][0])
            failures = _reload_failures(d)
            d.signal(signal.SIGHUP)
            d.wait_for(lambda f=failures: _reload_failures(d) > f, what=f"{case}: refused")
            assert "alivemcp_config_last_reload_successful 0.0" in d.get("/metrics")[1], case
            # The old check keeps running on its grid.
            runs = d.status_of("a")["history"][-1][0]
            d.wait_for(lambda r=runs: d.status_of("a")["history"][-1][0] > r, what="a runs on")
            assert d.get("/healthz")[0] == 200
        good.write_bytes(good_text)
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: "alivemcp_config_last_reload_successful 1.0" in d.get("/metrics")[1],
            what="good reload",
        )
        assert d.stop() == 0
    assert "Traceback" not in d.logs()


def _reload_failures(d: DaemonProcess) -> float:
    for family in text_string_to_metric_families(d.get("/metrics")[1]):
        if family.name == "alivemcp_config_reloads":
            for sample in family.samples:
                if sample.labels.get("result") == "failure":
                    return sample.value
    return 0.0
