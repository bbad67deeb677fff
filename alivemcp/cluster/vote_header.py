"""The vote header: what every replica's view takes from a result's record, packed in a Kafka
record header beside the JSON value.

Every replica reads every result of every location (the global view, the quorum's votes), so
what reading a record costs is paid ``locations x checks / interval`` times a second by each
replica. Parsing the JSON value and checking it costs a few times more than unpacking a few
fields, so the results stream also writes them in the header :data:`VOTE_HEADER`
(:func:`result_headers`) and the view reads that (:func:`decode_vote`), checked as strictly as
the JSON value: no non-finite number, no oversized text, names that are names, every length
within the header and nothing after it.

The JSON value stays whole: older replicas and other readers of the topic read it, and the view
reads it too when the header says it holds more (labeled observations, a tool-surface part) or
the result is not up (what alerting acts on); then the two must agree (:func:`same_vote`), or
the record is not taken. Records without the header (older replicas, approvals) are read from
their JSON value as before.

Layout (version 1, little-endian): ``VOTE_HEAD`` (version, flags, status code, started_at,
finished_at, duration_seconds), then replica and location (a byte of length, UTF-8 each), the
reason (two bytes of length, UTF-8, at most :data:`MAX_REASON_CHARS` characters), the number of
observations (a byte), their names (two bytes of length of them all, then each a byte of length
and ASCII: the same bytes for every run of a check, so a reader recognises them at once) and
their values (doubles).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from typing import TypeVar

from alivemcp.cluster.config import DEFAULT_LOCATION, LOCATION_NAME
from alivemcp.cluster.quorum import new_result
from alivemcp.engine.results import CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import OBSERVATION_NAME, LabeledObservation, Status

__all__ = [
    "MAX_OBSERVATIONS",
    "MAX_REASON_CHARS",
    "MAX_TEXT",
    "VOTE_HEADER",
    "VOTE_LABELED",
    "VOTE_SURFACE",
    "decode_vote",
    "find_vote",
    "result_headers",
    "same_vote",
]

#: The record header holding a result's vote.
VOTE_HEADER = "alivemcp-vote"
VERSION = 1
#: Flags: the JSON value holds labeled observations / a tool-surface part (read it too).
VOTE_LABELED, VOTE_SURFACE = 1, 2
#: Status codes, in this order.
STATUSES = (Status.UP, Status.DEGRADED, Status.DOWN, Status.UNKNOWN)
_CODES = {status: code for code, status in enumerate(STATUSES)}
#: version, flags, status code, started_at, finished_at, duration_seconds.
HEAD = struct.Struct("<BBBddd")
#: What a view takes of a record, whichever way it reads it (the JSON value too).
MAX_REASON_CHARS = 1000
MAX_OBSERVATIONS = 200
MAX_TEXT = 249

_T = TypeVar("_T")
#: What headers said, as checked already (bytes -> text): replicas, locations and observation
#: names are few in a fleet, and most results share a handful of reasons. Bounded.
_SEEN_REPLICAS: dict[bytes, str] = {}
_SEEN_LOCATIONS: dict[bytes, str] = {}
_SEEN_NAMES: dict[bytes, tuple[str, ...]] = {}
_SEEN_REASONS: dict[bytes, str] = {}
_SEEN_KEPT = 10_000
_SEEN_REASON_BYTES = 200
#: Observation count -> the unpacker of that many doubles (at most 255 of them).
_DOUBLES: dict[int, Callable[[bytes, int], tuple[float, ...]]] = {}
_HEAD_SIZE = HEAD.size
_NO_LABELS: tuple[LabeledObservation, ...] = ()
_UP = Status.UP


class _Invalid(Exception):
    """The header is not a vote this replica can take."""


# -- writing ----------------------------------------------------------------------------------


def result_headers(
    result: CheckResult, replica: str, location: str, *, surface: bool = False
) -> list[tuple[str, bytes]]:
    """The record headers of ``result``'s record: its vote (see the layout above).
    Non-finite observations are left out and a non-finite duration is 0, as in the JSON value.
    ``surface``: the value holds a tool-surface part (a flag). No header (an empty list:
    readers use the JSON value) when a field does not fit: non-finite times, a replica,
    location or observation name over 255 bytes, more observations than a view takes."""
    try:
        return _vote_header(result, replica, location, surface)
    except (ValueError, TypeError, OverflowError, struct.error):  # not what a probe makes
        return []


def _vote_header(
    result: CheckResult, replica: str, location: str, surface: bool
) -> list[tuple[str, bytes]]:
    started, finished = result.started_at, result.finished_at
    if not (math.isfinite(started) and math.isfinite(finished)):
        return []
    observations = [(k, v) for k, v in result.observations.items() if math.isfinite(v)]
    if len(observations) > MAX_OBSERVATIONS:
        return []
    duration = result.duration_seconds if math.isfinite(result.duration_seconds) else 0.0
    flags = (VOTE_LABELED if result.labeled_observations else 0) | (VOTE_SURFACE if surface else 0)
    parts = [HEAD.pack(VERSION, flags, _CODES[result.status], started, finished, duration)]
    for text in (replica, location):
        raw = text.encode()
        if len(raw) > 255:
            return []
        parts += (bytes((len(raw),)), raw)
    reason = result.reason[:MAX_REASON_CHARS].encode("utf-8", "surrogatepass")
    names: list[bytes] = []
    for name, _ in observations:
        raw = name.encode()
        if len(raw) > 255:
            return []
        names += (bytes((len(raw),)), raw)
    block = b"".join(names)
    parts += (
        len(reason).to_bytes(2, "little"),
        reason,
        bytes((len(observations),)),
        len(block).to_bytes(2, "little"),
        block,
        struct.pack(f"<{len(observations)}d", *(v for _, v in observations)),
    )
    return [(VOTE_HEADER, b"".join(parts))]


# -- reading ----------------------------------------------------------------------------------


def find_vote(headers: Iterable[tuple[str, bytes | None]]) -> bytes | None:
    """The vote header's value among a record's headers (None: the record has none)."""
    for key, value in headers:
        if key == VOTE_HEADER:
            return value if type(value) is bytes else b""
    return None


def decode_vote(
    header: bytes, key: bytes | None, store: StatusStore
) -> tuple[str, CheckResult | str, int]:
    """(check name or "", the result or why it is dropped: invalid, unknown_check, the
    header's flags): a record read from its vote header and its key (the check's name), as
    the JSON value would be read (labeled observations aside: the flags say the value has
    some). Labels and probe type come from this replica's config."""
    if type(key) is not bytes:
        return "", "invalid", 0
    try:
        name = key.decode()
    except UnicodeDecodeError:
        return "", "invalid", 0
    state = store.get(name)
    if state is None:
        return name, "unknown_check", 0
    try:
        version, flags, code, started, finished, duration = HEAD.unpack_from(header)
        if (
            version != VERSION
            or started - started != 0.0  # NaN and infinities give NaN
            or finished - finished != 0.0
            or duration - duration != 0.0
        ):
            raise _Invalid
        at = _HEAD_SIZE + 1
        end = at + header[at - 1]
        raw = header[at:end]
        replica = _SEEN_REPLICAS.get(raw) or _seen(_SEEN_REPLICAS, raw, _replica_text)
        at = end + 1
        end = at + header[at - 1]
        raw = header[at:end]
        location = _SEEN_LOCATIONS.get(raw) or _seen(_SEEN_LOCATIONS, raw, _location_text)
        at = end + 2
        end = at + int.from_bytes(header[at - 2 : at], "little")
        raw = header[at:end]
        reason = _SEEN_REASONS.get(raw)
        if reason is None:
            reason = raw.decode("utf-8", "surrogatepass")[:MAX_REASON_CHARS]
            if len(raw) <= _SEEN_REASON_BYTES and len(_SEEN_REASONS) < _SEEN_KEPT:
                _SEEN_REASONS[raw] = reason
        count = header[end]
        at = end + 3
        end = at + int.from_bytes(header[at - 2 : at], "little")
        observations: dict[str, float] = {}
        if count:
            raw = header[at:end]
            names = _SEEN_NAMES.get(raw) or _seen(_SEEN_NAMES, raw, _names_of)
            numbers = (_DOUBLES.get(count) or _doubles(count))(header, end)
            if len(names) != count:
                raise _Invalid
            total = sum(numbers)
            if total - total != 0.0 and not all(n - n == 0.0 for n in numbers):
                raise _Invalid  # NaN or infinite (a finite sum says none is)
            observations = dict(zip(names, numbers, strict=True))
            end += 8 * count
        elif end != at:  # names of no observations
            raise _Invalid
        if end != len(header):  # also: a length that ran past the end
            raise _Invalid
        result = new_result(
            state.info,
            STATUSES[code],
            reason,
            duration if duration > 0.0 else 0.0,
            started,
            finished,
            observations,
            _NO_LABELS,
            None,
            0.0,
            replica,
            None,
            location,
            None,
        )
    except (_Invalid, IndexError, ValueError, struct.error):  # UnicodeDecodeError: a ValueError
        return name, "invalid", 0
    return name, result, flags


