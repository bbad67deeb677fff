"""What a new operator meets first, on the real CLI and daemon: one flag spelling, every
config error in one pass, structure checks without secrets, a busy port in one line, and a
changed secret that really reaches the probe on reload."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import ALIVEMCP, REPO, DaemonProcess, cli, free_port, subprocess_env

MANY_ERRORS = """\
defaults: {interval: soon}
scheduler: {max_concurrency: 0}
checks:
  - name: a
    probe: test_static
    params: {statuz: up}
  - name: b
    probe: test_static
    intervall: 3
  - name: c
    probe: mcp_endpoint
    params: {url: "${FIRST_HOUR_URL}", headers: {X-Api-Key: "${FIRST_HOUR_KEY}"}}
"""


def test_validate_lists_every_error_in_one_pass_with_either_flag_spelling(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(MANY_ERRORS)
    for args in (
        ["validate", str(path)],
        ["validate", "-c", str(path)],
        ["validate", "--config", str(path)],
    ):
        proc = cli(*args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.splitlines()
        assert lines[0].endswith("invalid configuration (6 error(s))"), proc.stderr
        # Engine sections, check specs and probe params: all layers at once.
        for expected in (
            "checks[2].params.url: environment variable FIRST_HOUR_URL is not set",
            "defaults.interval: 'soon' is not a duration",
            "scheduler.max_concurrency:",
            "checks[1].intervall: unknown field; did you mean 'interval'?",
            "checks[0].params.statuz: unknown field; did you mean 'status'?",
        ):
            assert any(expected in line for line in lines), (expected, proc.stderr)
        # The empty value an unset variable leaves is not a second error.
        assert "must be an http" not in proc.stderr


def test_validate_allow_missing_env_checks_structure_without_the_secrets(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        MANY_ERRORS.split("checks:")[0]
        .replace("soon", "30s")
        .replace("max_concurrency: 0", "max_concurrency: 5")
        + "checks:"
        + MANY_ERRORS.split("checks:")[1]
        .replace("statuz", "status")
        .replace("intervall", "interval")
    )
    proc = cli("validate", "--allow-missing-env", "-c", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "checks[2].params.url: ${FIRST_HOUR_URL} is not set; not checked" in proc.stdout
    # Without the flag the same file is refused, naming the variable.
    proc = cli("validate", str(path))
    assert proc.returncode == 2 and "FIRST_HOUR_URL is not set" in proc.stderr
    # The flag does not hide real mistakes.
    path.write_text(path.read_text().replace("probe: test_static", "probe: test_statik", 1))
    proc = cli("validate", "--allow-missing-env", str(path))
    assert proc.returncode == 2 and "test_statik" in proc.stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield port


def test_busy_port_is_one_line_before_anything_starts(tmp_path: Path, busy_port: int) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {"server": {"listen": f"127.0.0.1:{busy_port}"}, "data_dir": str(tmp_path / "data")}
        )
    )
    proc = cli("run", "-c", str(path), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"port {busy_port} on 127.0.0.1 is already in use: set server.listen in {path} or "
        "pass --listen HOST:PORT"
    ]
    proc = cli("demo", "--listen", f"127.0.0.1:{busy_port}", timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "make demo LISTEN=" in lines[0], proc.stderr
    assert "starting the local stack" not in proc.stdout  # nothing was started


def test_reload_with_only_a_changed_secret_rebuilds_the_check(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"

    def write(token: str) -> None:
        path.write_text(
            yaml.safe_dump(
                {
                    "logging": {"format": "json"},
                    "data_dir": str(tmp_path / "data"),
                    "checks": [
                        {
                            "name": "s",
                            "probe": "test_hostile",
                            "interval": 0.3,
                            "params": {"status": "up", "token": token},
                        }
                    ],
                }
            )
        )

    write("old-secret-1")
    with DaemonProcess(path) as d:
        metric = 'alivemcp_probe_token_length{check="s",probe="test_hostile"}'
        d.wait_for(lambda: f"{metric} 12.0" in d.get("/metrics")[1], what="old token in use")
        write("new-secret-value-22")
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: f"{metric} 19.0" in d.get("/metrics")[1], what="new token in use")
        assert d.stop() == 0
    for secret in ("old-secret-1", "new-secret-value-22"):
        assert secret not in d.logs()


def test_labels_that_any_series_of_the_check_carries_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"labels": {"probe": "x"}},
                "checks": [
                    {"name": "a", "probe": "test_hostile", "labels": {"status": "prod"}},
                    {
                        "name": "b",
                        "probe": "test_hostile",
                        "labels": {"server_name": "s", "result": "r"},
                    },
                    {
                        "name": "c",
                        "probe": "test_static",
                        "labels": {"server_name": "s", "__x": "y"},
                    },
                ],
            }
        )
    )
    proc = cli("validate", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    for where, series in (
        ("checks[0].labels.status", "alivemcp_check_status"),
        ("checks[1].labels.server_name", "alivemcp_probe_server_info"),
        ("checks[1].labels.result", "alivemcp_check_runs_total"),
        ("defaults.labels.probe", "every alivemcp_check_* series"),
    ):
        assert any(
            line.strip().startswith(f"{where}: {series} already carries") for line in lines
        ), (where, proc.stderr)
    assert any("checks[2].labels.__x: not a usable Prometheus label name" in line for line in lines)
    # server_name is only taken for the probe type that declares it.
    assert not any("checks[2].labels.server_name" in line for line in lines)


def test_a_probe_held_to_its_declared_labels(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp_path / "data"),
                "checks": [
                    {
                        "name": "sneaky",
                        "probe": "test_hostile",
                        "interval": 0.3,
                        "labels": {"team": "a"},
                        "params": {"status": "up", "extra_label": "team"},
                    }
                ],
            }
        )
    )
    with DaemonProcess(path) as d:
        d.wait_for(lambda: d.status_of("sneaky").get("status") == "unknown", what="garbage")
        assert "has undeclared labels ['team']" in d.status_of("sneaky")["reason"]
        status, text = d.get("/metrics")
        assert status == 200 and 'team="a"' in text
        assert d.stop() == 0


def test_output_into_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    # `alivemcp probes --schema | head`: the reader leaves early; the command stops quietly.
    proc = subprocess.run(
        f"{' '.join(ALIVEMCP)} probes --schema | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        timeout=60,
    )
    assert proc.stdout == '{\n  "$defs"'[:10]
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
