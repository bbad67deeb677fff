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

__all__ = ["MAX_LABEL", "MAX_REASON", "clean_details", "clean_label", "clean_text"]

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
