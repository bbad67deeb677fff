"""The canonical form of a surface (alivemcp/surface.py): what is a change and what is not,
and the bounds on what is kept."""

from __future__ import annotations

import json

import pytest

from alivemcp.surface import MAX_ITEMS, MAX_STRING, Surface, build_surface, canonical_json


def tool(name: str, **fields: object) -> tuple[str, str, dict[str, object]]:
    return ("tool", name, {"name": name, **fields})


def test_order_and_duplicates_do_not_change_the_digest() -> None:
    a = build_surface([tool("a", description="x"), tool("b", description="y")])
    b = build_surface([tool("b", description="y"), tool("a", description="x")])
    assert a.digest == b.digest
    assert [i.key for i in a.items] == ["tool:a", "tool:b"]


def test_key_order_and_integral_floats_are_not_changes() -> None:
    a = build_surface([tool("a", inputSchema={"type": "object", "maximum": 100, "x": 1.5})])
    b = build_surface([tool("a", inputSchema={"x": 1.5, "maximum": 100.0, "type": "object"})])
    assert a.digest == b.digest
    assert canonical_json({"b": 1.0, "a": [2.0, 2.5]}) == '{"a":[2,2.5],"b":1}'


@pytest.mark.parametrize(
    "changed",
    [
        {"description": "x "},  # one space more: text is compared exactly
        {"description": "x", "annotations": {"destructiveHint": True}},
        {"description": "x", "inputSchema": {"type": "object"}},
        {"description": "x\u202e"},
    ],
)
def test_any_field_change_is_a_change(changed: dict[str, object]) -> None:
    base = build_surface([tool("a", description="x")])
    assert build_surface([tool("a", **changed)]).digest != base.digest


def test_kinds_are_apart() -> None:
    a = build_surface([("prompt", "a", {"name": "a"})])
    b = build_surface([("tool", "a", {"name": "a"})])
    assert a.digest != b.digest


def test_lone_surrogates_hash_and_round_trip() -> None:
    surface = build_surface([tool("a", description="bad \udc80 text")])
    text = json.dumps(surface.to_json())  # escaped: encodable whatever the input
    back = Surface.from_json(json.loads(text))
    assert back.digest == surface.digest
    assert back.items[0].document == {"name": "a", "description": "bad \udc80 text"}


def test_long_strings_are_cut_but_hashed_whole() -> None:
    long = "a" * (MAX_STRING + 10)
    a = build_surface([tool("a", description=long)])
    b = build_surface([tool("a", description=long + "b")])
    assert a.digest != b.digest
    kept = a.items[0].document
    assert kept is not None and len(str(kept["description"])) < MAX_STRING + 40
    assert str(kept["description"]).endswith("[10 more characters]")


def test_item_flood_keeps_digests_and_drops_documents() -> None:
    surface = build_surface([tool(f"t{i:05}") for i in range(MAX_ITEMS + 5)])
    assert len(surface.items) == MAX_ITEMS + 5
    assert surface.dropped == 5
    assert sum(1 for i in surface.items if i.document is None) == 5


def test_non_finite_numbers_and_deep_nesting_still_have_a_digest() -> None:
    a = build_surface([tool("a", inputSchema={"x": float("inf"), "y": float("nan")})])
    assert a.digest != build_surface([tool("a", inputSchema={"x": 1e308})]).digest
    deep: dict[str, object] = {}
    node = deep
    for _ in range(900):  # deeper than Python's recursion would copy it
        node["n"] = {}
        node = node["n"]  # type: ignore[assignment]
    surface = build_surface([tool("a", inputSchema=deep)])
    assert len(surface.digest) == 16


def test_values_json_cannot_carry_raise() -> None:
    with pytest.raises((ValueError, TypeError)):
        build_surface([tool("a", inputSchema={"x": object()})])
