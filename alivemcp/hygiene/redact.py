"""Secret redaction for everything that leaves the process: logs, results, status, metrics.

Two layers: exact values the config marked secret (every ``SecretStr`` in the loaded config is
registered here), and patterns for secrets that arrive from elsewhere (an ``Authorization``
header echoed in an error, a Slack webhook URL, credentials in a URL's userinfo).

Every result the engine records passes through here (a dozen strings per MCP probe run), so
three shortcuts were written by hand after profiling (callgrind, ``benchmarks/runner_finish.py``):
the case-insensitive patterns cost ~100,000 instructions per 60-character string, a third of
an MCP probe's whole CPU. They never change what is redacted:

* "Could a pattern match?" is first asked with plain substring tests on the lower-cased text
  (:data:`_LITERALS`: every pattern needs one of them); only text holding one gets the
  patterns. ASCII text only: re's case folding also maps non-ASCII letters (U+017F long s, the
  Kelvin sign) onto ASCII ones, so other text goes to the combined pattern as before.
* :func:`redact_text` remembers its answers for short strings (server names, versions, label
  values repeat on every run of every check), in a bounded table that is dropped whenever a
  secret is registered (and whenever the set of secrets changed size), so an answer made
  before a secret was known is never given after.
* Whether a key looks secret is remembered per key (keys are few: the probes' own).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

__all__ = [
    "REDACTED",
    "SECRET_KEY",
    "is_secret_key",
    "redact",
    "redact_text",
    "register_secret",
]

REDACTED = "[REDACTED]"

SECRET_KEY = re.compile(
    r"(authorization|token|password|passwd|secret|api[_-]?key|routing[_-]?key|cookie|"
    r"webhook|credential|private[_-]?key|session[_-]?id|signature)",
    re.IGNORECASE,
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 " + REDACTED),
    (re.compile(r"https://hooks\.slack\.com/[^\s\"'<>]+"), "https://hooks.slack.com/" + REDACTED),
    (re.compile(r"(?i)(://)[^/\s:@]+:[^/\s@]+@"), r"\1" + REDACTED + "@"),
    (
        re.compile(
            r"(?i)((?:password|passwd|secret|token|api[_-]?key)[\"']?\s*[=:]\s*[\"']?)"
            r"[^\s\"',&;]+"
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
)

#: One search for "could any pattern match?": most strings (every healthy probe's details)
#: contain nothing to redact, and one combined scan is far cheaper than five substitutions.
#: (Case-insensitive throughout: a false positive only costs the full substitution pass.)
_ANY_PATTERN = re.compile(
    "|".join(f"(?:{p.pattern.removeprefix('(?i)')})" for p, _ in _PATTERNS), re.IGNORECASE
)

#: For each pattern, substrings of which (in the lower-cased text) at least one occurs
#: wherever the pattern matches: no literal, no match. Tests hold every pattern to its list.
_LITERALS: tuple[str, ...] = (
    "bearer",
    "basic",  # Bearer/Basic credentials
    "hooks.slack.com",  # Slack webhooks
    "://",  # userinfo in a URL
    "passw",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",  # name=value
    "akia",
    "asia",  # AWS access key ids
)

_known: set[str] = set()
#: With many registered secrets (a token per target at 50,000 checks), testing each one with
#: ``in`` costs per secret; past this count a prefix index is scanned instead: one dict lookup
#: per position of the text, whatever the number of secrets.
_INDEX_ABOVE = 64
_PREFIX = 4
_by_prefix: dict[str, list[str]] = {}


class _Memo(dict[str, str]):
    """Redacted forms of short strings, valid for as long as the secrets are ``known`` many
    (secrets are only ever added, so a different count means the answers may be stale)."""

    __slots__ = ("known",)

    def __init__(self, known: int) -> None:
        super().__init__()
        self.known = known


#: Strings longer than this are not remembered (they rarely repeat: error bodies, reasons
#: with timings), nor more than this many (the table is then started again).
_MEMO_TEXT = 256
_MEMO_SIZE = 4096
_memo = _Memo(0)


def _new_memo() -> _Memo:
    """A fresh table. Replaced, never cleared: a redaction under way in another thread (the
    config loader registers secrets off the event loop) stores its answer in the old table,
    which nobody reads any more."""
    global _memo
    _memo = _Memo(len(_known))
    return _memo


def register_secret(value: str) -> None:
    # Very short values would redact ordinary words; config validation rejects nothing here,
    # but we only register values long enough to be meaningful.
    if len(value) >= _PREFIX and value not in _known:
        _known.add(value)
        bucket = _by_prefix.setdefault(value[:_PREFIX], [])
        bucket.append(value)
        bucket.sort(key=len, reverse=True)  # the longest secret at a position wins
        _new_memo()  # after the secret is in: a redaction that sees this table sees it


def _replace_known(text: str) -> str:
    if len(_known) <= _INDEX_ABOVE:
        for secret in _known:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text
    out: list[str] = []
    start = i = 0
    end = len(text) - _PREFIX + 1
    while i < end:
        bucket = _by_prefix.get(text[i : i + _PREFIX])
        if bucket is not None:
            hit = next((s for s in bucket if text.startswith(s, i)), None)
            if hit is not None:
                out.append(text[start:i])
                out.append(REDACTED)
                i = start = i + len(hit)
                continue
        i += 1
    if not out:
        return text
    out.append(text[start:])
    return "".join(out)


def _may_match(text: str) -> bool:
    """False only when no pattern can match ``text`` (see :data:`_LITERALS`)."""
    if not text.isascii():
        return _ANY_PATTERN.search(text) is not None
    low = text.lower()
    for literal in _LITERALS:  # noqa: SIM110 - any() with a generator measured 1.5x slower
        if literal in low:
            return True
    return False


def redact_text(text: str) -> str:
    memo = _memo
    if memo.known != len(_known):
        memo = _new_memo()
    done = memo.get(text)
    if done is not None:
        return done
    out = _replace_known(text)
    if _may_match(out):
        for pattern, replacement in _PATTERNS:
            out = pattern.sub(replacement, out)
    if len(text) <= _MEMO_TEXT:
        if len(memo) >= _MEMO_SIZE:
            memo = _new_memo()
        memo[text] = out
    return out


#: Whether a key looks secret, per key seen (bounded like the memo above).
_secret_keys: dict[str, bool] = {}


def is_secret_key(key: str) -> bool:
    """Whether values under ``key`` are secret as a whole (:data:`SECRET_KEY`)."""
    found = _secret_keys.get(key)
    if found is None:
        found = SECRET_KEY.search(key) is not None
        if len(key) <= _MEMO_TEXT:
            if len(_secret_keys) >= _MEMO_SIZE:
                _secret_keys.clear()
            _secret_keys[key] = found
    return found


def redact(value: Any, *, key: str | None = None) -> Any:
    """Redact a JSON-like value recursively; values under secret-looking keys go entirely."""
    if key is not None and is_secret_key(key) and value not in (None, "", [], {}):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