def needs_value(result: CheckResult, flags: int) -> bool:
    """Whether the JSON value is read too (and must agree): it holds more than the header, or
    the result is not up."""
    return bool(flags) or result.status is not _UP


def same_vote(full: CheckResult, vote: CheckResult) -> bool:
    """Whether a record's JSON value (read) says what its vote header says."""
    return (
        full.check.name == vote.check.name
        and full.status is vote.status
        and full.started_at == vote.started_at
        and full.finished_at == vote.finished_at
        and full.duration_seconds == vote.duration_seconds
        and full.replica == vote.replica
        and full.location == vote.location
        and full.reason == vote.reason
        and full.observations == vote.observations
    )


def _seen(kept: dict[bytes, _T], raw: bytes, check: Callable[[bytes], _T]) -> _T:
    """``raw`` read by ``check`` (raises _Invalid), kept for the next time."""
    value = check(raw)
    if len(kept) < _SEEN_KEPT:
        kept[raw] = value
    return value


def _replica_text(raw: bytes) -> str:
    text = raw.decode()
    if not text or len(text) > MAX_TEXT:
        raise _Invalid
    return text


def _location_text(raw: bytes) -> str:
    text = raw.decode()
    if text != DEFAULT_LOCATION and not LOCATION_NAME.fullmatch(text):
        raise _Invalid
    return text


def _names_of(raw: bytes) -> tuple[str, ...]:
    """The observation names of a header (each a byte of length, then the name)."""
    names: list[str] = []
    at = 0
    while at < len(raw):
        end = at + 1 + raw[at]
        text = raw[at + 1 : end].decode()
        if (
            end > len(raw)
            or len(text) > MAX_TEXT
            or not OBSERVATION_NAME.fullmatch(text)
            or len(names) >= MAX_OBSERVATIONS
        ):
            raise _Invalid
        names.append(text)
        at = end
    return tuple(names)


def _doubles(count: int) -> Callable[[bytes, int], tuple[float, ...]]:
    unpack = _DOUBLES[count] = struct.Struct(f"<{count}d").unpack_from
    return unpack
