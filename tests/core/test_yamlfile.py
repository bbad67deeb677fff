"""The config's YAML loader builds exactly what PyYAML's safe loader builds.

``alivemcp.config.yamlfile`` resolves tags and builds common values by its own shortcuts (a 100,000
check file loads in a fraction of the time); these tests hold it to PyYAML's results, types
included, on every YAML file the project ships and on documents made of the corners of YAML 1.1
that a shortcut could get wrong.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from alivemcp.config.yamlfile import YamlFileError, load_yaml

REPO = Path(__file__).resolve().parents[2]

#: Scalars whose type or value YAML 1.1 decides from their spelling.
SCALARS = [
    "60",
    "0",
    "-1",
    "+7",
    "012",
    "0o17",
    "0x1F",
    "0b101",
    "1_000",
    "1:30",
    "190:20:30",
    "0.5",
    "1e3",
    "-.inf",
    ".NaN",
    "1_0.5",
    "6.8523015e+5",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "n",
    "true",
    "False",
    "~",
    "null",
    "Null",
    "",
    "2026-12-01",
    "2026-12-01T10:00:00Z",
    "2001-12-14 21:59:43.10 -5",
    "'012'",
    '"60"',
    "'yes'",
    "abc",
    "c1",
    "=",
    "<<x",
    "!",
    "&",
    "١٢٣",
    "²",
    "00",
    "09",
    "1.2.3",
    "0x",
    "-",
    ".",
    "'a: b'",
    '"tab\\there"',
    "é",
    "!!str 60",
    "!!int '7'",
    "!!float 3",
    "!!binary aGVsbG8=",
    "!!bool yes",
    "!!null ''",
]


def _same(text: str) -> None:
    """Equal values of equal types, or both refuse the document."""
    try:
        expected = yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        with pytest.raises(YamlFileError):
            load_yaml(text, "t.yaml")
        return
    assert _types(load_yaml(text, "t.yaml")) == _types(expected), text


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return {repr(k): (type(k).__name__, _types(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    return type(value).__name__, repr(value)


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for pattern in ("config/*.yaml", "deploy/**/*.yaml", "docs/**/*.yaml", "tests/**/*.yaml")
        for p in REPO.glob(pattern)
    ),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_shipped_yaml_file_loads_as_pyyaml_loads_it(path: Path) -> None:
    for document in path.read_text().split("\n---"):
        if document.strip():
            _same(document)


@pytest.mark.parametrize("scalar", SCALARS)
def test_each_scalar_as_value_key_and_list_item(scalar: str) -> None:
    _same(f"a: {scalar}\n")
    _same(f"- {scalar}\n- [{scalar}]\n")
    if scalar and not scalar.startswith("!!"):
        _same(f"{scalar}: v\n")


def test_merge_keys_anchors_and_shared_aliases() -> None:
    text = (
        "x-base: &base {probe: mcp_endpoint, interval: 30s, labels: {team: a}}\n"
        "x-list: &list [1, 2]\n"
        "checks:\n"
        "  - <<: *base\n    name: one\n"
        "  - <<: [*base, {interval: 10}]\n    name: two\n    interval: 5\n"
        "  - {name: three, targets: *list, labels: *list}\n"
        "set: !!set {a, b}\n"
        "omap: !!omap [{a: 1}, {b: 2}]\n"
        "pairs: !!pairs [{a: 1}, {a: 2}]\n"
        "dup: {k: 1, k: 2}\n"
        "nested: [[[{a: [{}]}]], []]\n"
        "? [complex, key]\n: value\n"
    )
    with pytest.raises(YamlFileError, match="unhashable"):
        load_yaml(text, "t.yaml")
    _same(text.replace("? [complex, key]\n: value\n", "? complex\n: value\n"))
    loaded = load_yaml(text.replace("? [complex, key]\n: value\n", ""), "t.yaml")
    # One anchor used twice is one object, as PyYAML builds it.
    assert loaded["checks"][2]["targets"] is loaded["checks"][2]["labels"]


def test_random_documents_of_the_tricky_scalars() -> None:
    rng = random.Random(17)

    def value(depth: int) -> str:
        pick = rng.random()
        if depth > 3 or pick < 0.5:
            return rng.choice(SCALARS)
        if pick < 0.75:
            return "[" + ", ".join(value(depth + 1) for _ in range(rng.randint(0, 4))) + "]"
        keys = rng.sample([s for s in SCALARS if s and not s.startswith("!")], 3)
        return "{" + ", ".join(f"k{i}{k}: {value(depth + 1)}" for i, k in enumerate(keys)) + "}"

    for _ in range(300):
        text = "\n".join(f"key{i}: {value(0)}" for i in range(rng.randint(1, 6))) + "\n"
        _same(text)
