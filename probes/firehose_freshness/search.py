"""Looking for the pending canary in S3.

:func:`search_expected` looks under the canary's expected prefix (for Parquet/ORC: the first
object there since the put, its magic bytes read with two ranged GETs); once the canary is
overdue, :func:`search_elsewhere` looks under the rest of the stream's prefix and the error
prefixes. Objects are streamed through :func:`~probes.firehose_freshness.delivery.scan_delivery`
in bounded memory, oldest first, at most ``canary_max_objects`` of them per search.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

from probes.firehose_freshness.canary import FORMAT_NAME, Canary, Hit
from probes.firehose_freshness.delivery import DeliveryCheck, columnar_problem, scan_delivery
from probes.firehose_freshness.params import FirehoseFreshnessParams
from probes.firehose_freshness.prefixes import Destination, static_part

__all__ = ["list_objects", "search_elsewhere", "search_expected"]

_CHUNK = 256 * 1024


async def search_expected(
    s3: Any, dest: Destination, canary: Canary, params: FirehoseFreshnessParams
) -> Hit | None:
    """The canary under its expected prefix (for Parquet/ORC: the first object there
    since the put)."""
    p = params
    candidates: dict[str, dict[str, Any]] = {}
    for listing in dict.fromkeys(e.listing for e in canary.expected):
        for obj in await _unscanned(s3, dest, canary, listing, p.max_list_pages):
            if any(e.holds(obj["Key"]) for e in canary.expected):
                candidates[obj["Key"]] = obj
    oldest_first = sorted(candidates.values(), key=lambda o: o["LastModified"])
    for obj in oldest_first[: p.canary_max_objects]:
        if dest.columnar:
            return await _columnar_hit(s3, dest, obj)
        check = await _scan(s3, dest, canary, obj["Key"], p)
        canary.scanned.add(obj["Key"])
        canary.saw_binary = canary.saw_binary or check.binary
        if check.found:
            return Hit(obj["Key"], obj["LastModified"], check)
    return None


async def search_elsewhere(
    s3: Any,
    dest: Destination,
    canary: Canary,
    params: FirehoseFreshnessParams,
    errors: list[str],
) -> Hit | None:
    """The overdue canary anywhere else the stream writes: other partitions of its prefix
    (JSON deliveries only: Parquet/ORC rows are not decoded) and the error output (the
    prefixes ``errors``)."""
    p = params
    # Error prefixes first: an error prefix inside the destination prefix counts as errors.
    listings = list(errors) if dest.columnar else [*errors, static_part(dest.prefix)]
    candidates: dict[str, tuple[dict[str, Any], bool]] = {}
    for listing in dict.fromkeys(listings):
        in_errors = listing in errors
        for obj in await _unscanned(s3, dest, canary, listing, p.max_list_pages):
            if not any(e.holds(obj["Key"]) for e in canary.expected):
                candidates.setdefault(obj["Key"], (obj, in_errors))
    oldest_first = sorted(candidates.values(), key=lambda c: c[0]["LastModified"])
    for obj, in_errors in oldest_first[: p.canary_max_objects]:
        check = await _scan(s3, dest, canary, obj["Key"], p)
        canary.scanned.add(obj["Key"])
        if check.found:
            return Hit(
                obj["Key"],
                obj["LastModified"],
                check,
                place="error" if in_errors else "elsewhere",
            )
    return None


async def list_objects(s3: Any, bucket: str, prefix: str, max_pages: int) -> list[dict[str, Any]]:
    """The objects under ``prefix``, at most ``max_pages`` ListObjectsV2 pages of them."""
    objects: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    for _ in range(max_pages):
        resp = await s3.list_objects_v2(**kwargs)
        objects += resp.get("Contents", [])
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            break
        kwargs["ContinuationToken"] = token
    return objects


async def _unscanned(
    s3: Any, dest: Destination, canary: Canary, listing: str, max_pages: int
) -> list[dict[str, Any]]:
    """The objects under ``listing`` written since the canary was put, not scanned yet."""
    # The object holding the canary is written after the put; LastModified has whole
    # seconds, and the prober's clock may be a little off S3's.
    since = canary.put_at.replace(microsecond=0) - timedelta(seconds=5)
    return [
        obj
        for obj in await list_objects(s3, dest.bucket, listing, max_pages)
        if obj["LastModified"] >= since and obj["Key"] not in canary.scanned
    ]


async def _scan(
    s3: Any, dest: Destination, canary: Canary, key: str, params: FirehoseFreshnessParams
) -> DeliveryCheck:
    resp = await s3.get_object(Bucket=dest.bucket, Key=key)
    async with resp["Body"] as stream:
        return await scan_delivery(
            _chunks(stream),
            canary.record_id,
            transformed=dest.transformed,
            max_bytes=params.canary_max_object_bytes,
            newline_hint=_newline_hint(dest),
        )


async def _columnar_hit(s3: Any, dest: Destination, obj: Mapping[str, Any]) -> Hit:
    """A Parquet/ORC object: its first and last four bytes (two ranged GETs), not its
    rows."""
    fmt = dest.columnar or "parquet"
    size = int(obj.get("Size", 0))
    head = tail = b""
    if size >= 8:
        head = await _read_range(s3, dest.bucket, obj["Key"], "bytes=0-3")
        tail = await _read_range(s3, dest.bucket, obj["Key"], "bytes=-4")
    problem = columnar_problem(fmt, head, tail, size)
    if problem is not None:
        problem = f"{FORMAT_NAME[fmt]} object {obj['Key']} {problem}"
    return Hit(obj["Key"], obj["LastModified"], DeliveryCheck(True, problem), size=size)


async def _chunks(stream: Any) -> AsyncIterator[bytes]:
    while chunk := await stream.read(_CHUNK):
        yield chunk


async def _read_range(s3: Any, bucket: str, key: str, byte_range: str) -> bytes:
    resp = await s3.get_object(Bucket=bucket, Key=key, Range=byte_range)
    async with resp["Body"] as stream:
        return bytes(await stream.read())


def _newline_hint(dest: Destination) -> str:
    if dest.dynamic_partitioning and not dest.appends_newline:
        return ", or enable the AppendDelimiterToRecord processor"
    return ""
