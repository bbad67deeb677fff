"""S3 canary objects: written, every version deleted, failed deletes retried, leftovers swept.

Canaries live in versioned buckets (replication needs versioning), where a plain delete only
adds a delete marker, so deleting one means deleting every version and marker. The rest of
the canary lifecycle (naming, body, tags, params) is :mod:`alivemcp.plumbing.canary`. Errors
are the client's: ``ProbeError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from alivemcp.errors import ProbeError
from alivemcp.plumbing.canary import tagging

__all__ = ["MAX_PENDING_DELETES", "S3Canaries", "delete_all_versions", "delete_versions_under"]

#: Deletes remembered for later runs; older ones are left to the start-up sweep.
MAX_PENDING_DELETES = 50
#: Most versions one sweep deletes, so a huge leftover pile cannot stall a start.
SWEEP_BATCH = 1000


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


class S3Canaries:
    """One check's canary objects in S3: written, deleted (every version), deletes that failed
    retried by later runs, leftovers swept on start. Errors are ``ProbeError``s; deletes and
    sweeps never raise them (a failed clean-up must not fail a run that saw a healthy
    target), they report them."""

    def __init__(self, max_pending: int = MAX_PENDING_DELETES) -> None:
        self._max_pending = max_pending
        # (bucket, key) -> the client to delete it with; insertion ordered, oldest first.
        self._pending: dict[tuple[str, str], Any] = {}

    async def write(
        self,
        client: Any,
        bucket: str,
        key: str,
        document: Mapping[str, Any],
        tags: Mapping[str, str],
    ) -> str | None:
        """Put the canary; returns its version id (None in an unversioned bucket)."""
        response = await client.put_object(
            Bucket=bucket,
            Key=key,
            Body=json.dumps(document, ensure_ascii=False).encode(),
            ContentType="application/json",
            Tagging=tagging(tags),
        )
        version = response.get("VersionId")
        return version if version and version != "null" else None

    async def delete(self, client: Any, bucket: str, key: str) -> ProbeError | None:
        """Delete every version of the canary now; on failure it is kept for a later run and
        the error returned."""
        try:
            await delete_all_versions(client, bucket, key)
        except ProbeError as err:
            self.defer(client, bucket, key)
            return err
        self._pending.pop((bucket, key), None)
        return None

    def defer(self, client: Any, bucket: str, key: str) -> None:
        """Delete the canary on a later run (e.g. a replica that may still land)."""
        self._pending[(bucket, key)] = client
        while len(self._pending) > self._max_pending:
            self._pending.pop(next(iter(self._pending)))

    def is_deferred(self, bucket: str, key: str) -> bool:
        return (bucket, key) in self._pending

    @property
    def pending(self) -> list[tuple[str, str]]:
        """(bucket, key) of the deletes kept for later, oldest first."""
        return list(self._pending)

    async def delete_deferred(self) -> None:
        """Retry the kept deletes; those that fail again stay."""
        for (bucket, key), client in list(self._pending.items()):
            try:
                await delete_all_versions(client, bucket, key)
            except ProbeError:
                continue
            self._pending.pop((bucket, key), None)

    async def sweep(
        self,
        client: Any,
        bucket: str,
        prefix: str,
        min_age: float,
        is_canary: Callable[[str], object],
    ) -> int | ProbeError:
        """Delete canaries under ``prefix`` older than ``min_age`` seconds whose key
        ``is_canary`` accepts (one listing page: bounded); returns how many, or the error."""
        if not prefix:
            return 0  # never sweep a whole bucket
        cutoff = datetime.now(UTC).timestamp() - min_age
        try:
            return await delete_versions_under(
                client, bucket, prefix, cutoff, is_canary, SWEEP_BATCH
            )
        except ProbeError as err:
            return err
