"""The real daemon process: bad probes stay contained, reloads are safe, shutdown is clean."""

from __future__ import annotations

import itertools
import json
import signal
import time
from pathlib import Path

from tests.support import DaemonProcess, run_times, write_daemon_config

SECRET = "hunter2-very-secret-token"


def test_bad_probes_leave_the_daemon_healthy_and_other_checks_on_time(tmp_path: Path) -> None:
    ticks = tmp_path / "ticks.txt"
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            {
                "name": "good",
                "probe": "test_static",
                "interval": 0.5,
                "params": {"record_to": str(ticks), "observations": {"lag_seconds": 3}},
            },
            {"name": "hang", "probe": "test_hang", "interval": 1, "timeout": 0.5},
            {
                "name": "stubborn",
                "probe": "test_hang",
                "interval": 1,
                "timeout": 0.3,
                "params": {"ignore_cancel": True},
            },
            {"name": "raise", "probe": "test_raise", "interval": 0.5},
            {
                "name": "garbage",
                "probe": "test_garbage",
                "interval": 0.5,
                "params": {"kind": "nan"},
            },
        ],
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.get("/readyz")[0] == 200, what="readyz")
        start = time.time()
        # why: not a wait for an event: the good check's cadence is watched over 6 s (twelve
        # of its intervals) while the others misbehave.
        time.sleep(6)
        elapsed = time.time() - start
        assert d.get("/healthz")[0] == 200
        # Alert state is tracked even with no receivers: failing targets and broken probes.
        expected = {
            ("hang", "target"),
            ("stubborn", "target"),
            ("raise", "probe_broken"),
            ("garbage", "probe_broken"),
        }
        d.wait_for(
            lambda: {(a["check"], a["alert"]) for a in d.get_json("/status")["alerts"]} == expected,
            what=f"the alerts {sorted(expected)}",
        )
        document = d.get_json("/status")
        assert document["summary"]["up"] == 1 and document["summary"]["down"] == 2
        states = {row["check"]: row for row in document["checks"]}
        assert states["good"]["status"] == "up"
        assert states["hang"]["status"] == "down"
        assert states["hang"]["reason"] == "timeout after 0.5s"
        assert states["stubborn"]["status"] == "down"
        assert states["raise"]["status"] == "unknown"
        assert states["raise"]["reason"] == "probe error: RuntimeError: boom"
        assert states["garbage"]["status"] == "unknown"
        # The good check kept its 0.5 s cadence while the others misbehaved: it ran on (almost)
        # every grid point; a stalled scheduler would leave gaps of seconds.
        times = [t for t in run_times(ticks) if t >= start]
        assert len(times) >= int(elapsed / 0.5) - 2, times
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) < 1.5, gaps
        assert len(states["good"]["history"]) >= 5
        _, metrics = d.get("/metrics")
        assert 'alivemcp_check_up{check="good",probe="test_static"} 1.0' in metrics
        assert 'alivemcp_check_status{check="hang",probe="test_hang",status="down"} 1.0' in metrics
        assert 'alivemcp_probe_lag_seconds{check="good",probe="test_static"} 3.0' in metrics
        assert 'alivemcp_probe_widgets{check="good",probe="test_static",kind="a"} 2.0' in metrics
        assert "alivemcp_scheduler_lateness_seconds_bucket" in metrics
        assert (
            'alivemcp_check_runs_total{check="raise",probe="test_raise",result="unknown"}'
            in metrics
        )
        assert "alivemcp_build_info{" in metrics
        status, om = d.get("/metrics", {"Accept": "application/openmetrics-text"})
        assert status == 200 and om.rstrip().endswith("# EOF")
        started = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - started < 15


def test_reload_refuses_a_bad_file_and_keeps_running_then_applies_a_good_one(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.txt"
    state.write_text("up\n")
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [{"name": "a", "probe": "test_file", "interval": 0.3, "params": {"path": str(state)}}],
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.status_of("a").get("status") == "up", what="a up")
        config.write_text("checks: [{name: a, probe: test_file, intervall: 1}]\n")
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: "alivemcp_config_last_reload_successful 0.0" in d.get("/metrics")[1],
            what="failed reload metric",
        )
        assert "checks[0].intervall: unknown field; did you mean 'interval'?" in d.logs()
        state.write_text("degraded\nfile says degraded\n")
        d.wait_for(lambda: d.status_of("a").get("status") == "degraded", what="old config runs on")
        write_daemon_config(
            config,
            [
                {
                    "name": "a",
                    "probe": "test_file",
                    "interval": 0.3,
                    "params": {"path": str(state)},
                },
                {"name": "b", "probe": "test_static", "interval": 0.3},
            ],
        )
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: "alivemcp_config_last_reload_successful 1.0" in d.get("/metrics")[1],
            what="successful reload",
        )
        d.wait_for(lambda: d.status_of("b").get("status") == "up", what="new check runs")
        # The unchanged check kept its state (since) across the reload.
        assert d.status_of("a").get("status") == "degraded"
        assert d.stop() == 0


def test_secrets_never_reach_status_metrics_or_logs(tmp_path: Path) -> None:
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            {
                "name": "leaky",
                "probe": "test_static",
                "interval": 0.3,
                "params": {"reason": "token=abc123def456 and", "secret_in_reason": "${TOKEN}"},
            }
        ],
    )
    # The secret arrives through the environment; a SecretStr elsewhere in config would be
    # registered too. Here the value rides in a plain field: pattern redaction must catch
    # `token=...`, and the env value must be caught because it looks like one.
    with DaemonProcess(config, env={"TOKEN": "Bearer " + SECRET}) as d:
        d.wait_for(lambda: d.status_of("leaky").get("status") == "up", what="run")
        status = json.dumps(d.get_json("/status"))
        _, metrics = d.get("/metrics")
        assert d.stop() == 0
    for text in (status, metrics, d.logs()):
        assert SECRET not in text
        assert "abc123def456" not in text
