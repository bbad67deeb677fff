"""Secret redaction for everything that leaves the process: logs, results, status, metrics.

Two layers: exact values the config marked secret (every ``SecretStr`` in the loaded config is
registered here), and patterns for secrets that arrive from elsewhere (an ``Authorization``
header echoed in an error, a Slack webhook URL, credentials in a URL's userinfo).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

__all__ = [
    "REDACTED",
    "SECRET_KEY",
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
        re.compile(r"(?i)((?:password|passwd|secret|token|api[_-]?key)[\"']?\s*[=:]\s*[\"']?)"
                   r"[^\s\"',&;]+"),
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

_known: set[str] = set()
#: With many registered secrets (a token per target at 50,000 checks), testing each one with
#: ``in`` costs per secret; past this count a prefix index is scanned instead: one dict lookup
#: per position of the text, whatever the number of secrets.
_INDEX_ABOVE = 64
_PREFIX = 4
_by_prefix: dict[str, list[str]] = {}


def register_secret(value: str) -> None:
    # Very short values would redact ordinary words; config validation rejects nothing here,
    # but we only register values long enough to be meaningful.
    if len(value) >= _PREFIX and value not in _known:
        _known.add(value)
        bucket = _by_prefix.setdefault(value[:_PREFIX], [])
        bucket.append(value)
        bucket.sort(key=len, reverse=True)  # the longest secret at a position wins


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
        bucket = _by_prefix.get(text[i:i + _PREFIX])
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


def redact_text(text: str) -> str:
    text = _replace_known(text)
    if _ANY_PATTERN.search(text) is None:
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, *, key: str | None = None) -> Any:
    """Redact a JSON-like value recursively; values under secret-looking keys go entirely."""
    if key is not None and SECRET_KEY.search(key) and value not in (None, "", [], {}):
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
