"""Small text helpers shared by the surface diff and the findings: a bounded word-level diff and
short inert renderings of server-supplied values. Everything returned here is inert
(:func:`alivemcp.hygiene.untrusted.inert_text`) and bounded."""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any

from alivemcp.hygiene.untrusted import inert_text
from alivemcp.surface import MAX_STRING, canonical_json

__all__ = ["ABSENT", "short", "true_length", "word_diff"]


class _Absent:
    """The value of a key one side of a comparison does not have (shown as ``absent``)."""

    def __repr__(self) -> str:
        return "absent"


ABSENT: Any = _Absent()
#: Words of one changed stretch that are diffed word by word; longer stretches (a rewrite)
#: are shown as replaced whole: SequenceMatcher is quadratic in the worst case.
_MAX_DIFF_WORDS = 400
#: Words of context around each change, and words shown of one removed or added run.
_CONTEXT = 3
_RUN_WORDS = 12
_WORD_LIMIT = 40
#: The marker alivemcp.surface leaves where it cut a long string.
_CUT_MARK = re.compile(r"…\[(\d+) more characters\]$")


def true_length(text: str) -> int:
    """The length of the string the server sent: a kept string cut at MAX_STRING says how many
    characters were left out."""
    if len(text) > MAX_STRING:
        mark = _CUT_MARK.search(text, MAX_STRING)
        if mark is not None:
            return MAX_STRING + int(mark[1])
    return len(text)


def short(value: Any, limit: int = 60) -> str:
    """``value`` as a short inert one-line text: strings quoted, anything else as JSON."""
    if value is ABSENT:
        return "absent"
    if isinstance(value, str):
        return '"' + inert_text(value, max(limit - 2, 1)) + '"'
    try:
        text = canonical_json(value)
    except (ValueError, TypeError, RecursionError):
        text = repr(type(value))
    return inert_text(text, limit)


def _words(words: list[str]) -> str:
    return " ".join(inert_text(w, _WORD_LIMIT) for w in words)


def _run(words: list[str], open_mark: str, close_mark: str) -> str:
    shown = _words(words[:_RUN_WORDS])
    if len(words) > _RUN_WORDS:
        shown += f" …(+{len(words) - _RUN_WORDS} words)"
    return f"{open_mark}{shown}{close_mark}"


def word_diff(old: str, new: str, limit: int = 300) -> str:
    """A short word-level diff of two texts: ``… context [-removed words-] {+added words+}
    context …``, at most ``limit`` characters. Words are split on whitespace, so a change of
    layout alone reads ``(whitespace only)``; invisible characters show as escapes."""
    a, b = old.split(), new.split()
    if a == b:
        return "(whitespace only)"
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    opcodes: list[tuple[str, int, int, int, int]] = [("replace", 0, len(a_mid), 0, len(b_mid))]
    if len(a_mid) <= _MAX_DIFF_WORDS and len(b_mid) <= _MAX_DIFF_WORDS:
        opcodes = list(SequenceMatcher(None, a_mid, b_mid, autojunk=False).get_opcodes())
    pieces: list[str] = []
    if head:
        lead = a[max(0, head - _CONTEXT) : head]
        pieces.append(("… " if head > _CONTEXT else "") + _words(lead))
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            same = a_mid[i1:i2]
            if len(same) <= 2 * _CONTEXT:
                pieces.append(_words(same))
            else:
                pieces.append(f"{_words(same[:_CONTEXT])} … {_words(same[-_CONTEXT:])}")
            continue
        if i2 > i1:
            pieces.append(_run(a_mid[i1:i2], "[-", "-]"))
        if j2 > j1:
            pieces.append(_run(b_mid[j1:j2], "{+", "+}"))
    if tail:
        trail = a[len(a) - tail : len(a) - tail + _CONTEXT]
        pieces.append(_words(trail) + (" …" if tail > _CONTEXT else ""))
    # Already inert: this only caps it, without cutting an escape in half.
    return inert_text(" ".join(p for p in pieces if p), limit)
