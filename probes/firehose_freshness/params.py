"""The ``firehose_freshness`` params."""

from __future__ import annotations

from pydantic import Field, JsonValue

from alivemcp.plumbing.aws import AwsSettings, aws_settings_field
from alivemcp.probe import Duration, ProbeParams

__all__ = ["CANARY_ID_FIELD", "FirehoseFreshnessParams"]

#: The canary record's field that carries its unique id, unless ``canary_id_field`` says.
CANARY_ID_FIELD = "alivemcp_canary"


class FirehoseFreshnessParams(ProbeParams):
    aws: AwsSettings = aws_settings_field(
        "AWS identity/region for Firehose, CloudWatch, the destination bucket and (for "
        "Kinesis-sourced streams) the source stream."
    )
    stream_name: str = Field(min_length=1, description="Delivery stream name.")
    degraded_above: Duration | None = Field(
        None,
        description="Freshness (metric and canary) above this is degraded; default: the "
        "buffer interval plus margin.",
    )
    down_above: Duration | None = Field(
        None,
        description="Freshness above this is down; default 900 s (the usual alarm), or the "
        "buffer interval plus twice the margin when that is larger.",
    )
    margin: Duration = Field(
        60.0, description="Allowance on top of the buffer interval for the default thresholds."
    )
    metric_period: Duration = Field(60.0, description="CloudWatch period (seconds, whole).")
    metric_periods: int = Field(
        5, ge=1, le=1440, description="How many whole periods (ending at the last one) to read."
    )
    canary: bool = Field(
        True,
        description="Put and verify a canary record: with PutRecord into a direct-PUT stream, "
        "or into the source Kinesis stream of a Kinesis-sourced one.",
    )
    canary_fields: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Fields merged into the canary's JSON record: the ones a dynamic "
        "partitioning query (JQ inline parsing) or a transformation Lambda reads, e.g. "
        "{tenant_id: alivemcp-canary}, so the canary routes to a partition of its own.",
    )
    canary_id_field: str = Field(
        CANARY_ID_FIELD,
        min_length=1,
        description="The canary field that carries its unique id (a field the transformation "
        "Lambda keeps, when it drops unknown fields); found as any value of the delivered "
        "record.",
    )
    partition_keys: dict[str, str] = Field(
        default_factory=dict,
        description="Values of the prefix's partition keys for the canary, by key name "
        "(!{partitionKeyFromQuery:k} and !{partitionKeyFromLambda:k}). Default for query keys: "
        "the stream's MetadataExtractionQuery evaluated over the canary when it has the simple "
        "{k: .path} form, else canary_fields[k]. Lambda keys must be given.",
    )
    expected_prefix: str | None = Field(
        None,
        description="Where the canary must land (what downstream tables expect), with the "
        "same !{timestamp:...} and !{partitionKeyFrom...:k} expressions the probe expands "
        "from the put time and partition keys; default: the destination's Prefix.",
    )
    partition_key: str | None = Field(
        None,
        description="Kinesis partition key of the canary put into the source stream of a "
        "Kinesis-sourced delivery stream (routes it to a shard); default alivemcp-canary-"
        "<check name>.",
    )
    canary_inline_wait: Duration = Field(
        5.0,
        description="When the buffer interval is at most this, look for the new canary within "
        "the same run for up to this long (zero-buffering streams).",
    )
    canary_max_objects: int = Field(
        20, ge=1, description="Delivered objects (oldest first since the put) scanned per run."
    )
    canary_max_object_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Decompressed bytes scanned per object (streamed, bounded memory).",
    )
    error_prefixes: list[str] | None = Field(
        None,
        description="Prefixes to watch for failed records; default: the static part of the "
        "destination's ErrorOutputPrefix, else processing-failed/, format-conversion-failed/, "
        "partitioning-failed/ and delivery-failed/.",
    )
    error_lookback: Duration = Field(
        900.0,
        description="On the first run, error objects younger than this count as new (older "
        "ones are history and do not alert).",
    )
    max_list_pages: int = Field(
        10, ge=1, description="ListObjectsV2 pages (1000 keys each) per prefix and run."
    )
