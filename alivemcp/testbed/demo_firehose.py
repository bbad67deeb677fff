"""Demo part: a direct-PUT Firehose stream on moto, checked with a canary record.

moto delivers every record to S3 at once and publishes no metrics, so this part also feeds
``AWS/Firehose`` DataFreshness/Success datapoints into moto's CloudWatch once a minute (what
Firehose itself publishes), letting the demo show the metric half of the probe too.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import UTC, datetime

from alivemcp.plumbing.aws import AwsClients
from alivemcp.testbed.moto import ACCOUNT_ID, moto_settings
from alivemcp.testbed.stack import DemoStack

__all__ = ["start"]

STREAM = "demo-mcp-tool-events"
BUCKET = "demo-firehose-events"
#: Seconds between metric datapoints (CloudWatch's standard resolution).
FEED_EVERY = 60.0


async def start(stack: DemoStack) -> None:
    settings = moto_settings(stack.moto.url)
    clients = AwsClients()
    stack.add_cleanup(clients.aclose)
    s3 = await clients.client("s3", settings)
    firehose = await clients.client("firehose", settings)
    await s3.create_bucket(Bucket=BUCKET)
    await firehose.create_delivery_stream(
        DeliveryStreamName=STREAM,
        DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": f"arn:aws:iam::{ACCOUNT_ID}:role/demo-firehose-delivery",
            "BucketARN": f"arn:aws:s3:::{BUCKET}",
            "Prefix": "tool-events/",
            "ErrorOutputPrefix": "tool-events-errors/!{firehose:error-output-type}/",
            "BufferingHints": {"IntervalInSeconds": 60, "SizeInMBs": 5},
            "CompressionFormat": "UNCOMPRESSED",
        },
    )
    cloudwatch = await clients.client("cloudwatch", settings)
    feeder = asyncio.create_task(_feed_metrics(cloudwatch), name="demo-firehose-metrics")

    async def stop_feeder() -> None:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder

    stack.add_cleanup(stop_feeder)  # runs before clients.aclose (cleanups run in reverse)
    stack.set_env("DEMO_FIREHOSE_STREAM", STREAM)
    stack.note(f"Firehose: stream {STREAM} -> s3://{BUCKET}/tool-events/ (canary every run)")


async def _feed_metrics(cloudwatch: object) -> None:
    dims = [{"Name": "DeliveryStreamName", "Value": STREAM}]
    while True:
        now = datetime.now(UTC)
        try:
            await cloudwatch.put_metric_data(  # type: ignore[attr-defined]
                Namespace="AWS/Firehose",
                MetricData=[
                    {
                        "MetricName": "DeliveryToS3.DataFreshness",
                        "Dimensions": dims,
                        "Timestamp": now,
                        "Value": 60 + random.uniform(0, 20),
                        "Unit": "Seconds",
                    },
                    {
                        "MetricName": "DeliveryToS3.Success",
                        "Dimensions": dims,
                        "Timestamp": now,
                        "Value": 1.0,
                    },
                ],
            )
        except Exception as exc:  # the demo keeps running without metrics
            print(f"demo firehose metrics: {type(exc).__name__}: {exc}")
        await asyncio.sleep(FEED_EVERY)
