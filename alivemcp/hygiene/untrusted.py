"""Making text that came from a target safe, once, where a result enters the engine.

A target decides what a probe sees, and probes pass some of it on: a server's name into a
label, an error body into a reason, a whole answer into ``details``. Each consumer (the
Prometheus exposition, the JSON API, logs, alert messages, the state file) needs the same
guarantees, so the runner applies them once to every result:

* every string is encodable as UTF-8: lone surrogates (valid in JSON as ``"\\udc80"``, fatal
  to ``str.encode``) become U+FFFD;
* control characters other than tab and newline become U+FFFD (they corrupt terminals and
  log lines); labels lose newlines too;
* lengths are capped (a label is an index key in Prometheus; a reason is one line of a page);
* ``details`` is bounded in depth, items and total size, so a hostile answer copied there
  cannot blow up ``/status``.

Text that is itself the subject (a tool's description, a server's instructions: written by the
target for someone else's model) must not be silently repaired but shown as it is, made inert:
:func:`inert_text` turns every invisible or direction-changing character into a visible escape
(``<U+202E>``), and :func:`slack_escape` keeps such text from mentioning, linking or formatting
in a Slack message.

Nearly every string is already safe (printable ASCII), and a dozen pass here per probe run:
one ``isascii()`` and one ``isprintable()`` (C loops) clear them, where the character-class
search alone cost ~5,000 instructions per 60 characters (measured with callgrind,
``benchmarks/runner_finish.py``). Anything else gets the full substitution, as before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from alivemcp.hygiene.redact import REDACTED, is_secret_key, redact_text

__all__ = [
    "MAX_LABEL",
    "MAX_REASON",
    "clean_details",
    "clean_label",
    "clean_text",
    "inert_json",
    "inert_text",
    "slack_escape",
    "slack_inert",
]

MAX_LABEL = 256
MAX_REASON = 1000
_MAX_DETAIL_STRING = 4000
_MAX_DEPTH = 8
_MAX_ITEMS = 200
_MAX_DETAIL_CHARS = 100_000

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_LABEL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_ELLIPSIS = "…"


def clean_text(value: str, limit: int = MAX_REASON) -> str:
    # Printable ASCII holds no unsafe character (it has neither controls nor surrogates).
    if not (value.isascii() and value.isprintable()) and _UNSAFE.search(value):
        value = _UNSAFE.sub("\ufffd", value)
    return value if len(value) <= limit else value[: limit - 1] + _ELLIPSIS


def clean_label(value: str) -> str:
    if not (value.isascii() and value.isprintable()) and _UNSAFE_LABEL.search(value):
        value = _UNSAFE_LABEL.sub("\ufffd", value)
    return value if len(value) <= MAX_LABEL else value[: MAX_LABEL - 1] + _ELLIPSIS


def clean_details(value: Mapping[str, Any], *, redacted: bool = False) -> dict[str, Any]:
    """``value`` bounded and cleaned (see the module docstring). ``redacted``: also what
    :func:`alivemcp.hygiene.redact.redact` makes of that, in the same walk (the runner's boundary:
    one walk of every result's details instead of two)."""
    budget = [_MAX_DETAIL_CHARS]
    cleaned = _clean(value, 0, budget, redacted)
    return cleaned if isinstance(cleaned, dict) else {"value": cleaned}


def _clean(value: Any, depth: int, budget: list[int], redacted: bool) -> Any:
    # With ``redacted``, each value comes out as ``redact(cleaned value, key=its cleaned
    # key)`` would make it: strings through redact_text, a non-empty value under a
    # secret-looking key replaced whole (decided after cleaning, as redact would).
    if budget[0] <= 0:
        return _ELLIPSIS
    if isinstance(value, str):
        text = clean_text(value, min(_MAX_DETAIL_STRING, max(budget[0], 1)))
        budget[0] -= len(text)
        return redact_text(text) if redacted else text
    if value is None or isinstance(value, bool | int):
        budget[0] -= 8
        return value
    if isinstance(value, float):
        budget[0] -= 8
        if math.isfinite(value):
            return value
        return redact_text(str(value)) if redacted else str(value)  # JSON has no NaN/Infinity
    if depth >= _MAX_DEPTH:
        return _ELLIPSIS
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= _MAX_ITEMS or budget[0] <= 0:
                out[_ELLIPSIS] = f"{len(value) - i} more"
                break
            key = clean_text(str(k), MAX_LABEL)
            budget[0] -= len(key)
            item = _clean(v, depth + 1, budget, redacted)
            if redacted and is_secret_key(key) and item not in (None, "", [], {}):
                item = REDACTED
            out[key] = item
        return out
    if isinstance(value, list | tuple):
        items = []
        for i, v in enumerate(value):
            if i >= _MAX_ITEMS or budget[0] <= 0:
                items.append(f"{_ELLIPSIS} {len(value) - i} more")
                break
            items.append(_clean(v, depth + 1, budget, redacted))
        return items
    text = clean_text(str(value), _MAX_DETAIL_STRING)
    return redact_text(text) if redacted else text


# -- inert text: attacker-controlled prose shown as it is, with nothing hidden -----------------

#: Characters that are invisible, change the direction of what follows, or are not characters
#: at all: controls (tab, newline and carriage return are handled apart), lone surrogates,
#: every format character (Cf: zero-width, bidirectional embeddings, overrides and isolates,
#: the BOM, interlinear annotation, the Unicode tag block), line and paragraph separators and
#: the other default-ignorable code points (variation selectors, Hangul fillers, the Mongolian
#: free variation selectors, U+E0000-U+E0FFF). Ranges are a superset of Unicode 15's Cf.
_INVISIBLE = (
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f"
    "\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ud800-\udfff"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff"
)
#: A visible character outside ASCII: the neighbour that makes a joiner or a variation
#: selector legitimate (emoji sequences such as U+2764 U+FE0F, ZWJ families, Persian ZWNJ).
_VISIBLE_WIDE = f"[^\\x00-\\x7f{_INVISIBLE}]"
_INERT = re.compile(
    # Kept as they are (the ``keep`` alternatives, tried first): one joiner between two visible
    # non-ASCII characters; one variation selector U+FE00-U+FE0F right after one. A second
    # selector in a row, or one after ASCII (how "emoji smuggling" hides bytes), is escaped.
    f"(?P<keep>(?<={_VISIBLE_WIDE})[\\u200c\\u200d](?={_VISIBLE_WIDE})"
    f"|(?<={_VISIBLE_WIDE})[\\ufe00-\\ufe0f])"
    f"|[\\t\\n\\r{_INVISIBLE}]+"
)
_BREAKS = frozenset("\t\n\r\u2028\u2029")
_ESCAPE_TAIL = re.compile(r"<U?\+?[0-9A-F]{0,6}$")


def _escape_run(run: str, one_line: bool) -> str:
    out: list[str] = []
    for i, char in enumerate(run):
        if one_line and char in _BREAKS:
            if not out or out[-1] != " ":
                out.append(" ")  # a run of line breaks and tabs is one space
        elif char == "\n" or char == "\t":
            out.append(char)
        elif char in "\u2028\u2029":
            out.append("\n")
        elif char == "\r" and run[i + 1 : i + 2] == "\n":
            continue  # CRLF is a newline; a lone CR (which rewrites a terminal line) is not
        else:
            out.append(f"<U+{ord(char):04X}>")
    return "".join(out)


def inert_text(value: str, limit: int = MAX_REASON, *, one_line: bool = True) -> str:
    """``value`` (text a target wrote) made inert for alerts, logs, the API and status pages.

    Guarantees, whatever ``value`` holds:

    * nothing is hidden: every control character, lone surrogate, format character (Cf:
      zero-width, bidi embeddings/overrides/isolates, the BOM, the tag block U+E0000-U+E007F),
      variation selector and other default-ignorable code point is shown as a visible escape
      such as ``<U+202E>``, so the result holds no control, format (but the two below) or
      surrogate character and encodes as UTF-8; spaces such as U+00A0 stay spaces. Kept,
      because they cannot hide text: a ZWJ/ZWNJ between two visible non-ASCII characters
      and one variation selector after a visible non-ASCII character (emoji, Persian);
    * ``one_line`` (the default): tabs, newlines, CR and U+2028/U+2029 become spaces (a run of
      them one space), so the text cannot start a line of its own in a log or a page; else
      newline and tab stay, CRLF becomes a newline and a lone CR an escape;
    * at most ``limit`` characters, the last of a cut text being ``…`` (an escape is never cut
      in half).

    It does not escape markup (``<``, ``&``, ``*``): HTML templates and JSON encoders do that
    for their format, :func:`slack_escape` for Slack's."""
    if limit < 1:
        return ""
    cut = len(value) > limit
    if cut:
        value = value[:limit]  # every character becomes at least one character
    if not (value.isascii() and value.isprintable()) and _INERT.search(value):
        value = _INERT.sub(
            lambda m: m[0] if m["keep"] else _escape_run(m[0], one_line),
            value,
        )
    if not cut and len(value) <= limit:
        return value
    value = value[: limit - 1]
    partial = _ESCAPE_TAIL.search(value[-9:]) if "<" in value[-9:] else None
    if partial is not None:
        value = value[: len(value) - (len(value[-9:]) - partial.start())]
    return value + _ELLIPSIS


#: Slack mrkdwn: ``*bold*``, ``~strike~`` and code spans open on these; their lookalikes show
#: the same shape and format nothing (no zero-width character is inserted: see inert_text).
_SLACK_LOOKALIKES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "\u2217", "~": "\u223c", "`": "\u02cb"}
)
#: ``_italic_`` opens only at a word's edge: an underscore inside a word (``read_file``) stays.
_SLACK_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_SLACK_BROADCAST = re.compile(r"(?<![\w.])@(?=(?:here|channel|everyone|all)\b)", re.IGNORECASE)
_ENTITY_TAIL = re.compile(r"&[a-z]{0,3}$")


