"""Helpers shared by the tests: run checks through the same path the daemon uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from alivemcp.checks import build_handle
from alivemcp.config import load_config_text
from alivemcp.plumbing import Plumbing
from alivemcp.results import CheckResult

REPO = Path(__file__).resolve().parent.parent
ALIVEMCP = [sys.executable, "-m", "alivemcp"]


async def run_check(
    probe: str,
    params: dict[str, Any],
    *,
    plumbing: Plumbing | None = None,
    timeout: float = 30.0,
    interval: float = 60.0,
    labels: dict[str, str] | None = None,
    runs: int = 1,
) -> CheckResult:
    """Validate one check's config exactly as the daemon would, run it ``runs`` times
    (same probe instance: state between runs is kept), and return the last result."""
    results = await run_check_series(
        probe, params, plumbing=plumbing, timeout=timeout, interval=interval, labels=labels,
        runs=runs,
    )
    return results[-1]


async def run_check_series(
    probe: str,
    params: dict[str, Any],
    *,
    plumbing: Plumbing | None = None,
    timeout: float = 30.0,
    interval: float = 60.0,
    labels: dict[str, str] | None = None,
    runs: int = 1,
) -> list[CheckResult]:
    doc = {
        "checks": [
            {
                "name": "t",
                "probe": probe,
                "interval": interval,
                "timeout": timeout,
                "labels": labels or {},
                "params": params,
            }
        ]
    }
    loaded = load_config_text(yaml.safe_dump(doc), env={})
    own = plumbing is None
    plumbing = plumbing or Plumbing()
    handle = build_handle(loaded.checks[0], plumbing)
    try:
        return [await handle.run() for _ in range(runs)]
    finally:
        await handle.teardown()
        if own:
            await plumbing.aclose()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``alivemcp`` CLI in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*ALIVEMCP, *args], capture_output=True, text=True, env=full_env, timeout=timeout,
        input=input, cwd=REPO,
    )


def check_json(config_path: str | Path, *only: str, env: dict[str, str] | None = None,
               timeout: float = 300) -> tuple[int, dict[str, dict[str, Any]]]:
    """``alivemcp check --json`` on a config; returns (exit code, results by check name)."""
    args = ["check", "--config", str(config_path), "--json"]
    for name in only:
        args += ["--only", name]
    proc = cli(*args, env=env, timeout=timeout)
    if proc.returncode == 2:
        raise AssertionError(f"config/usage error:\n{proc.stdout}\n{proc.stderr}")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["check"]] = row
    return proc.returncode, results
