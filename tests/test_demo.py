"""`make demo` end to end: the embedded stack comes up and every demo check gets its verdict,
the checks its local MCP registry lists included."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from alivemcp.app.datadir import DataDirLock
from tests.support import ALIVEMCP, REPO, cli, free_port, poll_until, subprocess_env

T = TypeVar("T")

#: Demo checks that are meant to fail: they show what a caught failure looks like.
EXPECTED_NOT_UP = {"s3-object-lambda-pii-leaky": "down"}
#: The checks the demo's local MCP registry yields (alivemcp.testbed.demo_registry), none of
#: them in config/demo.yaml, and the remote type each row's "discovered" names.
DISCOVERED = {
    "registry/io.alivemcp.demo/sdk": "streamable-http",
    "registry/io.alivemcp.demo/lab": "streamable-http",
    "registry/io.alivemcp.demo/lab#sse": "sse",
    "registry/io.alivemcp.demo/events": "streamable-http",
    "registry/io.alivemcp.demo/gated": "streamable-http",
}


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
            [
                *ALIVEMCP,
                "demo",
                "--listen",
                f"127.0.0.1:{port}",
                "--duration",
                "400",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
            cwd=REPO,
        )
    try:
        names = demo_check_names() | set(DISCOVERED)
        rows: dict[str, dict] = {}

        def settled() -> bool:
            nonlocal rows
            try:
                rows = {row["check"]: row for row in _get_json(port, "/status")["checks"]}
            except OSError:
                return False
            return all(rows.get(n, {}).get("status") == EXPECTED_NOT_UP.get(n, "up") for n in names)

        def summary() -> str:
            return str(
                {n: (rows.get(n, {}).get("status"), rows.get(n, {}).get("reason")) for n in names}
            )

        _wait_for("every check's verdict", settled, proc, log_path, 240, describe=summary)
        # Up for the reasons the demo parts set up, not by accident.
        assert "consumer markers in" in rows["kinesis-tool-stream"]["reason"], summary()
        assert rows["kinesis-tool-stream"]["observations"]["open_shards"] == 2
        assert "RUNNING on 3 KPUs" in rows["flink-tool-analytics"]["reason"], summary()
        assert rows["flink-tool-analytics"]["observations"]["input_records"] > 0
        dr_members = rows["dr-ready"]["details"]["members"]
        assert [(m["check"], m["status"]) for m in dr_members] == [
            ("mcp-sdk", "up"),
            ("s3-replication-lag", "up"),
        ], dr_members
        # The registry's checks: found there, labelled and described as discovered, the
        # auth-gated one up for the reason the registry entry gives (a required secret header).
        for name, transport in DISCOVERED.items():
            row = rows[name]
            server = name.removeprefix("registry/").split("#")[0]
            assert row["discovered"]["source"] == "registry", row
            assert (row["discovered"]["server"], row["discovered"]["transport"]) == (
                server,
                transport,
            ), row
            assert row["discovered"]["target"].startswith("http://127.0.0.1:"), row
            labels = row["labels"]
            assert (labels["discovery"], labels["server"], labels["remote"]) == (
                "registry",
                server,
                transport,
            ), labels
            assert (labels["team"], labels["env"]) == ("ecosystem", "demo"), labels
        assert rows["registry/io.alivemcp.demo/gated"]["reason"].startswith("auth-gated"), summary()
        (source,) = _get_json(port, "/api/v1/discovery")["sources"]
        assert (source["name"], source["kind"], source["ok"], source["targets"]) == (
            "registry",
            "mcp_registry",
            True,
            len(DISCOVERED),
        ), source
        assert source["skipped"] == {"deleted": 1, "no_remote": 1, "url_template": 1}, source
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for name in names:
            assert f'alivemcp_check_up{{check="{name}"' in metrics, name
        assert f'alivemcp_discovery_targets{{source="registry"}} {len(DISCOVERED)}.0' in metrics
        # Every probe type's series together, as Prometheus' own linter sees them: names,
        # units, types and help text (a bad name here fails CI, not a user's dashboard).
        lint = subprocess.run(
            ["promtool", "check", "metrics"],
            input=metrics,
            capture_output=True,
            text=True,
            timeout=60,
        )
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


def _get_json(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.load(answer)


def _wait_for(
    what: str,
    ready: Callable[[], T | None],
    proc: subprocess.Popen[bytes],
    log_path: Path,
    seconds: float,
    describe: Callable[[], str] = str,
) -> T:
    """Poll ``ready`` until it returns something, while the demo runs; fail at the deadline
    (saying ``describe()`` and the log's tail), or at once if the demo exits."""

    def running_and_ready() -> T | None:
        assert proc.poll() is None, (
            f"the demo exited ({proc.returncode}) waiting for {what}:\n"
            + (log_path.read_text()[-4000:])
        )
        return ready()

    found: T = poll_until(
        running_and_ready,
        seconds,
        what,
        every=0.5,
        context=lambda: f"{describe()}\n{log_path.read_text()[-4000:]}",
    )
    return found


def test_the_demo_prints_a_report_command_that_reads_its_kept_history(tmp_path: Path) -> None:
    # The demo runs in a directory of its own (as `make demo` runs in the checkout), with the
    # default data dir, and the printed command is run from elsewhere, as in a second terminal.
    where = tmp_path / "checkout"
    where.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    log_path = tmp_path / "demo.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*ALIVEMCP, "demo", "--listen", f"127.0.0.1:{port}", "--no-kafka", "--duration", "300"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(),
            cwd=where,
        )
    names = demo_check_names() | set(DISCOVERED)  # (the history has the discovered checks too)

    def printed(label: str) -> str | None:
        match = re.search(rf"^  {label}:\s+(.+)$", log_path.read_text(), re.MULTILINE)
        return match.group(1) if match else None

    def report(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*shlex.split(command), *extra],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=elsewhere,
            env=subprocess_env(),
        )

    def runs_by_check() -> dict[str, int] | None:
        done = report("--format", "json")
        assert done.returncode in (0, 1), done.stderr  # 1: no database yet
        if done.returncode:
            return None
        runs = {
            row["check"]: sum(row[f"runs_{s}"] for s in ("up", "degraded", "down", "unknown"))
            for row in json.loads(done.stdout)["checks"]
        }
        return runs if all(runs.get(name, 0) >= 1 for name in names) else None

    try:
        command = _wait_for("SLA report line", lambda: printed("SLA report"), proc, log_path, 180)
        data_dir = printed("data dir")
        assert data_dir is not None
        # The documented place, kept: not a temporary folder that goes with the demo.
        kept = where.resolve() / ".cache" / "demo"
        assert data_dir.split(" (")[0] == str(kept), data_dir
        assert "--data-dir" in shlex.split(command), command
        # Every check with at least one run, read while the daemon writes.
        runs = _wait_for("run of every check in the report", runs_by_check, proc, log_path, 180)
        assert set(runs) == names, runs
        shown = report()
        assert shown.returncode == 0, shown.stderr
        for name in names:
            cell = name.replace("#", "\\#")  # (markdown, escaped: `lab#sse` is `lab\#sse`)
            assert f"| {cell} " in shown.stdout, (name, shown.stdout)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, log_path.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "Traceback" not in text
    assert f"history kept in {kept}; report: {command}" in text
    # After the demo: the history is still there, and as complete as it was.
    assert (kept / "history.sqlite").is_file()
    after = runs_by_check()
    assert after is not None and all(after[n] >= runs[n] for n in names), (runs, after)
    # From the directory the demo ran in, the config's own data_dir names the same place.
    plain = subprocess.run(
        [*ALIVEMCP, "report", "--config", str(REPO / "config" / "demo.yaml"), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=where,
        env=subprocess_env(),
    )
    assert plain.returncode == 0, plain.stderr
    assert {row["check"] for row in json.loads(plain.stdout)["checks"]} == names


def test_a_second_demo_on_the_same_data_dir_starts_nothing(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path / "data")
    lock.acquire()  # as a running demo holds it
    try:
        done = cli(
            "demo",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(tmp_path / "data"),
            timeout=60,
        )
    finally:
        lock.release()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "starting the local stack" not in done.stdout
    assert "is in use by another alivemcp" in done.stderr
    assert "--data-dir DIR" in done.stderr