def slack_escape(text: str) -> str:
    """``text`` safe inside a Slack mrkdwn message: ``&``, ``<`` and ``>`` escaped as Slack
    asks (so no ``<!channel>``, ``<!here>``, ``<@U…>``, ``<#C…>`` or ``<url|text>`` link can
    form, and ``>`` cannot start a quote); ``*``, ``~`` and backquote replaced by lookalikes
    (U+2217, U+223C, U+02CB) and ``_`` at a word's edge by U+FF3F, so no bold, strike, code or
    italic; ``@here``, ``@channel``, ``@everyone`` and ``@all`` written with a fullwidth
    U+FF20 at sign, so they notify nobody. A bare URL stays text Slack may still link: it
    shows its own target, never a disguised one. Apply it to :func:`inert_text`'s output (or
    use :func:`slack_inert`)."""
    text = text.translate(_SLACK_LOOKALIKES)
    if "_" in text:
        text = _SLACK_UNDERSCORE.sub("\uff3f", text)
    if "@" in text:
        text = _SLACK_BROADCAST.sub("\uff20", text)
    return text


def slack_inert(value: str, limit: int = MAX_REASON, *, one_line: bool = True) -> str:
    """:func:`inert_text` then :func:`slack_escape`, still at most ``limit`` characters (an
    entity such as ``&amp;`` is never cut in half)."""
    text = slack_escape(inert_text(value, limit, one_line=one_line))
    if len(text) <= limit:
        return text
    text = text[: limit - 1]
    partial = _ENTITY_TAIL.search(text[-4:])
    if partial is not None:
        text = text[: len(text) - (len(text[-4:]) - partial.start())]
    return text + _ELLIPSIS


#: :func:`inert_json`'s bounds: characters of one string, and of all strings of one answer.
MAX_INERT_STRING = 4_000
MAX_INERT_TOTAL = 1_000_000


def inert_json(value: Any, budget: list[int] | None = None, limit: int = MAX_INERT_STRING) -> Any:
    """A copy of ``value`` (JSON data) with every string, keys included, made inert and capped
    at ``limit`` characters; ``budget`` (a one-item list, spent as strings are written) bounds
    the whole: once spent, strings become ``"…"``."""
    if budget is None:
        budget = [MAX_INERT_TOTAL]
    if isinstance(value, str):
        if budget[0] <= 0:
            return "…"
        # Newlines stay: descriptions are prose; everything invisible shows as an escape.
        text = inert_text(value, max(1, min(limit, budget[0])), one_line=False)
        budget[0] -= len(text)
        return text
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = inert_text(str(key), 200)
            while name in out:  # two keys made alike by escaping: keep both
                name += "\u2032"
            budget[0] -= len(name)
            out[name] = inert_json(item, budget, limit)
        return out
    if isinstance(value, list | tuple):
        return [inert_json(item, budget, limit) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return inert_text(repr(value), 200)
