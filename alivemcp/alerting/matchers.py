"""Label matchers (``team=data``, ``env!=dev``, ``check=~kafka-.*``, ``probe!~s3_.*``).

Used by routes and maintenance windows. Besides a check's labels, ``check`` and ``probe`` match
its name and probe type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Matcher", "MatcherError", "match_all", "parse_matchers"]

_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


class MatcherError(ValueError):
    """A matcher string that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str
    pattern: re.Pattern[str] | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(actual) is not None
        return found if self.op == "=~" else not found


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    out = []
    for text in texts:
        match = _MATCHER.match(text)
        if not match:
            raise MatcherError(
                f"{text!r} is not a matcher (label=value, label!=value, label=~re, label!~re)"
            )
        label, op, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        pattern = None
        if op in ("=~", "!~"):
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise MatcherError(f"{text!r}: bad regular expression: {exc}") from exc
        out.append(Matcher(label, op, value, pattern))
    return tuple(out)


def match_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
