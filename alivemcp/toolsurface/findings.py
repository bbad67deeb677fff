"""Signs of tool poisoning in a surface, found by reading it (no model involved).

:func:`find` reads every kept item of a surface (tools, the instructions, prompts, resources)
and returns :class:`Finding` s, at most one per rule and item (the worst match; the message
counts the others), most severe first. The rule names are an interface (metrics, the API,
alert texts and docs/tool-surface.md use them):

``invisible_characters``
    Characters that hide text or reorder it, in any string of the item (names, descriptions,
    schema descriptions and property names, the instructions). *critical*: the Unicode tag
    block (text a model reads and a person does not; the hidden ASCII is decoded into the
    message), bidi overrides and embeddings (U+202A-U+202E), runs of variation selectors
    ("emoji smuggling"); *warning*: zero-width characters, word joiners, bidi isolates, a lone
    variation selector after ASCII, joiners and direction marks with ASCII on both sides.
    Not flagged: emoji sequences (a joiner or selector beside a visible non-ASCII character),
    Persian/Indic joiners, RTL marks inside RTL text, keycaps, subdivision flags.
``model_directives``
    Instructions aimed at the model: *critical* "ignore (all) previous instructions" and
    orders to keep something from the user ("do not tell the user", "without informing the
    user", "hide this from the user"); *warning* system-style blocks (``<IMPORTANT>``,
    ``<SYSTEM>``, chat-template tokens), attempts to re-instruct the model ("reveal your
    system prompt", "you are now ..."), "before using this tool, read/send ..." with something
    local in the same sentence; *info* absolute orders ("you must always ...").
``tool_shadowing``
    *warning*: a description that makes another tool of the same surface something to avoid,
    replace or condition ("instead of `X`", "when X is called", "before calling X", "never use
    X", "replaces X"), or conditions a tool this server does not offer when it calls it a
    tool ("when the send_email tool is called": another server's tool). A plain reference
    ("use `read_text_file` instead") is not flagged: servers point models at their own tools.
``secret_paths``
    Requests for local secrets. *critical*: a secret path (``~/.ssh``, ``id_rsa``,
    ``~/.aws/credentials``, ``mcp.json``, ``.netrc``, a PEM private-key header, ...) with a
    request verb in the imperative ("read", "send", "include", "contents of") in the same
    sentence; *warning*: such a path mentioned without one, ``.env``/private keys with a
    request verb, a schema property named like a secret whose description sends the model to
    a local source ("read it from ~/.config", "contents of the env file").
``oversized_description``
    *warning*: a tool whose text (its description and every description in its schemas) is
    over 10,000 characters, or over 2,000 and more than 4 times the surface's median; the
    instructions over 10,000 characters.

Phrase rules read each string lower-cased, with invisible characters removed and
NFKC-normalised (``ig<U+200B>nore`` and fullwidth letters are read as ``ignore``), and the text
hidden in tag characters or variation selectors as a string of its own. Everything a finding
shows is inert and bounded. ``Finding.item`` is the item's key as the server named it: show
it through ``inert_text``.

Cost (``benchmarks/surface_findings.py --synthetic``, CPU): a surface of 10,000 tools as the
contract keeps it (2,000 documents) is read in 0.12 s with realistic descriptions, 0.2 s with
prose made only of the rules' trigger words; all 10,000 documents would take 0.65 s (1.1 s).
Every pattern is linear in its text, and the strings of the whole surface are joined and
scanned once (see :mod:`alivemcp.toolsurface._patterns`).
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from alivemcp.hygiene.untrusted import inert_text
from alivemcp.surface import Surface, SurfaceItem
from alivemcp.toolsurface import _patterns as p
from alivemcp.toolsurface._text import true_length

__all__ = ["RULES", "SEVERITIES", "Finding", "find"]

#: Rule name → what it flags (one line; docs/tool-surface.md has the long form).
RULES: dict[str, str] = {
    "invisible_characters": "characters that hide or reorder text",
    "model_directives": "instructions aimed at the model",
    "tool_shadowing": "a description that redirects or conditions another tool",
    "secret_paths": "a request for local secrets",
    "oversized_description": "a description far longer than its peers",
}
SEVERITIES = ("critical", "warning", "info")
_RANK = {severity: i for i, severity in enumerate(SEVERITIES)}
#: Bounds on what one item's reading costs (the contract bounds each string and the depth).
_MAX_STRINGS = 4_000
_MAX_DEPTH = 16
_MESSAGE = 300
_EVIDENCE = 160
_SEP = "\x00"
OVERSIZED_ABSOLUTE = 10_000
OVERSIZED_RELATIVE = 2_000
OVERSIZED_FACTOR = 4


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's worst match in one item: ``item`` is the item's key (``tool:name``, raw),
    ``message`` and ``evidence`` (an excerpt around the match) are inert and bounded."""

    rule: str
    severity: str
    item: str
    message: str
    evidence: str


