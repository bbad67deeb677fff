"""A mergeable latency summary: counts in fixed logarithmic bins, stored as a few bytes.

Bin ``i >= 1`` holds durations in [0.1 ms * 2^((i-1)/8), 0.1 ms * 2^(i/8)), bin 0 everything
faster, bin 255 everything from ~4 days up: eight bins per doubling, so a percentile read back
is within ±4.5 % of the true value. Two summaries merge by adding counts, which is what lets
minute buckets roll up into hours and days (a mean or a stored p99 would not merge).

Encoding: for each non-empty bin in ascending order, the bin index byte then the count as an
unsigned LEB128 varint. A check with steady latency touches two or three bins: 4-8 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["bin_of", "decode", "encode", "merge", "merge_many", "one_run", "percentiles"]

_BASE = 1e-4
_PER_DOUBLING = 8
_LAST = 255


def bin_of(seconds: float) -> int:
    if not seconds >= _BASE:  # also NaN
        return 0
    index = int(math.log2(seconds / _BASE) * _PER_DOUBLING) + 1
    return index if index < _LAST else _LAST


def _value_of(index: int) -> float:
    if index == 0:
        return _BASE / 2
    return _BASE * 2 ** ((index - 0.5) / _PER_DOUBLING)


#: The encoding of a single run in bin i: what most buckets of a batch hold.
_ONE_RUN = [bytes((index, 1)) for index in range(_LAST + 1)]


def one_run(seconds: float) -> bytes:
    """The encoding of a single run of ``seconds``."""
    return _ONE_RUN[bin_of(seconds)]


def encode(counts: Mapping[int, int]) -> bytes:
    if len(counts) == 1:
        for index, count in counts.items():
            if count == 1:
                return _ONE_RUN[index]
    out = bytearray()
    for index in sorted(counts):
        count = counts[index]
        if count <= 0:
            continue
        out.append(index)
        while count >= 0x80:
            out.append((count & 0x7F) | 0x80)
            count >>= 7
        out.append(count)
    return bytes(out)


def decode(blob: bytes | None, into: dict[int, int] | None = None) -> dict[int, int]:
    counts = {} if into is None else into
    if not blob:
        return counts
    pos, end = 0, len(blob)
    while pos < end:
        index = blob[pos]
        pos += 1
        count = shift = 0
        while pos < end:
            byte = blob[pos]
            pos += 1
            count |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        counts[index] = counts.get(index, 0) + count
    return counts


def merge(a: bytes | None, b: bytes | None) -> bytes | None:
    """SQLite function ``latency_merge`` (used by the writer's upserts). NULL merged with
    NULL stays NULL (a bucket of ``unknown`` runs only), however the runs were batched."""
    if not a:
        return b or a
    if not b:
        return a
    if len(b) == 2 and b[1] < 0x80:
        # One bin with a small count (the usual upsert: a check's run or two in a batch):
        # spliced into ``a`` as bytes. Decoding both into a dict and encoding again cost
        # most of the writer's time in this function once hour and day counts pass 127.
        return _add_to_bin(a, b[0], b[1])
    return encode(decode(b, decode(a)))


def _add_to_bin(a: bytes, index: int, add: int) -> bytes:
    """``a`` with ``add`` more runs in bin ``index`` (bins stay in ascending order)."""
    pos, end = 0, len(a)
    while pos < end:
        current = a[pos]
        if current > index:
            break  # not there: a new bin goes here
        start = pos + 1
        pos = start
        while pos < end and a[pos] >= 0x80:  # the varint's continuation bytes
            pos += 1
        pos += 1  # past the varint's last byte
        if current == index:
            if pos == start + 1 and a[start] + add < 0x80:  # stays one byte long
                return a[:start] + bytes((a[start] + add,)) + a[pos:]
            count = shift = 0
            for byte in a[start:pos]:
                count |= (byte & 0x7F) << shift
                shift += 7
            return a[:start] + _varint(count + add) + a[pos:]
    return a[:pos] + bytes((index,)) + _varint(add) + a[pos:]


def _varint(count: int) -> bytes:
    out = bytearray()
    while count >= 0x80:
        out.append((count & 0x7F) | 0x80)
        count >>= 7
    out.append(count)
    return bytes(out)


def merge_many(blobs: Iterable[bytes | None]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for blob in blobs:
        decode(blob, counts)
    return counts


def percentiles(
    counts: Mapping[int, int], quantiles: Iterable[float] = (0.5, 0.95, 0.99)
) -> list[float | None]:
    """Values at ``quantiles`` (nearest rank); None for each when there is nothing."""
    total = sum(counts.values())
    wanted = list(quantiles)
    if total == 0:
        return [None] * len(wanted)
    out: list[float | None] = []
    ordered = sorted(counts.items())
    for q in wanted:
        rank = max(1, math.ceil(q * total))
        seen = 0
        for index, count in ordered:
            seen += count
            if seen >= rank:
                out.append(round(_value_of(index), 6))
                break
    return out
