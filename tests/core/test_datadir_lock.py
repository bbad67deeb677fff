"""One daemon per data_dir: a second one refuses to start with one clear line; the lock dies
with its holder, even under kill -9."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from alivemcp.app.datadir import DataDirInUseError, DataDirLock
from tests.support import ALIVEMCP, REPO, DaemonProcess, free_port, subprocess_env


def write_config(path: Path, data_dir: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(data_dir),
                "checks": [{"name": "a", "probe": "test_static", "interval": 0.5}],
            }
        )
    )
    return path


def run_second(config: Path) -> subprocess.CompletedProcess[str]:
    port = free_port()
    return subprocess.run(
        [*ALIVEMCP, "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        timeout=60,
    )


def test_a_second_daemon_on_the_same_data_dir_exits_2_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first_config = write_config(tmp_path / "first.yaml", data)
    second_config = write_config(tmp_path / "second.yaml", data)
    with DaemonProcess(first_config) as first:
        assert first.proc is not None
        second = run_second(second_config)
        assert second.returncode == 2
        output = (second.stdout + second.stderr).splitlines()
        assert output == [
            f"data_dir {data} is in use by another alivemcp "
            f"(pid {first.proc.pid} on {socket.gethostname()}); use a different data_dir"
        ]
        # The first daemon is untouched: still serving, still the holder.
        assert first.get("/healthz")[0] == 200
        assert (data / ".lock").read_text().split() == [str(first.proc.pid), socket.gethostname()]
        assert first.stop() == 0
    # Once the first one has exited, the directory is free again.
    with DaemonProcess(second_config) as again:
        assert again.get("/healthz")[0] == 200
        assert again.stop() == 0


def test_a_lock_left_by_kill_9_does_not_block_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = write_config(tmp_path / "c.yaml", data)
    killed = DaemonProcess(config).start()
    assert killed.proc is not None
    killed_pid = killed.proc.pid
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait(10)
    # The file still names the dead holder; the kernel dropped its lock with the process.
    assert (data / ".lock").read_text().startswith(f"{killed_pid} ")
    with DaemonProcess(config) as restarted:
        assert restarted.proc is not None
        assert restarted.get("/healthz")[0] == 200
        assert (data / ".lock").read_text().startswith(f"{restarted.proc.pid} ")
        assert restarted.stop() == 0


def test_an_unusable_data_dir_does_not_stop_probing(tmp_path: Path) -> None:
    # data_dir below a regular file can never be created: the daemon says so and runs on.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    config = write_config(tmp_path / "c.yaml", blocker / "data")
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.status_of("a").get("status") == "up", what="a up")
        assert d.stop() == 0
    warnings = [
        json.loads(line)
        for line in d.logs().splitlines()
        if line.startswith("{") and "cannot lock data_dir" in line
    ]
    assert warnings and warnings[0]["data_dir"] == str(blocker / "data")


def test_the_lock_is_exclusive_between_holders_and_released_on_release(tmp_path: Path) -> None:
    first, second = DataDirLock(tmp_path / "d"), DataDirLock(tmp_path / "d")
    first.acquire()
    with pytest.raises(DataDirInUseError) as refused:
        second.acquire()
    assert "use a different data_dir" in str(refused.value)
    first.release()
    assert (tmp_path / "d" / ".lock").read_text() == ""
    second.acquire()
    assert second.held
    second.release()