@dataclass(slots=True)
class _Item:
    item: SurfaceItem
    strings: list[tuple[str, str]]  # (path, raw text): values, and property names
    prose_length: int  # characters of its descriptions, as the server sent them
    hits: dict[p.Phrase, list[re.Match[str]]] = field(default_factory=dict)  # in _Corpus


@dataclass(slots=True)
class _Corpus:
    """Every kept item's strings as the phrase rules read them, joined by NUL into one text:
    one lower-casing and one :func:`~alivemcp.toolsurface._patterns.scan` for the whole
    surface (no pattern crosses a NUL, so none crosses an item's edge), each match then
    handed to its item. ``low`` is ``joined`` lower-cased character for character (the same
    offsets); ``starts`` and ``paths``: where each string starts and its path."""

    joined: str
    low: str
    starts: list[int]
    paths: list[str]

    @classmethod
    def read(cls, items: list[_Item]) -> _Corpus:
        parts: list[str] = []
        starts: list[int] = []
        paths: list[str] = []
        firsts: list[int] = []  # where each item's text starts
        at = 0
        for item in items:
            firsts.append(at)
            for path, raw in item.strings:
                # Nearly every string is ASCII, read as it is; see _readable for the others.
                for where, text in [(path, raw)] if raw.isascii() else _readable(path, raw):
                    parts.append(text)
                    starts.append(at)
                    paths.append(where)
                    at += len(text) + 1
        joined = _SEP.join(parts)
        low = joined.lower()
        if len(low) != len(joined):  # "İ" lowers to two characters: keep such ones
            low = "".join(c if len(c.lower()) != 1 else c.lower() for c in joined)
        for phrase, matches in p.scan(low).items():
            for match in matches:
                owner = items[bisect_right(firsts, match.start()) - 1]
                owner.hits.setdefault(phrase, []).append(match)
        return cls(joined, low, starts, paths)

    def path_at(self, offset: int) -> str:
        return self.paths[max(0, bisect_right(self.starts, offset) - 1)]

    def excerpt(self, start: int, end: int) -> str:
        left = max(self.joined.rfind(_SEP, 0, start) + 1, start - 50)
        right = self.joined.find(_SEP, end)
        right = min(right if right >= 0 else len(self.joined), end + 60)
        text = ("…" if left > 0 and self.joined[left - 1] != _SEP else "") + self.joined[left:right]
        return inert_text(text, _EVIDENCE)


def find(surface: Surface) -> list[Finding]:
    """Every rule over every kept item of ``surface``: most severe first, then by item."""
    items = [_collect(item) for item in surface.items if item.document is not None]
    corpus = _Corpus.read(items)
    tool_names = {i.item.name for i in items if i.item.kind == "tool"}
    folded = {name.casefold(): name for name in tool_names}
    prose = [i.prose_length for i in items if i.item.kind == "tool"]
    median = statistics.median(prose) if prose else 0.0
    found: list[Finding] = []
    for item in items:
        for finding in (
            _invisible(item),
            _directives(item, corpus),
            _shadowing(item, corpus, folded),
            _secrets(item, corpus),
            _oversized(item, median),
        ):
            if finding is not None:
                found.append(finding)
    found.sort(key=lambda f: (_RANK.get(f.severity, len(_RANK)), f.item, f.rule))
    return found


# -- reading an item -----------------------------------------------------------------------------


def _collect(item: SurfaceItem) -> _Item:
    """The item's strings, (path, text): every string value, every property name (and any
    key outside ASCII), breadth-first down to _MAX_DEPTH, at most _MAX_STRINGS of them; and the
    length of its descriptions as the server sent them. A loop, not a recursive generator,
    and concrete types (build_surface makes every nested mapping a dict): this is the bulk of
    reading a large surface."""
    strings: list[tuple[str, str]] = []
    prose = 0
    queue: deque[tuple[str, Any, int]] = deque([("", item.document or {}, 0)])
    while queue and len(strings) < _MAX_STRINGS:
        path, value, depth = queue.popleft()
        pairs = enumerate(value) if isinstance(value, list) else value.items()
        names = path.endswith("properties")
        for key, sub in pairs:
            if len(strings) >= _MAX_STRINGS:
                break
            if isinstance(key, int):
                where = f"{path}[{key}]"
            else:
                where = f"{path}.{key}" if path else key
                if names or not key.isascii():  # property names, and any odd key
                    strings.append((f"{where} (name)", key))
            if isinstance(sub, str):
                strings.append((where, sub))
                if key == "description" or where == "instructions":
                    prose += true_length(sub)
            elif depth < _MAX_DEPTH and isinstance(sub, dict | list):
                queue.append((where, sub, depth + 1))
    return _Item(item, strings[:_MAX_STRINGS], prose)


