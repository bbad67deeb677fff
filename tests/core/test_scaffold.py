"""``alivemcp new-probe``: the generated plugin project works as generated.

It is registered the way an installed package is (a dist-info carrying the entry point its own
pyproject.toml declares, on the path; the shared environment is never pip-installed into),
runs through the real ``alivemcp check`` against a real HTTP server on 127.0.0.1 (up, then down
once the server is gone), its own tests pass, and its code is lint-clean at the longest name
the scaffold accepts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from alivemcp.cli.scaffold import ProjectNames, new_probe, run_new_probe
from tests.support import serve_http, subprocess_env

#: As long as a name may be (32 characters), so that line lengths are tested at their worst.
NAME = "scaffold_made_http_answer_checks"


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"healthy")

    def log_message(self, *args: object) -> None:
        return None


def install(project: Path) -> dict[str, str]:
    """Register the project as ``pip install`` would: a dist-info whose entry_points.txt is
    the one its pyproject.toml declares, next to its package, on PYTHONPATH."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    dist = project / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    lines = ["[alivemcp.probes]"] + [
        f"{name} = {target}" for name, target in meta["entry-points"]["alivemcp.probes"].items()
    ]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{project}:{env['PYTHONPATH']}"
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "plugin"
    written = new_probe(NAME, directory)
    names = ProjectNames.for_probe(NAME)
    assert sorted(p.relative_to(directory).as_posix() for p in written) == [
        "README.md",
        f"{names.package}/__init__.py",
        f"{names.package}/{NAME}.py",
        f"iam/{NAME}.json",
        "pyproject.toml",
        f"tests/test_{NAME}.py",
    ]
    return directory


def _check(config: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "alivemcp", "check", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=config.parent,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc.returncode, json.loads(line)


def test_the_generated_probe_runs_through_alivemcp_check(project: Path, tmp_path: Path) -> None:
    env = install(project)
    config = tmp_path / "checks.yaml"
    with serve_http(_Healthy) as url:
        config.write_text(
            f"checks:\n  - name: web\n    probe: {NAME}\n    timeout: 5s\n"
            f"    params:\n      url: {url}/healthz\n"
        )
        code, row = _check(config, env)
        assert (code, row["status"], row["probe"]) == (0, "up", NAME), row["reason"]
        assert row["reason"].startswith("HTTP 200 in ")
        assert row["observations"]["response_bytes"] == 7
    # The server is gone: nothing listens on its port any more.
    code, row = _check(config, env)
    assert (code, row["status"]) == (1, "down")
    assert f"GET {url}/healthz: cannot connect to 127.0.0.1:" in row["reason"]


def test_the_generated_project_passes_its_own_tests_and_lint(project: Path) -> None:
    env = install(project)
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=project,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "5 passed" in tests.stdout
    lint = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--select",
            "E,F,W,I,B,UP,SIM,ASYNC,RUF",
            ".",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    policy = json.loads((project / "iam" / f"{NAME}.json").read_text())
    assert policy["Version"] == "2012-10-17" and policy["Statement"][0]["Effect"] == "Allow"


@pytest.mark.parametrize("bad", ["Kinesis", "2fast", "kinesis-lag", "a__b", "lag_", "x" * 33])
def test_a_name_that_is_not_lower_snake_case_is_refused(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_new_probe(bad, tmp_path / "out") == 2
    assert "must be lower_snake_case" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_existing_directory_with_files_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert run_new_probe("lag_watch", tmp_path) == 2
    assert "already exists and is not an empty directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_the_default_directory_is_named_after_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_new_probe("lag_watch") == 0
    assert (tmp_path / "alivemcp-lag-watch" / "alivemcp_lag_watch" / "lag_watch.py").is_file()
    out = capsys.readouterr().out
    assert "created probe type lag_watch in alivemcp-lag-watch:" in out
    assert "pip install -e '.[test]'" in out
