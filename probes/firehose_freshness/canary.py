"""The canary record: what is put, where it must land, and the verdict on it once found.

A canary is a JSON record with a unique id (:func:`canary_record`); where it must land is the
expected prefix expanded with :func:`partition_values`. A found canary becomes a
:class:`CanaryVerdict` through :func:`resolve` (delivered intact, garbled, under another
partition, in the error output); one not found by the limit through :func:`not_delivered`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from alivemcp.probe import Status
from probes.firehose_freshness.delivery import DeliveryCheck
from probes.firehose_freshness.params import FirehoseFreshnessParams
from probes.firehose_freshness.prefixes import (
    ERROR_TYPES,
    Destination,
    ExpandedPrefix,
    UnresolvedKey,
    jq_partition_keys,
    partition_expressions,
)

__all__ = [
    "FORMAT_NAME",
    "Canary",
    "CanaryVerdict",
    "Hit",
    "canary_record",
    "canary_skipped",
    "not_delivered",
    "partition_values",
    "resolve",
]

FORMAT_NAME = {"parquet": "Parquet", "orc": "ORC"}


@dataclass
class Canary:
    record_id: str
    put_at: datetime
    #: Where the record was put, for reasons: "Kinesis stream X (partition key K)"...
    put_into: str
    expected: list[ExpandedPrefix]
    scanned: set[str] = field(default_factory=set)
    saw_binary: bool = False

    @property
    def expected_shown(self) -> str:
        # The put-time expansion (the list holds a moment either side for hour boundaries).
        return self.expected[min(1, len(self.expected) - 1)].shown


@dataclass
class CanaryVerdict:
    record_id: str
    status: Status
    reason: str
    freshness: float | None = None
    key: str | None = None
    #: What "delivered" meant for this canary, for the all-well reason.
    summary: str | None = None
    verified: str | None = None


@dataclass
class Hit:
    key: str
    modified: datetime
    check: DeliveryCheck
    #: "expected", "elsewhere" (another prefix of the stream) or "error" (the error output).
    place: str = "expected"
    size: int = 0


def canary_record(
    params: FirehoseFreshnessParams, check: str, record_id: str, put_at: datetime
) -> dict[str, Any]:
    record: dict[str, Any] = {"sent_at": put_at.isoformat(), "check": check}
    record.update(params.canary_fields)
    record[params.canary_id_field] = record_id  # last: no canary field can overwrite the id
    return record


def partition_values(
    params: FirehoseFreshnessParams, dest: Destination, record: Mapping[str, Any]
) -> dict[str, str]:
    """Values for the partition expressions of the expected prefix (and the query keys of
    the stream's own prefix, which Firehose will compute); raises UnresolvedKey."""
    p = params
    computed = jq_partition_keys(dest.metadata_query, record) if dest.metadata_query else None
    values: dict[str, str] = {}
    expected = partition_expressions(p.expected_prefix or dest.prefix)
    for expr in dict.fromkeys([*expected, *partition_expressions(dest.prefix)]):
        kind, _, key = expr.partition(":")
        value = p.partition_keys.get(key)
        if value is None and kind == "partitionKeyFromQuery":
            if computed is not None:
                value = computed.get(key)
            elif _scalar(p.canary_fields.get(key)):
                value = _key_text(p.canary_fields[key])
        if value is not None:
            values[expr] = value
        elif expr in expected or computed is not None:
            # Firehose itself would fail to partition this canary (the query finds no
            # value): it would only add an object under partitioning-failed/.
            raise UnresolvedKey(f"!{{{expr}}}")
    return values


def canary_skipped(dest: Destination, stream_type: str, source_arn: str | None) -> str | None:
    """Why no canary can be put or found for this stream (None: it can)."""
    if stream_type == "KinesisStreamAsSource" and source_arn is None:
        return "the stream reads from Kinesis but names no source stream"
    if stream_type not in ("DirectPut", "KinesisStreamAsSource"):
        return f"the stream's source is {stream_type} (only direct PUT and Kinesis are written)"
    if not dest.columnar and dest.compression not in ("UNCOMPRESSED", "GZIP"):
        return f"cannot read {dest.compression} objects"
    return None


def resolve(canary: Canary, dest: Destination, hit: Hit) -> CanaryVerdict:
    """The verdict on a canary that was found."""
    freshness = max(0.0, (hit.modified - canary.put_at).total_seconds())
    rid = canary.record_id
    if hit.place == "error":
        kind = next((k for k in ERROR_TYPES if k in hit.key), "error output")
        return CanaryVerdict(
            rid,
            Status.DOWN,
            (
                f"canary record {rid} put into {canary.put_into} was written to the error output "
                f"s3://{dest.bucket}/{hit.key} ({kind}) instead of "
                f"s3://{dest.bucket}/{canary.expected_shown}{_ERROR_HINT.get(kind, '')}"
            ),
            freshness,
            hit.key,
        )
    if hit.place == "elsewhere":
        found = hit.key.rsplit("/", 1)[0] + "/" if "/" in hit.key else ""
        garbled = f"; also {hit.check.problem}" if hit.check.problem else ""
        return CanaryVerdict(
            rid,
            Status.DOWN,
            (
                f"canary record {rid} put into {canary.put_into} landed under "
                f"s3://{dest.bucket}/{found}, not under the expected "
                f"s3://{dest.bucket}/{canary.expected_shown}: the stream's prefix or partition "
                f"keys (stream prefix {dest.prefix!r}) route it elsewhere than expected{garbled}"
            ),
            freshness,
            hit.key,
        )
    if hit.check.problem:
        return CanaryVerdict(rid, Status.DOWN, hit.check.problem, freshness, hit.key)
    if dest.columnar:
        name = FORMAT_NAME[dest.columnar]
        summary = (
            f"{name} object under the canary's prefix in {freshness:.0f}s "
            "(magic bytes checked, rows not decoded)"
        )
        verified = (
            f"a complete {name} file ({hit.size} bytes, magic bytes at both ends) appeared "
            f"under s3://{dest.bucket}/{canary.expected_shown} {freshness:.0f}s after the "
            f"canary was put into {canary.put_into}; its rows are not decoded, so that it "
            "holds the canary is not verified"
        )
    else:
        summary = f"canary delivered in {freshness:.0f}s"
        verified = f"canary's JSON line intact under s3://{dest.bucket}/{canary.expected_shown}"
    return CanaryVerdict(
        rid, Status.UP, "delivered", freshness, hit.key, summary=summary, verified=verified
    )


def not_delivered(
    canary: Canary, dest: Destination, age: float, down_above: float
) -> CanaryVerdict:
    """The verdict on a canary not found anywhere by the ``down`` limit."""
    return CanaryVerdict(
        canary.record_id,
        Status.DOWN,
        f"canary record {canary.record_id} put into {canary.put_into} not found under "
        f"s3://{dest.bucket}/{canary.expected_shown} after {age:.0f}s "
        f"(limit {down_above:.0f}s): records are not being delivered"
        + (
            " (objects delivered since hold undecodable bytes: a transformation Lambda "
            "returning plain text where base64 was due garbles records this way)"
            if canary.saw_binary
            else ""
        ),
    )


_ERROR_HINT = {
    "partitioning-failed": ": dynamic partitioning could not compute its partition keys "
    "(the query or Lambda found no value)",
    "format-conversion-failed": ": the record could not be converted to the table's format "
    "(not JSON the schema accepts: a transformation Lambda "
    "returning base64 or plain text does this)",
    "processing-failed": ": the transformation Lambda failed or returned ProcessingFailed",
    "delivery-failed": ": S3 refused the delivery (bucket policy, KMS key, bucket gone)",
}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _key_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