def _readable(path: str, raw: str) -> Iterator[tuple[str, str]]:
    """How the phrase rules read one string outside ASCII: without its hiding characters and
    NFKC-normalised; and the text hidden in tag characters or variation selectors as strings
    of their own."""
    yield path, unicodedata.normalize("NFKC", p.HIDING.sub("", raw))
    hidden = _tag_text(raw)
    if hidden:
        yield f"{path} (hidden in tag characters)", hidden
    hidden = _selector_text(raw)
    if hidden:
        yield f"{path} (hidden in variation selectors)", hidden


def _tag_text(raw: str) -> str:
    if not any("\U000e0000" <= c <= "\U000e007f" for c in raw):
        return ""
    raw = p.FLAG_SEQUENCE.sub("", raw)
    return "".join(chr(ord(c) - 0xE0000) for c in raw if "\U000e0020" <= c <= "\U000e007e")


_SELECTOR_RUN = re.compile("[\\ufe00-\\ufe0f\\U000e0100-\\U000e01ef]{2,}")


def _selector_text(raw: str) -> str:
    """Bytes hidden in runs of variation selectors ("emoji smuggling": U+FE00-U+FE0F carry
    0-15, U+E0100-U+E01EF 16-255), decoded as UTF-8."""
    if not any("\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef" for c in raw):
        return ""
    data = bytearray()
    for run in _SELECTOR_RUN.findall(raw):
        data += bytes(ord(c) - 0xFE00 if c <= "\ufe0f" else ord(c) - 0xE0100 + 16 for c in run)
    return data.decode("utf-8", errors="replace")


def _finding(rule: str, severity: str, item: _Item, message: str, evidence: str) -> Finding:
    return Finding(
        rule,
        severity,
        item.item.key,
        inert_text(message, _MESSAGE),
        inert_text(evidence, _EVIDENCE),
    )


@dataclass(frozen=True, slots=True)
class _Match:
    """One match of a rule: where in the item's text (``start``/``end``), or, for a match found
    in one raw string, its ``path`` and ``evidence``."""

    severity: str
    what: str
    start: int = 0
    end: int = 0
    path: str | None = None
    evidence: str | None = None


def _worst(matches: list[_Match], item: _Item, rule: str, corpus: _Corpus) -> Finding | None:
    """One finding from the matches: the most severe, first in the text; the message counts
    the rest."""
    if not matches:
        return None
    worst = min(matches, key=lambda m: (_RANK[m.severity], m.start))
    path = worst.path if worst.path is not None else corpus.path_at(worst.start)
    message = f"{worst.what} in {path}"
    if len(matches) > 1:
        message += f" (and {len(matches) - 1} more)"
    evidence = worst.evidence
    if evidence is None:
        evidence = corpus.excerpt(worst.start, worst.end)
    return _finding(rule, worst.severity, item, message, evidence)


# -- the rules -----------------------------------------------------------------------------------

_INVISIBLE_CLASSES = {
    # group: (severity, what)
    "tags": ("critical", "Unicode tag characters"),
    "override": ("critical", "bidi override/embedding"),
    "selectors": ("critical", "a run of variation selectors"),
    "isolate": ("warning", "bidi isolate"),
    "selector": ("warning", "a variation selector after ASCII"),
    "zero_width": ("warning", "zero-width character"),
    "joiner": ("warning", "zero-width joiner or direction mark between ASCII"),
}


def _invisible(item: _Item) -> Finding | None:
    counts: dict[str, int] = {}
    first: tuple[int, str, str, int] | None = None  # (rank, path, text, offset)
    for path, raw in item.strings:
        if raw.isascii():
            continue
        text = p.FLAG_SEQUENCE.sub("", raw) if "\U0001f3f4" in raw else raw
        for match in p.HIDDEN.finditer(text):
            group = str(match.lastgroup)
            counts[group] = counts.get(group, 0) + len(match[0])
            rank = _RANK[_INVISIBLE_CLASSES[group][0]]
            if first is None or rank < first[0]:
                first = (rank, path, text, match.start())
    if first is None:
        return None
    rank, path, text, at = first
    parts = [f"{n} x {_INVISIBLE_CLASSES[g][1]}" for g, n in sorted(counts.items())]
    message = f"hidden characters in {path}: " + ", ".join(parts)
    hidden = _tag_text(text) or _selector_text(text)
    if hidden:
        message += f'; hidden text: "{hidden}"'
    evidence = ("…" if at > 30 else "") + text[max(0, at - 30) : at + 120]
    return _finding("invisible_characters", SEVERITIES[rank], item, message, evidence)


