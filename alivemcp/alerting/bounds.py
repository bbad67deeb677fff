"""The bounds of every value of alert state, declared once on the types of its fields.

Alert state is saved to a file and, in cluster mode, to a shared Kafka log; a disk, an editor
or a crashed writer can damage either, and every value ends up in arithmetic, comparisons,
message rendering and dedup keys. The dataclasses of :mod:`alivemcp.alerting.policy` declare
their fields with these types (plain ``int``, ``float``, ``str`` to the type checker and at
run time), and :mod:`alivemcp.alerting.saved` validates what was saved against those same
dataclasses: strictly (``"3"`` is not a streak, ``true`` is not a count), with no negative
streaks, no NaN, no year-33658 timestamps and no unbounded text.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict

__all__ = [
    "MAX_ID",
    "Changes",
    "Count",
    "Flag",
    "Labels",
    "Name",
    "Observations",
    "SeverityOrNone",
    "StatusOrNone",
    "Text",
    "Timestamp",
]

#: Ids, streaks and counters: far beyond anything a daemon reaches, small enough to stay exact
#: as a JSON number.
MAX_ID = 2**53
#: Unix times up to the year 3000: messages render them as dates, and Python's datetime
#: stops at the year 9999.
MAX_TIMESTAMP = 32_503_680_000.0
#: Texts (reasons, names, labels): results are capped at 1,000 characters on the way in.
MAX_TEXT = 10_000
#: State changes kept for flap detection: one per run inside the flap window.
MAX_CHANGES = 100_000
MAX_ITEMS = 1_000  # labels or observations of one check

Count = Annotated[int, Strict(), Field(ge=0, le=MAX_ID)]
Timestamp = Annotated[float, Strict(), Field(ge=0, le=MAX_TIMESTAMP, allow_inf_nan=False)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_TEXT)]
Labels = Annotated[dict[Text, Text], Field(max_length=MAX_ITEMS)]
Observations = Annotated[
    dict[Text, Annotated[float, Strict(), Field(allow_inf_nan=False)]],
    Field(max_length=MAX_ITEMS),
]
Changes = Annotated[list[Timestamp], Field(max_length=MAX_CHANGES)]
#: "" (none yet) or one of the severities / statuses.
SeverityOrNone = Annotated[str, Strict(), Field(pattern=r"^(|critical|error|warning|info)$")]
StatusOrNone = Annotated[str, Strict(), Field(pattern=r"^(|up|degraded|down|unknown)$")]
