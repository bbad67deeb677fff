"""What a queue message says about S3 objects, and how a canary key goes wrong on the way.

:func:`parse_message` finds every object event in an SQS message body, whatever envelope
carried it (direct S3, SNS, EventBridge, SNS around EventBridge). :func:`diagnose_key` names the
wrong decoding under which an event's key matches the canary; :func:`wrong_marker_keys` lists
the canary key as buggy workers commonly decode it, to find a marker written under one.
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

__all__ = ["ParsedMessage", "S3Event", "diagnose_key", "parse_message", "wrong_marker_keys"]


@dataclass(frozen=True, slots=True)
class S3Event:
    """One object event found in a queue message, whatever envelope carried it."""

    bucket: str
    raw_key: str
    created: bool
    via: str  # s3 | sns/s3 | eventbridge | sns/eventbridge

    def decoded_keys(self) -> list[str]:
        """The key as S3 encodes it, decoded: ``+`` is a space. EventBridge events are also
        accepted unencoded (some emitters send the key as-is)."""
        decoded = unquote_plus(self.raw_key)
        if self.via.endswith("eventbridge") and self.raw_key != decoded:
            return [decoded, self.raw_key]
        return [decoded]


@dataclass(slots=True)
class ParsedMessage:
    events: list[S3Event] = field(default_factory=list)
    test_event: bool = False


def parse_message(body: str) -> ParsedMessage:
    """Every S3 object event in an SQS message body; garbage yields nothing."""
    try:
        doc = json.loads(body)
    except (ValueError, TypeError):
        return ParsedMessage()
    parsed = ParsedMessage()
    _collect(doc, "", parsed, depth=0)
    return parsed


def _collect(doc: Any, wrapper: str, out: ParsedMessage, depth: int) -> None:
    if not isinstance(doc, dict) or depth > 3:
        return
    if doc.get("Type") == "Notification" and isinstance(doc.get("Message"), str):
        with contextlib.suppress(ValueError, TypeError):
            _collect(json.loads(doc["Message"]), "sns/", out, depth + 1)
        return
    if doc.get("Event") == "s3:TestEvent":
        out.test_event = True
        return
    if doc.get("source") == "aws.s3" and isinstance(doc.get("detail"), dict):
        detail = doc["detail"]
        bucket = _dig(detail, "bucket", "name")
        key = _dig(detail, "object", "key")
        if isinstance(bucket, str) and isinstance(key, str):
            created = doc.get("detail-type") == "Object Created"
            out.events.append(S3Event(bucket, key, created, f"{wrapper}eventbridge"))
        return
    records = doc.get("Records")
    if isinstance(records, list):
        for record in records:
            if not isinstance(record, dict):
                continue
            bucket = _dig(record, "s3", "bucket", "name")
            key = _dig(record, "s3", "object", "key")
            name = record.get("eventName")
            if isinstance(bucket, str) and isinstance(key, str):
                created = isinstance(name, str) and name.startswith("ObjectCreated:")
                out.events.append(S3Event(bucket, key, created, f"{wrapper}s3"))


def _dig(doc: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def diagnose_key(raw_key: str, expected: str) -> str | None:
    """Why an event's key only matches the canary when decoded wrongly (None: no such way)."""
    decoded = unquote_plus(raw_key)
    for description, candidate in _wrong_decodings(raw_key, decoded):
        if candidate == expected:
            return description
    if unicodedata.normalize("NFC", decoded) == unicodedata.normalize("NFC", expected):
        return "the key's Unicode normalization changed (NFC vs NFD)"
    return None


def _wrong_decodings(raw: str, decoded: str) -> Iterator[tuple[str, str]]:
    yield (
        "spaces arrived as '+' (a stage decoded the key with unquote instead of unquote_plus "
        "and encoded it again)",
        decoded.replace("+", " "),
    )
    yield "the key was URL-encoded twice", unquote_plus(decoded)
    with contextlib.suppress(UnicodeError):
        yield (
            "the non-ASCII character was mangled (UTF-8 bytes read as Latin-1)",
            decoded.encode("latin-1").decode("utf-8"),
        )
    yield "the key was not decoded as S3 encodes it", unquote(raw)


def wrong_marker_keys(key: str) -> Iterator[tuple[str, str]]:
    """The canary key as buggy workers commonly decode it from an event."""
    encoded = quote_plus(key, safe="/")
    yield "'+' kept instead of spaces (unquote instead of unquote_plus)", unquote(encoded)
    yield "the event key used without decoding", encoded
    yield "the key percent-encoded", quote(key, safe="/")
    with contextlib.suppress(UnicodeError):
        yield "UTF-8 read as Latin-1", key.encode("utf-8").decode("latin-1")
