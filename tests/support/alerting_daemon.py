"""Helpers for alerting tests on the real daemon process: configs of file-driven checks,
reading its JSON log, and grouping the events a PagerDuty stand-in received."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from tests.support import DaemonProcess


def per_key(events: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for e in events:
        out[e["dedup_key"]].append(e["event_action"])
    return dict(out)


def set_state(path: Path, status: str, reason: str = "") -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{status}\n{reason}\n" if reason else f"{status}\n")
    tmp.replace(path)  # atomic: the probe never reads a half-written file


def write_config(tmp: Path, checks: list[dict[str, Any]], alerting: dict[str, Any]) -> Path:
    path = tmp / "alivemcp.yaml"
    doc = {
        "logging": {"format": "json"},
        "data_dir": str(tmp / "data"),
        "defaults": {"interval": 0.5},
        "checks": checks,
        "alerting": alerting,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def file_check(tmp: Path, name: str, status: str = "up", **extra: Any) -> dict[str, Any]:
    state = tmp / f"{name.replace('/', '_')}.state"
    set_state(state, status)
    return {"name": name, "probe": "test_file", "params": {"path": str(state)}, **extra}


def log_events(d: DaemonProcess, event: str) -> list[dict[str, Any]]:
    out = []
    for line in d.logs().splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("event") == event:
                out.append(row)
    return out
