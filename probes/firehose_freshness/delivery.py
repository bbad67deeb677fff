"""What a delivered object says about the canary.

- JSON deliveries (plain or gzip): :func:`scan_delivery` streams the object in bounded memory
  and :func:`inspect_delivery` judges the canary's line: one valid JSON object on its own
  newline-terminated line. Base64 text where JSON was due, records run together, or a missing
  trailing newline are the transformation trap.
- Parquet/ORC deliveries (format conversion): :func:`columnar_problem` checks the file's
  magic bytes at both ends (a complete file, of the configured format). The records inside are
  not decoded: Firehose keeps only the Glue table's columns, so the canary's id is in the file
  only if the table has a column for it.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import re
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

__all__ = ["DeliveryCheck", "columnar_problem", "inspect_delivery", "scan_delivery"]

_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")
#: Bytes kept between chunks so a canary (or its base64) cut by a chunk boundary is still seen.
_OVERLAP = 64 * 1024
#: How far past the canary a scan reads looking for the end of its line.
_LINE_CAP = 1024 * 1024
#: The bytes a complete file of each format starts with, and ends with (ORC's last byte is the
#: postscript's length, after the postscript's own "ORC").
_MAGIC = {"parquet": (b"PAR1", b"PAR1"), "orc": (b"ORC", b"ORC")}


@dataclass
class DeliveryCheck:
    """What the canary's bytes look like in a delivered object."""

    found: bool
    problem: str | None = None
    binary: bool = False  # undecodable bytes seen (plain text returned where base64 was due)
    #: The id was only seen base64-encoded (in an error record's rawData, that is expected).
    encoded: bool = False


async def scan_delivery(
    chunks: AsyncIterator[bytes],
    record_id: str,
    *,
    transformed: bool = False,
    max_bytes: int = 64 << 20,
    newline_hint: str = "",
) -> DeliveryCheck:
    """Stream a delivered object (gzip or not) looking for the canary, in bounded memory:
    only the current chunk, a short overlap and the canary's own line are held."""
    needle = record_id.encode()
    inflater: _Gunzip | None = None
    text = codecs.getincrementaldecoder("utf-8")()
    binary = False
    window = b""
    total = 0
    first = True
    iterator = aiter(chunks)
    async for raw in iterator:
        if first:
            first = False
            if raw[:2] == b"\x1f\x8b":
                inflater = _Gunzip()
        data = _inflate(inflater, raw)
        total += len(data)
        if not binary:
            try:
                text.decode(data)
            except UnicodeDecodeError:
                binary = True
        window += data
        where = window.find(needle)
        if where >= 0:
            # Read on to the end of the canary's line (bounded), then judge that line.
            while window.find(b"\n", where) < 0 and len(window) - where < _LINE_CAP:
                more = await anext(iterator, b"")
                if not more:
                    break
                window += _inflate(inflater, more)
            return inspect_delivery(window, record_id, transformed, newline_hint)
        if _base64_hides(window, needle):
            return inspect_delivery(window, record_id, transformed, newline_hint)
        window = window[-_OVERLAP:]
        if total >= max_bytes:
            break
    return DeliveryCheck(False, binary=binary)


class _Gunzip:
    """Incremental gunzip that also reads concatenated gzip members."""

    def __init__(self) -> None:
        self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, raw: bytes) -> bytes:
        out = b""
        try:
            while raw:
                out += self._member.decompress(raw)
                if not self._member.eof:
                    break
                raw = self._member.unused_data
                self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        except zlib.error:
            pass  # a corrupt stream: keep what was inflated so far
        return out


def _inflate(inflater: _Gunzip | None, raw: bytes) -> bytes:
    return raw if inflater is None else inflater.feed(raw)


def _base64_hides(body: bytes, needle: bytes) -> bool:
    """Whether ``needle`` is inside base64 text in ``body`` (any alignment: a run may have been
    cut anywhere, and records run together keep no padding between them)."""
    for match in _BASE64_RUN.finditer(body):
        core = match.group().rstrip(b"=")
        for offset in range(4):
            piece = core[offset:]
            piece = piece[: len(piece) // 4 * 4]
            if len(piece) < 16:
                continue
            try:
                decoded = base64.b64decode(piece, validate=True)
            except (binascii.Error, ValueError):
                continue
            if needle in decoded:
                return True
    return False


def _holds(doc: Any, record_id: str) -> bool:
    """Whether ``record_id`` is one of the document's values (at any depth): a transformation
    may rename the field the id travels in."""
    if isinstance(doc, dict):
        return any(_holds(value, record_id) for value in doc.values())
    if isinstance(doc, list):
        return any(_holds(value, record_id) for value in doc)
    return isinstance(doc, str) and doc == record_id


def inspect_delivery(
    body: bytes, record_id: str, transformed: bool = False, newline_hint: str = ""
) -> DeliveryCheck:
    """Find the canary in a delivered object and say whether its bytes survived intact:
    one valid JSON document on its own newline-terminated line. ``newline_hint`` is added to
    the reasons about missing newlines (how this stream could add them)."""
    needle = record_id.encode()
    where = body.find(needle)
    lambda_hint = " by the transformation Lambda" if transformed else ""
    if where < 0:
        if _base64_hides(body, needle):
            return DeliveryCheck(
                True,
                (
                    "canary delivered as base64 text where JSON was expected: the "
                    f"transformation trap (records base64-encoded twice{lambda_hint}: return "
                    "base64 of the JSON line, not of its base64)"
                ),
                encoded=True,
            )
        return DeliveryCheck(False)
    start = body.rfind(b"\n", 0, where) + 1
    end = body.find(b"\n", where)
    line = body[start:] if end < 0 else body[start:end]
    if b"}{" in line:
        return DeliveryCheck(
            True,
            (
                "canary delivered run together with other records (no newline between them): the "
                f"transformation trap (append \\n to each record before base64-encoding"
                f"{lambda_hint}{newline_hint})"
            ),
        )
    try:
        doc = json.loads(line)
    except ValueError:
        return DeliveryCheck(
            True,
            "canary line is not valid JSON in the delivered object"
            f"{lambda_hint}: records are garbled",
        )
    if not isinstance(doc, dict) or not _holds(doc, record_id):
        return DeliveryCheck(
            True,
            "canary id found, but not as a value of the delivered JSON record: records are garbled",
        )
    if end < 0:
        return DeliveryCheck(
            True,
            (
                "canary delivered without its trailing newline: the transformation trap "
                f"(records must end with \\n{lambda_hint}{newline_hint}, or they run together "
                "in S3)"
            ),
        )
    return DeliveryCheck(True)


def columnar_problem(fmt: str, head: bytes, tail: bytes, size: int) -> str | None:
    """Why an object is not a complete ``fmt`` ("parquet"/"orc") file, judged by its first
    and last four bytes; None when both magics are there."""
    start, end = _MAGIC[fmt]
    name, article = ("Parquet", "a") if fmt == "parquet" else ("ORC", "an")
    if not head.startswith(start):
        return (
            f"does not start with the {name} magic {start.decode()!r} "
            f"(first bytes {head[:4]!r}): not {article} {name} file"
        )
    ends = tail.endswith(end) if fmt == "parquet" else tail[:-1].endswith(end)
    if size < 2 * len(start) + 4 or not ends:
        return (
            f"does not end like a complete {name} file (last bytes {tail[-4:]!r}, "
            f"{size} bytes): truncated"
        )
    return None
