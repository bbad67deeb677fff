"""A result record of the results topic, read as strictly as it was written.

Whatever another replica (or anything else with write access to the topic) put there, reading
it never raises: a value that is not a result (not JSON, wrong types, non-finite numbers,
oversized collections, a location name this version would refuse) is dropped with a reason,
and so is one for a check this replica's config does not have. Labels and probe type come
from this replica's config (the status store's check info), never from the record. The
bounds are the vote header's (:mod:`alivemcp.cluster.vote_header`), so a record reads the same
whichever way it is read.
"""

from __future__ import annotations

import json
from typing import Any

from alivemcp.cluster.config import DEFAULT_LOCATION, LOCATION_NAME
from alivemcp.cluster.vote_header import MAX_OBSERVATIONS, MAX_REASON_CHARS, MAX_TEXT
from alivemcp.engine.results import CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import OBSERVATION_NAME, LabeledObservation, Status

__all__ = ["MAX_LABELS", "decode_doc", "decode_result", "parse_record"]

#: At most this many labels on one labeled observation.
MAX_LABELS = 32


class _Invalid(Exception):
    """The record is not a result this replica can take."""


def _number(value: Any) -> float:
    if type(value) is float:  # what the stream writes: the common case first
        if value - value == 0.0:  # finite (NaN and infinities give NaN)
            return value
        raise _Invalid
    if type(value) is not int:  # bool is not a number here
        raise _Invalid
    return float(value)


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    if type(value) is not str or len(value) > limit:
        raise _Invalid
    return value


#: Observation names seen valid (few distinct ones in a fleet): no pattern match for them.
_VALID_NAMES: set[str] = set()
_VALID_NAMES_KEPT = 10_000


def _location(value: Any) -> str:
    if value == DEFAULT_LOCATION:
        return DEFAULT_LOCATION
    if type(value) is not str or not LOCATION_NAME.fullmatch(value):
        raise _Invalid
    return value


def _observations(value: Any) -> dict[str, float]:
    if type(value) is not dict or len(value) > MAX_OBSERVATIONS:
        raise _Invalid
    for name, number in value.items():
        if name not in _VALID_NAMES:
            if not OBSERVATION_NAME.match(_text(name)):
                raise _Invalid
            if len(_VALID_NAMES) < _VALID_NAMES_KEPT:
                _VALID_NAMES.add(name)
        if type(number) is not float:
            value[name] = _number(number)
        elif number - number != 0.0:
            raise _Invalid
    return value


def _labeled(value: Any) -> tuple[LabeledObservation, ...]:
    if value is None:
        return ()
    if type(value) is not list or len(value) > MAX_OBSERVATIONS:
        raise _Invalid
    out = []
    for entry in value:
        if type(entry) is not dict:
            raise _Invalid
        labels = entry.get("labels", {})
        if type(labels) is not dict or len(labels) > MAX_LABELS:
            raise _Invalid
        out.append(
            LabeledObservation(
                name=_text(entry.get("name")),
                value=_number(entry.get("value")),
                labels={_text(k): _text(v) for k, v in labels.items()},
            )
        )
    return tuple(out)


def parse_record(value: bytes | None) -> dict[str, Any] | None:
    """The JSON object a record holds (None: not one)."""
    try:
        doc = json.loads(value) if value is not None else None
    except (ValueError, RecursionError):  # RecursionError: a deeply nested document
        return None
    return doc if type(doc) is dict else None


def decode_result(value: bytes | None, store: StatusStore) -> tuple[str, CheckResult | str]:
    """(check name or "", the result or the reason it is dropped: invalid, unknown_check)."""
    doc = parse_record(value)
    if doc is None:
        return "", "invalid"
    return decode_doc(doc, store)


def decode_doc(doc: dict[str, Any], store: StatusStore) -> tuple[str, CheckResult | str]:
    """:func:`decode_result` of a record already parsed."""
    name = doc.get("check")
    if type(name) is not str:
        return "", "invalid"
    state = store.get(name)
    if state is None:
        return name, "unknown_check"
    try:
        reason = doc.get("reason")
        if type(reason) is not str:
            raise _Invalid
        duration = doc.get("duration_seconds")
        replica = _text(doc.get("replica"))
        if not replica:
            raise _Invalid
        result = CheckResult(
            check=state.info,
            status=Status(_text(doc.get("status"))),
            reason=reason[:MAX_REASON_CHARS],
            duration_seconds=0.0 if duration is None else max(0.0, _number(duration)),
            started_at=_number(doc.get("started_at")),
            finished_at=_number(doc.get("finished_at")),
            observations=_observations(doc.get("observations", {})),
            labeled_observations=_labeled(doc.get("labeled_observations")),
            replica=replica,
            location=_location(doc.get("location", DEFAULT_LOCATION)),
        )
    except (_Invalid, ValueError, TypeError, OverflowError):
        return name, "invalid"
    return name, result
