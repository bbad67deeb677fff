"""What changed between two surfaces, per item, in words a person reads in an alert.

:func:`diff_surfaces` compares items by key (kind and name): an item only one side has is
``added`` or ``removed``; one whose digest differs is ``changed``, with notes that say how:

* a tool: its description (a short word-level diff, ``[-old words-] {+new words+}``), title,
  ``inputSchema``/``outputSchema`` (properties added or removed, required-ness, types,
  descriptions and other keywords, walked into nested ``properties`` and ``items`` with paths
  such as ``args.path`` and ``paths[]``), annotations (each hint old → new; the ones that make
  a tool more dangerous are marked ``(risky)`` and set :attr:`ItemChange.risky`) and any other
  field;
* the instructions, a prompt's or a resource's description: a word diff; other fields old →
  new;
* an item whose document one side did not keep (the surface's item cap): ``changed (details
  not kept)``.

Equal digests mean no change, whatever else differs. Every note is made of inert text
(:func:`alivemcp.hygiene.untrusted.inert_text`) and bounded: a note at most ~300 characters,
an item at most :data:`MAX_NOTES` notes. :attr:`ItemChange.name` is the server's name as it
is (it identifies the item); :meth:`SurfaceDiff.summary` and :meth:`SurfaceDiff.to_json` show
it inert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alivemcp.hygiene.untrusted import inert_text
from alivemcp.surface import Surface, SurfaceItem
from alivemcp.toolsurface._text import ABSENT, short, word_diff

__all__ = ["MAX_NOTES", "ItemChange", "SurfaceDiff", "diff_surfaces"]

#: Notes kept for one item (the rest are counted in a last note).
MAX_NOTES = 16
#: Nesting of ``properties``/``items`` walked in a schema; deeper changes are named, not shown.
_MAX_SCHEMA_DEPTH = 8
_NAME_LIMIT = 80
_NOTE_LIMIT = 300
_LINE_LIMIT = 600
#: The spec's defaults for the behaviour hints, used when a hint is absent (or not a boolean).
_HINT_DEFAULTS = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
#: Transitions of a hint's effective value that make a tool more dangerous than approved.
_RISKY = {
    ("destructiveHint", False, True),
    ("readOnlyHint", True, False),
    ("openWorldHint", False, True),
}
#: Fields diffed word by word; other string fields are shown old → new.
_PROSE = ("description", "instructions")
_SCHEMAS = ("inputSchema", "outputSchema")
#: The order items are listed in: what most needs a reader's eye first.
_KIND_ORDER = {"instructions": 0, "tool": 1, "prompt": 2, "resource": 3}
_CHANGE_ORDER = {"changed": 0, "removed": 1, "added": 2}


@dataclass(frozen=True, slots=True)
class ItemChange:
    """One item that differs: ``change`` is ``added``, ``removed`` or ``changed``; ``notes``
    (inert, bounded) say how; ``risky`` marks a change that makes a tool more dangerous
    (``destructiveHint`` false → true, ``readOnlyHint`` true → false, ``openWorldHint``
    false → true, judged on the hints' effective values with the spec's defaults)."""

    kind: str
    name: str
    change: str
    notes: list[str] = field(default_factory=list)
    risky: bool = False

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def line(self) -> str:
        """One inert line: ``tool read_file: changed (risky): note; note``."""
        if self.kind == "instructions":  # one per surface: its name says nothing more
            head = f"instructions: {self.change}"
        else:
            head = f"{self.kind} {inert_text(self.name, _NAME_LIMIT)}: {self.change}"
        if self.risky:
            head += " (risky)"
        text = head + (": " + "; ".join(self.notes) if self.notes else "")
        return inert_text(text, _LINE_LIMIT)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": inert_text(self.name, _NAME_LIMIT * 2),
            "change": self.change,
            "risky": self.risky,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class SurfaceDiff:
    """The changes from ``old_digest`` (None: no earlier surface) to ``new_digest``, risky
    ones first, then by kind (instructions, tools, prompts, resources), change (changed,
    removed, added) and name."""

    old_digest: str | None
    new_digest: str
    changes: list[ItemChange]

    @property
    def empty(self) -> bool:
        return not self.changes

    def counts(self) -> dict[str, int]:
        counts = {"added": 0, "removed": 0, "changed": 0}
        for change in self.changes:
            counts[change.change] += 1
        return counts

    def summary(self, limit: int = 1500) -> str:
        """One inert line per changed item, at most ``limit`` characters in all; the items
        that do not fit are counted in a last line ``… and N more``."""
        if not self.changes:
            return "no change"
        lines: list[str] = []
        used = 0
        for i, change in enumerate(self.changes):
            line = change.line()
            after = len(self.changes) - i - 1
            # Keep room for the "and N more" line that follows if a later line does not fit.
            reserve = len(f"\n… and {after} more") if after else 0
            separator = 1 if lines else 0
            if used + separator + len(line) + reserve <= limit:
                lines.append(line)
                used += separator + len(line)
                continue
            if not lines and limit - reserve >= 40:  # a first line too long: what fits of it
                lines.append(inert_text(line, limit - reserve))
                if after:
                    lines.append(f"… and {after} more")
            else:
                lines.append(f"… and {len(self.changes) - i} more")
            break
        return "\n".join(lines)[:limit]

    def to_json(self, max_items: int = 200) -> dict[str, Any]:
        """A bounded, inert JSON form: digests, counts, the first ``max_items`` changes and
        how many were left out (``more``)."""
        return {
            "from": self.old_digest,
            "to": self.new_digest,
            "counts": self.counts(),
            "risky": sum(1 for c in self.changes if c.risky),
            "changes": [c.to_json() for c in self.changes[:max_items]],
            "more": max(0, len(self.changes) - max_items),
        }


def diff_surfaces(old: Surface | None, new: Surface) -> SurfaceDiff:
    """The differences from ``old`` to ``new`` (everything in ``new`` is added when ``old`` is
    None)."""
    before = old.by_key() if old is not None else {}
    after = new.by_key()
    changes: list[ItemChange] = []
    for key, item in after.items():
        was = before.get(key)
        if was is None:
            changes.append(ItemChange(item.kind, item.name, "added", _added_notes(item)))
        elif was.digest != item.digest:
            changes.append(_changed(was, item))
    changes += [
        ItemChange(item.kind, item.name, "removed")
        for key, item in before.items()
        if key not in after
    ]
    changes.sort(
        key=lambda c: (
            not c.risky,
            _KIND_ORDER.get(c.kind, len(_KIND_ORDER)),
            c.kind,
            _CHANGE_ORDER[c.change],
            c.name,
        )
    )
    return SurfaceDiff(old.digest if old is not None else None, new.digest, changes)


def _added_notes(item: SurfaceItem) -> list[str]:
    """What a reader wants of a new item: the start of what it tells the model."""
    doc = item.document or {}
    for key in _PROSE:
        text = doc.get(key)
        if isinstance(text, str) and text.strip():
            return [short(text, 160) if key == "instructions" else f"{key}: {short(text, 160)}"]
    return []


class _Notes:
    """Notes for one item, bounded at MAX_NOTES (the rest counted), and whether any is risky."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.dropped = 0
        self.risky = False

    def add(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(inert_text(text, _NOTE_LIMIT))
        else:
            self.dropped += 1

    def done(self) -> list[str]:
        if self.dropped:
            return [*self.notes, f"… and {self.dropped} more"]
        return self.notes


def _changed(old: SurfaceItem, new: SurfaceItem) -> ItemChange:
    notes = _Notes()
    if old.document is None or new.document is None:
        notes.add("details not kept (the surface had more items than are kept)")
    elif old.document == new.document:
        notes.add(
            "changed beyond what is kept of it (past a long string's cut, or nested too deep)"
        )
    else:
        _compare_documents(old.document, new.document, notes)
    return ItemChange(new.kind, new.name, "changed", notes.done(), notes.risky)


def _compare_documents(old: Mapping[str, Any], new: Mapping[str, Any], notes: _Notes) -> None:
    for key in sorted(set(old) | set(new), key=_field_order):
        a, b = old.get(key, ABSENT), new.get(key, ABSENT)
        if a == b:
            continue
        label = inert_text(str(key), 60)
        if key in _SCHEMAS:
            _compare_schema(label, "", a, b, 0, notes)
        elif key == "annotations":
            _compare_annotations(a, b, notes)
        elif key == "instructions" and isinstance(a, str) and isinstance(b, str):
            notes.add(word_diff(a, b))
        elif key in _PROSE and isinstance(a, str) and isinstance(b, str):
            notes.add(f"{label}: {word_diff(a, b)}")
        elif a is ABSENT or b is ABSENT:
            notes.add(
                f"{label} {'added' if a is ABSENT else 'removed'}: {short(b if a is ABSENT else a)}"
            )
        else:
            notes.add(f"{label}: {short(a)} → {short(b)}")


def _field_order(key: str) -> tuple[int, str]:
    # Risky hints first: a summary cut short must still show them.
    order = ("instructions", "annotations", "description", "title", "inputSchema", "outputSchema")
    return (order.index(key) if key in order else len(order), key)


def _compare_annotations(old: Any, new: Any, notes: _Notes) -> None:
    a = old if isinstance(old, Mapping) else {}
    b = new if isinstance(new, Mapping) else {}
    if not (isinstance(old, Mapping) or old is ABSENT) or not (
        isinstance(new, Mapping) or new is ABSENT
    ):
        notes.add(f"annotations: {short(old)} → {short(new)}")
    risky: list[str] = []
    plain: list[str] = []
    for key in sorted(set(a) | set(b)):
        was, now = a.get(key, ABSENT), b.get(key, ABSENT)
        if was == now:
            continue
        text = f"annotations.{inert_text(str(key), 60)}: {short(was)} → {short(now)}"
        default = _HINT_DEFAULTS.get(key)
        if (
            default is not None
            and (
                key,
                was if isinstance(was, bool) else default,
                now if isinstance(now, bool) else default,
            )
            in _RISKY
        ):
            risky.append(text + " (risky)")
        else:
            plain.append(text)
    notes.risky = notes.risky or bool(risky)
    for text in risky + plain:
        notes.add(text)


def _where(field_name: str, path: str) -> str:
    return f"{field_name} property {path}" if path else field_name


def _type_of(schema: Any) -> str:
    if isinstance(schema, Mapping) and "type" in schema:
        kind = schema["type"]
        return inert_text(kind, 40) if isinstance(kind, str) else short(kind, 40)
    return "untyped"


def _compare_schema(
    field_name: str, path: str, old: Any, new: Any, depth: int, notes: _Notes
) -> None:
    """Notes for one (sub)schema: ``path`` is empty at the root, ``a.b`` for a nested
    property, ``a[]`` for an array's items."""
    where = _where(field_name, path)
    if old is ABSENT or new is ABSENT:
        notes.add(f"{where} {'added' if old is ABSENT else 'removed'}")
        return
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        notes.add(f"{where}: {short(old)} → {short(new)}")
        return
    if depth >= _MAX_SCHEMA_DEPTH:
        notes.add(f"{where}: changed (nested deeper than shown)")
        return
    props_a = _mapping(old.get("properties"))
    props_b = _mapping(new.get("properties"))
    required_a = _names(old.get("required"))
    required_b = _names(new.get("required"))
    for name in sorted(set(props_a) | set(props_b)):
        sub = f"{path}.{inert_text(str(name), 60)}" if path else inert_text(str(name), 60)
        here = f"{field_name} property {sub}"
        if name not in props_a:
            need = ", required" if name in required_b else ""
            notes.add(f"{here} added ({_type_of(props_b[name])}{need})")
        elif name not in props_b:
            notes.add(f"{here} removed")
        else:
            if (name in required_a) != (name in required_b):
                notes.add(
                    f"{here} {'now required' if name in required_b else 'no longer required'}"
                )
            _compare_schema(field_name, sub, props_a[name], props_b[name], depth + 1, notes)
    for name in sorted((required_a ^ required_b) - set(props_a) - set(props_b)):
        change = "now required" if name in required_b else "no longer required"
        notes.add(f"{field_name} required name {inert_text(name, 60)} {change}")
    for key in sorted(set(old) | set(new)):
        if key in ("properties", "required"):
            if key == "properties" and not (
                isinstance(old.get(key, {}), Mapping) and isinstance(new.get(key, {}), Mapping)
            ):
                was, now = short(old.get(key, ABSENT)), short(new.get(key, ABSENT))
                notes.add(f"{where} properties: {was} → {now}")
            continue
        a, b = old.get(key, ABSENT), new.get(key, ABSENT)
        if a == b:
            continue
        label = inert_text(str(key), 60)
        if key == "items" and isinstance(a, Mapping) and isinstance(b, Mapping):
            _compare_schema(field_name, f"{path}[]", a, b, depth + 1, notes)
        elif key in ("description", "title") and isinstance(a, str) and isinstance(b, str):
            notes.add(f"{where} {label}: {word_diff(a, b, 200)}")
        elif key == "type":
            notes.add(
                f"{where} type: {_type_of(old) if a is not ABSENT else 'absent'} → "
                f"{_type_of(new) if b is not ABSENT else 'absent'}"
            )
        else:
            notes.add(f"{where} {label}: {short(a)} → {short(b)}")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> set[str]:
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()
