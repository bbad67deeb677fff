"""A target's surface: what it offers its clients, in one canonical form (the contract).

An MCP server's tools, prompts, resources and instructions are read by someone else's model;
a change to them after a team approved the server changes what every agent is told. A probe
that sees such a surface hands it to the engine as a :class:`Surface` beside its verdict
(``ProbeResult.surface``); the surface consumers (versions, approvals, diffs, findings,
alerts) see only this, never the probe.

Canonical form: every item is a JSON document with its keys sorted, no insignificant
whitespace, integral floats written as integers (``1.0`` is ``1``: JSON does not tell them
apart) and every non-ASCII character escaped (so lone surrogates hash and store like any other
character). Items are identified by kind and name and kept in that order, so reordering a list
or paging it differently is not a change. Each item has its own digest; the surface's digest
covers every item's.

Bounds: a hostile server decides the size of what it lists. Digests always cover every item
in full; the kept documents are bounded (:data:`MAX_ITEMS` items, strings cut at
:data:`MAX_STRING` characters), and ``dropped`` counts what was left out.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "MAX_ITEMS",
    "MAX_STRING",
    "Surface",
    "SurfaceItem",
    "SurfaceMode",
    "build_surface",
    "canonical_json",
]

#: Items whose documents are kept (their digests are always kept, whatever the count).
MAX_ITEMS = 2_000
#: Characters of a string kept in a stored document (the digest covers the whole string).
MAX_STRING = 16_384
_CUT = "…[{} more characters]"
#: Nesting kept in a stored document (deeper values become a marker; the digest covers them).
_MAX_DEPTH = 32


class SurfaceMode(StrEnum):
    """What a change of surface means for a check."""

    PIN = "pin"  # the approved surface is the baseline: a difference alerts until approved
    OBSERVE = "observe"  # versions are recorded and listed, nobody is paged


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
)


def _number(value: float) -> Any:
    if value.is_integer() and abs(value) < 2**63:
        return int(value)
    if value != value or value in (math.inf, -math.inf):
        # Not JSON numbers (a parser may turn 1e400 into infinity): kept as text so the
        # surface still has a digest, whatever a server sends.
        return repr(value)
    return value


def _normal(value: Any) -> Any:
    """``value`` with integral floats as ints and non-finite floats as text, copied without
    recursion: a server may nest its schemas as deep as the JSON parser allows, deeper than
    Python's own recursion would go."""
    if isinstance(value, float):
        return _number(value)
    if not isinstance(value, dict | list | tuple):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, dict):
            copy: dict[str, Any] = {}
            parent[key] = copy
            for k, v in item.items():
                copy[str(k)] = None
                stack.append((v, copy, str(k)))
        elif isinstance(item, list | tuple):
            listed: list[Any] = [None] * len(item)
            parent[key] = listed
            stack.extend((v, listed, i) for i, v in enumerate(item))
        elif isinstance(item, float):
            parent[key] = _number(item)
        else:
            parent[key] = item
    return root[0]


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module docstring). Raises ValueError or
    TypeError for a value JSON cannot carry (a non-JSON type), RecursionError when nested
    deeper than the encoder goes."""
    return _ENCODER.encode(_normal(value))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def _bounded(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` with strings cut at MAX_STRING and nesting cut at _MAX_DEPTH."""
    if isinstance(value, str):
        if len(value) <= MAX_STRING:
            return value
        return value[:MAX_STRING] + _CUT.format(len(value) - MAX_STRING)
    if depth >= _MAX_DEPTH and isinstance(value, dict | list):
        return "…[nested deeper]"
    if isinstance(value, dict):
        return {k: _bounded(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class SurfaceItem:
    """One thing a target offers: ``kind`` (``tool``, ``prompt``, ``resource``,
    ``instructions``), its ``name`` (unique within the kind), the digest of its canonical form
    and its ``document`` (bounded; None when it was dropped by the item cap)."""

    kind: str
    name: str
    digest: str
    document: Mapping[str, Any] | None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class Surface:
    """A whole surface: its items in (kind, name) order, its digest, the mode the check
    watches it in, and how many item documents were left out (``dropped``)."""

    items: tuple[SurfaceItem, ...]
    digest: str
    mode: SurfaceMode = SurfaceMode.PIN
    dropped: int = 0

    def by_key(self) -> dict[str, SurfaceItem]:
        return {item.key: item for item in self.items}

    def to_json(self) -> dict[str, Any]:
        """What is stored for a version (and what :meth:`from_json` reads back)."""
        return {
            "digest": self.digest,
            "dropped": self.dropped,
            "items": [
                {"kind": i.kind, "name": i.name, "digest": i.digest, "document": i.document}
                for i in self.items
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], mode: SurfaceMode = SurfaceMode.PIN) -> Surface:
        """A surface read back from :meth:`to_json`'s output. Raises (KeyError, TypeError,
        ValueError) on anything else."""
        items = tuple(
            SurfaceItem(
                kind=str(raw["kind"]),
                name=str(raw["name"]),
                digest=str(raw["digest"]),
                document=raw["document"] if isinstance(raw["document"], dict) else None,
            )
            for raw in data["items"]
        )
        return cls(items, str(data["digest"]), mode, int(data.get("dropped", 0)))


def build_surface(
    items: Iterable[tuple[str, str, Mapping[str, Any]]],
    mode: SurfaceMode = SurfaceMode.PIN,
) -> Surface:
    """The surface of ``(kind, name, document)`` triples. A later triple with the same kind and
    name replaces an earlier one (a server that lists a name twice is judged by the probe).
    Raises ValueError or RecursionError for a document JSON cannot carry."""
    unique: dict[tuple[str, str], Mapping[str, Any]] = {}
    for kind, name, document in items:
        unique[(kind, name)] = document
    built: list[SurfaceItem] = []
    dropped = 0
    for kind, name in sorted(unique):
        document = unique[(kind, name)]
        digest = _digest(canonical_json(document))
        if len(built) - dropped < MAX_ITEMS:
            kept: Mapping[str, Any] | None = _bounded(_normal(dict(document)))
        else:
            kept, dropped = None, dropped + 1
        built.append(SurfaceItem(kind, name, digest, kept))
    whole = _digest(canonical_json([[i.kind, i.name, i.digest] for i in built]))
    return Surface(tuple(built), whole, mode, dropped)