def _directives(item: _Item, corpus: _Corpus) -> Finding | None:
    matches: list[_Match] = []
    for phrase in p.DIRECTIVES:
        for m in item.hits.get(phrase, ()):
            matches.append(_Match(phrase.severity, phrase.what, m.start(), m.end()))
    for m in item.hits.get(p.BEFORE_TOOL, ()):
        rest = m[0][m[0].find("tool") :]
        if p.BEFORE_TOOL_VERB.search(rest) and p.BEFORE_TOOL_OBJECT.search(rest):
            what = '"before using this tool" with a request to read or send something local'
            matches.append(_Match("warning", what, m.start(), m.end()))
    return _worst(matches, item, "model_directives", corpus)


def _shadowing(item: _Item, corpus: _Corpus, tools: Mapping[str, str]) -> Finding | None:
    """Only a tool's own text may be judged for naming its siblings: the instructions, prompts
    and resources of a server orchestrate its tools by design, so there only a tool the server
    does not offer counts."""
    own = item.item.name if item.item.kind == "tool" else None
    matches: list[_Match] = []
    for n, phrase in enumerate(p.SHADOWING):
        for m in item.hits.get(phrase, ()):
            group = next(f"t{n}{g}" for g in "qdsb" if m[f"t{n}{g}"])
            token = corpus.joined[m.start(group) : m.end(group)].rstrip(".,:;/-")
            name = tools.get(token.casefold())
            if name is not None:
                if own is not None and name != own:
                    what = f"another tool ({name}) avoided, replaced or conditioned"
                    matches.append(_Match("warning", what, m.start(), m.end()))
            elif n == 1 and m[f"t{n}tool"] and (group[-1] != "b" or _identifier_like(token)):
                what = f"a tool this server does not offer ({token}) conditioned"
                matches.append(_Match("warning", what, m.start(), m.end()))
    return _worst(matches, item, "tool_shadowing", corpus)


_IDENTIFIER = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*")


def _identifier_like(token: str) -> bool:
    """``send_email``, ``send-email``, ``sendEmail``: a name, not a word of prose."""
    return _IDENTIFIER.fullmatch(token) is not None


def _sentence(joined: str, start: int, end: int) -> str:
    """The sentence around [start, end) (bounded: 200 characters each side)."""
    left = start - 200 if start > 200 else 0
    for stop in (".", "!", "?", "\n", _SEP):
        at = joined.rfind(stop, left, start)
        if at >= 0:
            left = max(left, at + 1)
    right = min(len(joined), end + 200)
    for stop in (". ", "!", "?", "\n", _SEP):
        at = joined.find(stop, end, right)
        if at >= 0:
            right = at
    return joined[left:right]


def _secrets(item: _Item, corpus: _Corpus) -> Finding | None:
    low = corpus.low
    matches: list[_Match] = []
    for m in item.hits.get(p.SECRET_STRONG, ()):
        asked = p.REQUEST_VERB.search(_sentence(low, m.start(), m.end()))
        severity = "critical" if asked else "warning"
        what = f"{'a request for' if asked else 'a mention of'} a local secret ({m[0]})"
        matches.append(_Match(severity, what, m.start(), m.end()))
    for m in item.hits.get(p.SECRET_WEAK, ()):
        if p.REQUEST_VERB.search(_sentence(low, m.start(), m.end())):
            matches.append(_Match("warning", f"a request for {m[0]}", m.start(), m.end()))
    for path, raw in item.strings:
        # A property named like a secret, whose description sends the model to a local source.
        if not path.endswith(".description") or ".properties." not in path:
            continue
        prop = path[: -len(".description")].rpartition(".")[2]
        if p.SECRET_NAME.search(prop) and p.LOCAL_SOURCE.search(raw.lower()):
            what = f"a secret-named property ({prop}) to be filled from a local source"
            matches.append(_Match("warning", what, len(low), path=path, evidence=raw))
    return _worst(matches, item, "secret_paths", corpus)


def _oversized(item: _Item, median: float) -> Finding | None:
    length = item.prose_length
    kind = item.item.kind
    if length > OVERSIZED_ABSOLUTE:
        why = f"over {OVERSIZED_ABSOLUTE:,} characters"
    elif kind == "tool" and length > OVERSIZED_RELATIVE and length > OVERSIZED_FACTOR * median:
        why = f"{length / max(median, 1):.0f} times the median tool's {median:,.0f}"
    else:
        return None
    first = next((raw for path, raw in item.strings if path.endswith("description")), "")
    if kind == "instructions":
        first = next((raw for path, raw in item.strings if path == "instructions"), first)
    message = f"{length:,} characters of description ({why})"
    return _finding("oversized_description", "warning", item, message, first)
