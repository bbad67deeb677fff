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
    from alivemcp.web.metrics import ENGINE_METRIC_NAMES

    text = gen_reference.render()
    for name in gen_reference.builtin_entry_points():
        assert f"### `{name}`" in text
        assert f"#### `{name}` params" in text, f"{name} failed to load"
    for family in ENGINE_METRIC_NAMES:
        assert f"`{family}" in text, family


def test_observations_come_from_the_declarations() -> None:
    from probe_observables import unit_of

    from alivemcp.config.registry import registry

    text = gen_reference.render()
    for name in gen_reference.builtin_entry_points():
        declared = registry().get(name).observables
        assert declared, f"{name} declares no observables"
        assert gen_reference.probe_observations()[name] == sorted(o.name for o in declared)
        for o in declared:
            labels = ", ".join(f"`{x}`" for x in o.labels) or "none"
            assert f"| `{o.name}` | {unit_of(o.name)} | {labels} |" in text
