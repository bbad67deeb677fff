"""Demo part: a Managed Service for Apache Flink application on moto, RUNNING and fed.

The application reads the demo's Kinesis stream (``demo_kinesis``). moto's
``kinesisanalyticsv2`` creates and describes applications but cannot start them (they stay
STARTING), so this part puts moto's own application object in RUNNING, as AWS would after
``StartApplication``; moto runs in this process (``MotoServer`` is a threaded server), so its
backend is at hand. The probe still reads the application over HTTP with
``DescribeApplication``.

moto publishes no metrics, so this part also feeds, once a minute, what AWS would publish: the
stream's ``AWS/Kinesis`` ``IncomingRecords`` (the application's input: without it the probe
calls a RUNNING application idle) and the job's ``AWS/KinesisAnalytics`` ``uptime``,
``fullRestarts``, ``numberOfFailedCheckpoints`` and ``lastCheckpointDuration``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from datetime import UTC, datetime
from typing import Any

from alivemcp.plumbing.aws import AwsClients
from alivemcp.testbed import demo_kinesis
from alivemcp.testbed.moto import ACCOUNT_ID, REGION, moto_settings
from alivemcp.testbed.stack import DemoStack

__all__ = ["start"]

APPLICATION = "demo-mcp-tool-analytics"
#: Parallelism 4 at 2 per KPU: 2 KPUs for the job, plus the orchestration KPU AWS bills.
PARALLELISM = 4
PARALLELISM_PER_KPU = 2
#: Seconds between metric datapoints (CloudWatch's standard resolution).
FEED_EVERY = 60.0


async def start(stack: DemoStack) -> None:
    source_stream = stack.env.get("DEMO_KINESIS_STREAM", demo_kinesis.STREAM)
    settings = moto_settings(stack.moto.url)
    clients = AwsClients()
    stack.add_cleanup(clients.aclose)
    flink = await clients.client("kinesisanalyticsv2", settings)
    await flink.create_application(
        ApplicationName=APPLICATION,
        RuntimeEnvironment="FLINK-1_20",
        ServiceExecutionRole=f"arn:aws:iam::{ACCOUNT_ID}:role/demo-flink-service",
        ApplicationConfiguration={
            "FlinkApplicationConfiguration": {
                "CheckpointConfiguration": {"ConfigurationType": "DEFAULT"},
                # moto describes the parallelism only when monitoring is configured too.
                "MonitoringConfiguration": {
                    "ConfigurationType": "CUSTOM",
                    "MetricsLevel": "APPLICATION",
                },
                "ParallelismConfiguration": {
                    "ConfigurationType": "CUSTOM",
                    "Parallelism": PARALLELISM,
                    "ParallelismPerKPU": PARALLELISM_PER_KPU,
                    "AutoScalingEnabled": True,
                },
            }
        },
    )
    _set_running(APPLICATION)
    cloudwatch = await clients.client("cloudwatch", settings)
    feeder = _MetricFeeder(cloudwatch, source_stream, started=time.time())
    # The first datapoints before the daemon's first run: a RUNNING application without any
    # input would be judged idle.
    await feeder.feed_once()
    task = asyncio.create_task(feeder.run(), name="demo-flink-metrics")

    async def stop_feeder() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.add_cleanup(stop_feeder)  # runs before clients.aclose (cleanups run in reverse)
    stack.set_env("DEMO_FLINK_APPLICATION", APPLICATION)
    stack.set_env("DEMO_FLINK_SOURCE_STREAM", source_stream)
    stack.note(
        f"Flink: application {APPLICATION} RUNNING on moto, reading stream "
        f"{source_stream} (input and job metrics fed once a minute)"
    )


def _set_running(name: str) -> None:
    """What StartApplication would do, on moto's in-process application object."""
    from moto.kinesisanalyticsv2.models import kinesisanalyticsv2_backends

    kinesisanalyticsv2_backends[ACCOUNT_ID][REGION].applications[
        name
    ].application_status = "RUNNING"


class _MetricFeeder:
    def __init__(self, cloudwatch: Any, source_stream: str, *, started: float) -> None:
        self._cloudwatch = cloudwatch
        self._stream = source_stream
        self._started = started

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FEED_EVERY)
            await self.feed_once()

    async def feed_once(self) -> None:
        now = datetime.now(UTC)
        stream = [{"Name": "StreamName", "Value": self._stream}]
        job = [{"Name": "Application", "Value": APPLICATION}]
        uptime_ms = (time.time() - self._started) * 1000.0
        try:
            await self._cloudwatch.put_metric_data(
                Namespace="AWS/Kinesis",
                MetricData=[
                    {
                        "MetricName": "IncomingRecords",
                        "Dimensions": stream,
                        "Timestamp": now,
                        "Value": float(random.randint(400, 900)),
                        "Unit": "Count",
                    },
                ],
            )
            await self._cloudwatch.put_metric_data(
                Namespace="AWS/KinesisAnalytics",
                MetricData=[
                    {
                        "MetricName": "uptime",
                        "Dimensions": job,
                        "Timestamp": now,
                        "Value": uptime_ms,
                        "Unit": "Milliseconds",
                    },
                    {
                        "MetricName": "fullRestarts",
                        "Dimensions": job,
                        "Timestamp": now,
                        "Value": 0.0,
                        "Unit": "Count",
                    },
                    {
                        "MetricName": "numberOfFailedCheckpoints",
                        "Dimensions": job,
                        "Timestamp": now,
                        "Value": 0.0,
                        "Unit": "Count",
                    },
                    {
                        "MetricName": "lastCheckpointDuration",
                        "Dimensions": job,
                        "Timestamp": now,
                        "Value": 800 + random.uniform(0, 700),
                        "Unit": "Milliseconds",
                    },
                ],
            )
        except Exception as exc:  # the demo keeps running without metrics
            print(f"demo flink metrics: {type(exc).__name__}: {exc}")
