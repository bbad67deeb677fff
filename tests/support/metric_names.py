"""What alivemcp really exports, and which metric names a PromQL expression uses.

The dashboard and the alert rules may only query metrics alivemcp exports. "Exports" is taken
from the real daemon's ``/metrics`` (started with test probes and a receiver, so the alerting
families are there) plus the probes' observation names read from the probe modules' source
(``alivemcp_probe_<name>``; a probe only emits them when it ran against a real target).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from gen_reference import probe_observations  # noqa: E402

from alivemcp.web.metrics import OBSERVATION_PREFIX  # noqa: E402
from tests.support import DaemonProcess  # noqa: E402

_PROMQL_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "and",
        "or",
        "unless",
        "inf",
        "nan",
        "atan2",
        "start",
        "end",
    }
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (functions, keywords, labels and literals removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # range / subquery selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", " ", text)  # Grafana variables
    text = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?(ms|s|m|h|d|w|y)?\b", " ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name = match.group(0)
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):  # a function call
            continue
        if name.lower() in _PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def sample_names_from_exposition(text: str) -> set[str]:
    """Every sample name a scrape can yield, including families that had no sample yet."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(maxsplit=3)
            if kind == "counter":
                names.add(family if family.endswith("_total") else family + "_total")
            elif kind in {"histogram", "summary"}:
                names.update({family + "_bucket", family + "_sum", family + "_count", family})
            else:
                names.add(family)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def observation_metric_names() -> set[str]:
    return {OBSERVATION_PREFIX + name for names in probe_observations().values() for name in names}


def scrape_real_daemon(tmp_path: Path) -> str:
    """/metrics of the real daemon running test probes, with one webhook receiver."""
    config = tmp_path / "metrics.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp_path / "data"),
                "defaults": {"interval": 1, "labels": {"team": "ship"}},
                "checks": [
                    {
                        "name": "good",
                        "probe": "test_static",
                        "params": {"observations": {"x_seconds": 1}},
                    },
                    {"name": "bad", "probe": "test_static", "params": {"status": "down"}},
                ],
                # A receiver no one listens on: the alerting families exist and count the failures.
                "alerting": {
                    "receivers": [
                        {"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}
                    ],
                    "default_receivers": ["hook"],
                },
            }
        )
    )
    with DaemonProcess(config) as daemon:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, what="readyz")
        daemon.wait_for(
            lambda: "alivemcp_check_runs_total{" in daemon.get("/metrics")[1],
            what="a run in /metrics",
        )
        return daemon.get("/metrics")[1]


def unknown_names(exprs: Iterable[str], exported: set[str]) -> dict[str, set[str]]:
    """expression -> the names in it that alivemcp does not export (empty: all good)."""
    out = {}
    for expr in exprs:
        missing = {n for n in promql_metric_names(expr) if n not in exported}
        if missing:
            out[expr] = missing
    return out
