"""One canary lifecycle for every probe that writes test data into the system it watches.

A canary is named after its check (:func:`check_slug`) with a unique part, carries the same
JSON fields wherever it goes (:func:`canary_document`), and in S3 is tagged so a lifecycle
rule can expire what the prober leaves behind. :class:`S3Canaries` writes canary objects and
removes them: every version and delete marker (canaries live in versioned buckets, where a
plain delete only adds a marker), deletes that fail are kept for the next run (bounded), and
a start-up sweep removes leftovers older than ``sweep_min_age`` from a crash.

The params every canary probe shares are declared with the field functions below, so their
names, defaults and descriptions are the same in every probe.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pydantic import Field

from alivemcp.errors import ProbeError
from alivemcp.plumbing.s3 import delete_all_versions, delete_versions_under

__all__ = [
    "CANARY_TAG",
    "MAX_PENDING_DELETES",
    "S3Canaries",
    "canary_body_fields_field",
    "canary_cleanup_field",
    "canary_document",
    "canary_sweep_min_age_field",
    "canary_tags_field",
    "check_slug",
    "run_to_completion",
    "tagging",
]

#: The tag key on every canary object.
CANARY_TAG = "alivemcp-canary"
#: Deletes remembered for later runs; older ones are left to the start-up sweep.
MAX_PENDING_DELETES = 50
#: Most versions one sweep deletes, so a huge leftover pile cannot stall a start.
SWEEP_BATCH = 1000
_UNSAFE_KEY_PART = re.compile(r"[^A-Za-z0-9._-]+")


# --- params ----------------------------------------------------------------------------------


def canary_tags_field(kind: str) -> Any:
    """``tags``: object tags on every canary, default ``{alivemcp-canary: <kind>}``."""
    return Field(
        default_factory=lambda: {CANARY_TAG: kind},
        description="Tags on every canary, so a lifecycle rule can expire leftovers.",
    )


def canary_body_fields_field() -> Any:
    """``body_fields``: extra string fields in the canary's JSON body."""
    return Field(
        default_factory=dict, description="Extra string fields added to the canary's JSON body."
    )


def canary_cleanup_field() -> Any:
    """``cleanup``: delete each canary (every version) after its run."""
    return Field(True, description="Delete each canary (every version) after its run.")


def canary_sweep_min_age_field() -> Any:
    """``sweep_min_age``: leftovers older than this are swept on start."""
    return Field(
        600.0,
        description="Leftover canaries older than this are swept on start (younger ones may "
        "belong to a run in flight elsewhere).",
    )


# --- naming and body -------------------------------------------------------------------------


def check_slug(check_name: str) -> str:
    """The check's name as a key part: letters, digits, ``.``, ``_`` and ``-`` only."""
    return _UNSAFE_KEY_PART.sub("-", check_name).strip("-") or "check"


def canary_document(
    probe: str,
    check: str,
    *,
    fields: Mapping[str, Any] | None = None,
    body_fields: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A canary's JSON body: who wrote it and when, the probe's own ``fields``, then the
    user's ``body_fields``."""
    now = datetime.now(UTC)
    return {
        "probe": probe,
        "check": check,
        "written_at": now.isoformat(),
        "written_at_epoch": now.timestamp(),
        **(fields or {}),
        **(body_fields or {}),
    }


def tagging(tags: Mapping[str, str]) -> str:
    """Tags as S3's ``Tagging`` parameter (URL query encoding)."""
    return urlencode(dict(tags))


async def run_to_completion(coro: Coroutine[Any, Any, None]) -> None:
    """Await a clean-up that must finish even when the run is cancelled at its timeout (the
    clean-up goes on in the background; the cancellation still reaches the caller)."""
    await asyncio.shield(asyncio.ensure_future(coro))


# --- S3 canary objects -----------------------------------------------------------------------


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
