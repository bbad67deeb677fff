"""docs/reference.md is generated from the code and must match it."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import gen_reference  # noqa: E402


def test_reference_is_up_to_date() -> None:
    current = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert current == gen_reference.render(), (
        "docs/reference.md is out of date: run .venv/bin/python scripts/gen_reference.py"
    )


def test_reference_covers_every_builtin_probe_and_every_engine_metric() -> None:
    from alivemcp.metrics import ENGINE_METRIC_NAMES

    text = gen_reference.render()
    for name in gen_reference.builtin_entry_points():
        assert f"### `{name}`" in text
        assert f"#### `{name}` params" in text, f"{name} failed to load"
    for family in ENGINE_METRIC_NAMES:
        assert f"`{family}" in text, family


def test_observation_names_are_read_from_source() -> None:
    source = '''
observations = {"a_seconds": 1.0}
observations["b_total"] = 2
obs.update({"c_bytes": 3})
ProbeResult.up("ok", observations={"d_ratio": 1})
LabeledObservation("e_messages", 1.0, {"group": "g"})
other = {"not_an_observation": 1}
details = {"id": "x", "age_seconds": 3}
scope = "topic"
scope = "partition"
LabeledObservation(f"{scope}_lag_seconds", 1.0, {})
LabeledObservation(f"{unknowable()}_x", 1.0, {})
_Watch(result, {"end_to_end_latency_seconds": 1.0})
'''
    assert gen_reference.observation_names_in_source(source) == {
        "a_seconds", "b_total", "c_bytes", "d_ratio", "e_messages", "topic_lag_seconds",
        "partition_lag_seconds", "end_to_end_latency_seconds"}
