"""S3 helpers shared by the probes: bounded listings, and deleting every version and marker
of an object (canaries live in versioned buckets, where a plain delete only adds a marker).
Errors are the client's: ``ProbeError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["delete_all_versions", "delete_versions_under", "list_objects"]


async def delete_all_versions(client: Any, bucket: str, key: str) -> None:
    """Delete every version and delete marker of exactly ``key`` (or the object itself in an
    unversioned bucket, where the listing shows it with version ``null``)."""
    listing = await client.list_object_versions(Bucket=bucket, Prefix=key)
    objects = [
        {"Key": item["Key"], "VersionId": item["VersionId"]}
        for group in ("Versions", "DeleteMarkers")
        for item in listing.get(group, [])
        if item["Key"] == key
    ]
    if objects:
        await client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})


async def delete_versions_under(
    client: Any,
    bucket: str,
    prefix: str,
    cutoff: float,
    is_canary: Callable[[str], object],
    batch: int = 1000,
) -> int:
    """Delete versions under ``prefix`` last modified before ``cutoff`` (unix time) whose key
    ``is_canary`` accepts: one listing page per call, so a sweep stays bounded."""
    listing = await client.list_object_versions(Bucket=bucket, Prefix=prefix, MaxKeys=batch)
    objects = [
        {"Key": item["Key"], "VersionId": item["VersionId"]}
        for group in ("Versions", "DeleteMarkers")
        for item in listing.get(group, [])
        if is_canary(item["Key"]) and item["LastModified"].timestamp() < cutoff
    ]
    for start in range(0, len(objects), 1000):
        await client.delete_objects(
            Bucket=bucket, Delete={"Objects": objects[start : start + 1000], "Quiet": True}
        )
    return len(objects)


async def list_objects(
    client: Any, bucket: str, prefix: str, max_pages: int
) -> list[dict[str, Any]]:
    """The objects under ``prefix``, at most ``max_pages`` ListObjectsV2 pages of them."""
    objects: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    for _ in range(max_pages):
        resp = await client.list_objects_v2(**kwargs)
        objects += resp.get("Contents", [])
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            break
        kwargs["ContinuationToken"] = token
    return objects
