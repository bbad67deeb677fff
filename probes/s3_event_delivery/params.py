"""The ``s3_event_delivery`` params: the bucket, the queue, the canary key and the marker."""

from __future__ import annotations

import string

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.plumbing import canary
from alivemcp.plumbing.aws import AwsSettings, aws_settings_field
from alivemcp.probe import Duration, ProbeParams

__all__ = ["EndToEnd", "S3EventDeliveryParams"]

_KEY_FIELDS = frozenset({"prefix", "check", "nonce", "epoch"})
_MARKER_FIELDS = frozenset({"key", "nonce", "basename"})


def _template_fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


class EndToEnd(BaseModel):
    """Wait for the downstream worker's proof that it processed the canary."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    marker_key_template: str = Field(
        description="Key of the marker the worker writes, with {key} (the canary key exactly), "
        "{nonce} or {basename}; e.g. 'processed/{key}.done'."
    )
    marker_bucket: str | None = Field(None, description="Bucket of the marker (default: bucket).")
    limit: Duration = Field(120.0, description="How long to wait for the marker.")
    delete_marker: bool = Field(True, description="Delete the marker after the run.")

    @field_validator("marker_key_template")
    @classmethod
    def _marker_fields(cls, value: str) -> str:
        fields = _template_fields(value)
        if unknown := fields - _MARKER_FIELDS:
            raise ValueError(
                f"unknown placeholders {sorted(unknown)}; use {sorted(_MARKER_FIELDS)}"
            )
        if not fields:
            raise ValueError("the marker key must depend on the canary: use {key} or {nonce}")
        return value


class S3EventDeliveryParams(ProbeParams):
    bucket: str = Field(min_length=3, description="Bucket the canary is uploaded to.")
    queue_url: str | None = Field(
        None,
        description="Canary SQS queue receiving the bucket's events (directly, via SNS or via "
        "EventBridge). Use a dedicated queue: on a shared one, others' messages are made "
        "visible again at once but each receive still counts towards their redrive "
        "maxReceiveCount, and a worker may consume the canary's event first. Optional in "
        "end-to-end mode.",
    )
    aws: AwsSettings = aws_settings_field()
    queue_aws: AwsSettings | None = Field(
        None, description="Identity/region for the queue (default: aws)."
    )
    prefix: str = Field(
        "alivemcp-canary/events/",
        min_length=1,
        description="Key prefix of canaries; must match the notification's prefix filter.",
    )
    key_template: str = Field(
        "{prefix}{check}/{nonce} canary café.json",
        description="Canary key: {prefix}, {check}, {nonce} (required), {epoch}. Keep a space "
        "and a non-ASCII character in it: they are what catches key-decoding bugs.",
    )
    limit: Duration = Field(
        120.0,
        description="How long to wait for the event; the check's timeout must exceed the "
        "longest wait by 10 s (default timeout 135 s) and its interval the timeout.",
    )
    degraded_after: Duration | None = Field(
        None, description="Delivery slower than this is degraded (default: never)."
    )
    receive_visibility: int = Field(
        5,
        ge=1,
        le=60,
        description="Visibility timeout of received messages: the longest a foreign message "
        "stays hidden if the prober dies before releasing it.",
    )
    tags: dict[str, str] = canary.tags_field("event-delivery")
    body_fields: dict[str, str] = canary.body_fields_field()
    cleanup: bool = canary.cleanup_field()
    sweep_min_age: Duration = canary.sweep_min_age_field()
    end_to_end: EndToEnd | None = Field(
        None, description="Also wait for the worker's marker object (see EndToEnd)."
    )

    @field_validator("key_template")
    @classmethod
    def _key_fields(cls, value: str) -> str:
        fields = _template_fields(value)
        if unknown := fields - _KEY_FIELDS:
            raise ValueError(f"unknown placeholders {sorted(unknown)}; use {sorted(_KEY_FIELDS)}")
        if "nonce" not in fields:
            raise ValueError("the key template needs {nonce} (every canary key is unique)")
        return value

    @model_validator(mode="after")
    def _something_to_wait_for(self) -> S3EventDeliveryParams:
        if self.queue_url is None and self.end_to_end is None:
            raise ValueError("set queue_url, end_to_end, or both")
        return self

    def queue_settings(self) -> AwsSettings:
        return self.queue_aws or self.aws
