"""One canary lifecycle for every probe that writes test data into the system it watches.

A canary is named after its check (:func:`check_slug`) with a unique part, carries the same
JSON fields wherever it goes (:func:`document`), and is tagged (:func:`tagging`) so a
lifecycle rule can expire what the prober leaves behind; its clean-up runs to completion even
when the run is cancelled (:func:`run_to_completion`). The params every canary probe shares
are declared with the field functions below, so their names, defaults and descriptions are the
same in every probe.

Canary objects in S3 (written, every version deleted, failed deletes kept for a later run,
the start-up sweep) are :class:`alivemcp.plumbing.s3.S3Canaries`: the S3 calls live in the S3
plumbing, so deploy/iam's policies, derived from the calls in a probe and the plumbing it
imports, grant them only to the probes that use them.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pydantic import Field

__all__ = [
    "CANARY_TAG",
    "body_fields_field",
    "check_slug",
    "cleanup_field",
    "document",
    "nonce",
    "run_to_completion",
    "sweep_min_age_field",
    "tagging",
    "tags_field",
]

#: The tag key on every canary object.
CANARY_TAG = "alivemcp-canary"
_UNSAFE_KEY_PART = re.compile(r"[^A-Za-z0-9._-]+")


# --- params ----------------------------------------------------------------------------------


def tags_field(kind: str) -> Any:
    """``tags``: object tags on every canary, default ``{alivemcp-canary: <kind>}``."""
    return Field(
        default_factory=lambda: {CANARY_TAG: kind},
        description="Tags on every canary, so a lifecycle rule can expire leftovers.",
    )


def body_fields_field() -> Any:
    """``body_fields``: extra string fields in the canary's JSON body."""
    return Field(
        default_factory=dict, description="Extra string fields added to the canary's JSON body."
    )


def cleanup_field() -> Any:
    """``cleanup``: delete each canary (every version) after its run."""
    return Field(True, description="Delete each canary (every version) after its run.")


def sweep_min_age_field() -> Any:
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


def nonce() -> str:
    """The unique part of one canary's name (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def document(
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
