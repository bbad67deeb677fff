"""Set-up for the Firehose tests: streams, CloudWatch datapoints and delivery rewriters on moto.

moto delivers each PutRecord straight to S3 (no buffering, no compression, no transformation
Lambda, no error prefix). What real Firehose would do on top is done here, explicitly:
``rewrite_deliveries`` plays the transformation Lambda (or the compressor) on objects moto
delivered, error objects are written where Firehose would write them, and datapoints go into
the real ``AWS/Firehose`` namespace.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.runner import ProbeHandle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.moto import ACCOUNT_ID, REGION, MotoServer
from tests.support import this_minute

BUCKET = "mcp-events"
PREFIX = "tool-events/"
ERROR_PREFIX = "tool-events-errors/!{firehose:error-output-type}/"


def clients(moto: MotoServer) -> tuple[Any, Any, Any]:
    kwargs = moto.boto3_kwargs()
    return (
        boto3.client("s3", **kwargs),
        boto3.client("firehose", **kwargs),
        boto3.client("cloudwatch", **kwargs),
    )


def create_stream(
    moto: MotoServer,
    name: str,
    *,
    interval: int = 0,
    compression: str = "UNCOMPRESSED",
    bucket: str = BUCKET,
) -> None:
    """A direct-PUT stream into ``bucket`` under ``tool-events/`` (the seed's layout)."""
    s3, firehose, _ = clients(moto)
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        s3.create_bucket(Bucket=bucket)
    firehose.create_delivery_stream(
        DeliveryStreamName=name,
        DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": f"arn:aws:iam::{ACCOUNT_ID}:role/firehose-delivery",
            "BucketARN": f"arn:aws:s3:::{bucket}",
            "Prefix": PREFIX,
            "ErrorOutputPrefix": ERROR_PREFIX,
            "BufferingHints": {"IntervalInSeconds": interval, "SizeInMBs": 1},
            "CompressionFormat": compression,
        },
    )


def put_metric(moto: MotoServer, stream: str, name: str, value: float) -> None:
    """One datapoint in the last whole minute (the probe reads whole, aligned periods)."""
    _, _, cloudwatch = clients(moto)
    last_whole = datetime.fromtimestamp(this_minute(), UTC) - timedelta(seconds=30)
    cloudwatch.put_metric_data(
        Namespace="AWS/Firehose",
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": "DeliveryStreamName", "Value": stream}],
                "Timestamp": last_whole,
                "Value": value,
            }
        ],
    )


def set_stream_status(stream: str, status: str) -> None:
    """Put moto's own stream object in another state; DescribeDeliveryStream over HTTP then
    reports it (moto creates streams ACTIVE at once and has no API that changes the status)."""
    from moto.firehose.models import firehose_backends

    firehose_backends[ACCOUNT_ID][REGION].delivery_streams[stream].delivery_stream_status = status


def write_error_objects(moto: MotoServer, count: int, kind: str = "processing-failed") -> list[str]:
    s3, _, _ = clients(moto)
    keys = [f"tool-events-errors/{kind}/2026/11/29/10/mcp-{i}" for i in range(count)]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b'{"errorCode":"Lambda.FunctionError"}\n')
    return keys


def rewrite_deliveries(moto: MotoServer, transform: Callable[[bytes], bytes]) -> int:
    """Apply ``transform`` to every delivered object under the prefix, as a transformation
    Lambda (or Firehose's compression) would have before the bytes landed."""
    s3, _, _ = clients(moto)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX).get("Contents", [])
    for obj in listed:
        body = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
        s3.put_object(Bucket=BUCKET, Key=obj["Key"], Body=transform(body))
    return len(listed)


def drop_deliveries(moto: MotoServer) -> int:
    s3, _, _ = clients(moto)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX).get("Contents", [])
    for obj in listed:
        s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
    return len(listed)


def base64_twice(body: bytes) -> bytes:
    """The Lambda returned base64 of the base64 record: S3 gets base64 text."""
    return base64.b64encode(body)


def without_newline(body: bytes) -> bytes:
    """The Lambda forgot the newline: records run together in the object."""
    return b'{"tool":"other","ok":true}' + body.rstrip(b"\n")


def gzipped(body: bytes) -> bytes:
    return gzip.compress(body)


def params(moto: MotoServer, stream: str, **extra: Any) -> dict[str, Any]:
    return {"aws": moto.aws_params(), "stream_name": stream, **extra}


@asynccontextmanager
async def stepped_check(
    probe: str, check_params: dict[str, Any], *, timeout: float = 30.0, interval: float = 60.0
) -> AsyncIterator[ProbeHandle]:
    """One check built exactly as the daemon builds it (config validation + runner), kept
    alive so a test can act on the world between runs (``await handle.run()``)."""
    doc = {
        "checks": [
            {
                "name": "t",
                "probe": probe,
                "interval": interval,
                "timeout": timeout,
                "params": check_params,
            }
        ]
    }
    loaded = load_config_text(yaml.safe_dump(doc), env={})
    plumbing = Plumbing()
    handle = build_handle(loaded.checks[0], plumbing)
    try:
        yield handle
    finally:
        await handle.teardown()
        await plumbing.aclose()
