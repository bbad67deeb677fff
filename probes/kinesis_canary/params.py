"""The ``kinesis_canary`` params: the stream, the checks to run, and the consumer's markers."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from alivemcp.plumbing import canary
from alivemcp.plumbing.aws import AwsSettings, aws_settings_field
from alivemcp.probe import Duration, ProbeParams

__all__ = [
    "ConsumerParams",
    "DynamoDbMarker",
    "KinesisCanaryParams",
    "Marker",
    "OutputStreamMarker",
    "S3Marker",
    "describe_marker",
]


def _needs_id(template: str) -> str:
    if "{id}" not in template:
        raise ValueError("the marker name must contain {id} (the canary's id)")
    return template


#: A marker's name: a template that must contain ``{id}`` (the canary's id).
_MarkerName = Annotated[str, AfterValidator(_needs_id)]


class S3Marker(ProbeParams):
    """The consumer writes an S3 object named after the canary's id."""

    type: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket the consumer writes markers to.")
    key_template: _MarkerName = Field(
        "alivemcp-canary/kinesis/{id}",
        description="Marker key, with {id} (the canary id, as in the record's "
        "alivemcp_canary field).",
    )
    delete: bool = Field(True, description="Delete each marker once seen (and late ones).")


class DynamoDbMarker(ProbeParams):
    """The consumer writes a DynamoDB item keyed by the canary's id."""

    type: Literal["dynamodb"]
    table: str = Field(min_length=3, description="Table the consumer writes markers to.")
    key_attribute: str = Field("id", min_length=1, description="The table's (string) hash key.")
    key_template: _MarkerName = Field("{id}", description="Key value, with {id} (the canary id).")
    delete: bool = Field(True, description="Delete each marker item once seen (and late ones).")


class OutputStreamMarker(ProbeParams):
    """The consumer writes a record holding the canary's id to another Kinesis stream."""

    type: Literal["output_stream"]
    stream_name: str = Field(min_length=1, description="The consumer's output stream.")
    max_shards: int = Field(100, ge=1, le=10000, description="Output shards read at most.")


Marker = Annotated[S3Marker | DynamoDbMarker | OutputStreamMarker, Field(discriminator="type")]


class ConsumerParams(ProbeParams):
    marker: Marker = Field(description="Where the consumer says it processed a canary.")
    sla: Duration = Field(
        30.0,
        description="How long after the put each shard's marker may take (the check's "
        "timeout must exceed it).",
    )
    poll_interval: Duration = Field(1.0, description="How often markers are looked for.")


class KinesisCanaryParams(ProbeParams):
    aws: AwsSettings = aws_settings_field(
        "AWS identity/region for Kinesis, CloudWatch and the marker store."
    )
    stream_name: str = Field(min_length=1, description="The data stream.")
    readback: bool = Field(True, description="Read every canary back with GetRecords.")
    readback_timeout: Duration = Field(
        5.0, description="How long a canary may take to be readable from its shard."
    )
    throttle_down_after: int = Field(
        3,
        ge=1,
        description="Consecutive runs that meet throttling before it is down "
        "(before that: degraded).",
    )
    max_shards: int = Field(
        1000,
        ge=1,
        le=10000,
        description="Open shards written per run at most (the rest are named in the details).",
    )
    consumer: ConsumerParams | None = Field(
        None, description="Consumer liveness: wait for the consumer's marker of each canary."
    )
    metrics: bool = Field(True, description="Read the stream's CloudWatch metrics.")
    metric_period: Duration = Field(60.0, description="CloudWatch period (seconds, whole).")
    metric_periods: int = Field(
        5, ge=1, le=1440, description="How many whole periods (ending at the last) to read."
    )
    iterator_age_degraded_above: Duration | None = Field(
        300.0,
        description="GetRecords.IteratorAgeMilliseconds (maximum) above this is "
        "degraded: a consumer is falling behind (None: not judged).",
    )
    iterator_age_down_above: Duration | None = Field(
        None, description="Iterator age above this is down (None: never down on it)."
    )
    write_throttle_periods: int = Field(
        3,
        ge=1,
        description="WriteProvisionedThroughputExceeded above zero in each of the "
        "last this many periods is degraded.",
    )
    body_fields: dict[str, str] = canary.body_fields_field()


def describe_marker(marker: S3Marker | DynamoDbMarker | OutputStreamMarker) -> str:
    """Where the markers are, for reasons."""
    if isinstance(marker, S3Marker):
        return f"s3://{marker.bucket}/{marker.key_template}"
    if isinstance(marker, DynamoDbMarker):
        return f"DynamoDB table {marker.table}"
    return f"output stream {marker.stream_name}"
