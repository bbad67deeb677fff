"""Durations as users write them: ``30``, ``"30s"``, ``"1.5m"``, ``"250ms"``, ``"2h"``, and
the moments the history's readers take (:func:`parse_instant`: ``30d`` ago, a date, an ISO
datetime, unix seconds), one rule for the API and the CLI.

Every duration is finite and at most :data:`MAX_DURATION_SECONDS`: ``.inf``, ``nan`` or
``100000000d`` validate as floats but cannot be scheduled (timers and datetimes overflow), so
they are refused here, at validation, with the field's path, never later at run time.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

__all__ = [
    "DURATION_JSON_SCHEMA",
    "MAX_DURATION_SECONDS",
    "Duration",
    "DurationOrZero",
    "parse_duration",
    "parse_instant",
]

#: One year: longer than any interval, timeout, retention or grace a monitor needs.
MAX_DURATION_SECONDS = 365 * 86400.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """A number of seconds or a string with a unit → seconds as float (others pass through
    for pydantic to reject with its own message)."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30s'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration (examples: 30, '30s', '5m', '250ms')")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        return value
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{value!r} is longer than the longest duration allowed (365d)")
    return seconds


#: What editors see: exactly the two spellings :func:`parse_duration` accepts.
DURATION_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DURATION_SECONDS},
        {"type": "string", "pattern": _DURATION.pattern},
    ],
    "description": "Seconds, or a number with a unit: 250ms, 30s, 5m, 2h, 1d (at most 365d).",
}

#: Seconds (> 0, finite, at most a year), written as a number or a string with a unit.
Duration = Annotated[
    float, BeforeValidator(parse_duration), Field(gt=0), WithJsonSchema(DURATION_JSON_SCHEMA)
]

#: As :data:`Duration`, but 0 is allowed (e.g. "no wait").
DurationOrZero = Annotated[
    float,
    BeforeValidator(parse_duration),
    Field(ge=0),
    WithJsonSchema(
        {
            **DURATION_JSON_SCHEMA,
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_DURATION_SECONDS},
                DURATION_JSON_SCHEMA["anyOf"][1],
            ],
        }
    ),
]


_DURATION_WITH_UNIT = re.compile(r"^\s*\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_UNIX = re.compile(r"^\d+(?:\.\d+)?$")
_NEGATIVE = re.compile(r"^-\s*\d")
#: A bare number below this (2001-09-09) is taken for a duration without its unit, not for a
#: moment in 1970.
SMALLEST_UNIX_TIME = 1_000_000_000
#: What :func:`parse_instant` accepts, for its callers' messages.
INSTANT_FORMS = (
    "a duration before now (30d, 12h, 90m), a date (2026-11-01, midnight UTC), "
    "an ISO-8601 datetime (2026-11-01T09:30:00Z; UTC without an offset) or "
    "unix seconds (1793491200)"
)


def parse_instant(text: str, now: float) -> float:
    """Unix time of ``text``: a duration with a unit is that long before ``now``; a date is
    its midnight UTC; an ISO-8601 datetime without an offset is UTC; a bare number is unix
    seconds (from 2001 on: a smaller one is a duration missing its unit). Raises
    ``ValueError`` saying what was wrong; the caller prefixes the parameter's name."""
    value = text.strip()
    if _DURATION_WITH_UNIT.match(value):
        return now - float(parse_duration(value))
    if _NEGATIVE.match(value):
        raise ValueError(f"{text!r}: a moment is a non-negative unix time, never before 1970")
    if _UNIX.match(value):
        seconds = float(value)
        if seconds < SMALLEST_UNIX_TIME:
            raise ValueError(
                f"{text!r}: a duration needs a unit (e.g. 30d, 12h); a bare number is unix seconds"
            )
        return seconds
    try:
        if _DATE.match(value):
            return datetime.combine(
                date.fromisoformat(value), datetime.min.time(), tzinfo=UTC
            ).timestamp()
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is not {INSTANT_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
