"""Durations as users write them: ``30``, ``"30s"``, ``"1.5m"``, ``"250ms"``, ``"2h"``."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

__all__ = ["Duration", "parse_duration"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """A number of seconds or a string with a unit → seconds as float (others pass through
    for pydantic to reject with its own message)."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30s'")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a duration (examples: 30, '30s', '5m', '250ms')")
        return float(match.group(1)) * _UNITS[match.group(2)]
    return value


#: Seconds (> 0), written as a number or a string with a unit.
Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
