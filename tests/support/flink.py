"""Set-up for the ``flink_application`` tests: applications, job metrics and the prober's IAM
identity on moto, reached by the probe over HTTP exactly as it reaches AWS.

moto's ``kinesisanalyticsv2`` creates and describes applications but never leaves STARTING
(``StartApplication``/``StopApplication`` are not implemented), and it answers a
``DescribeApplication`` of a missing application with a bare 500. What AWS would do instead
is done here, on moto's own objects in this process: ``set_status`` puts an application in
the state AWS would have reached, and ``aws_says_not_found`` makes the missing application
a ``ResourceNotFoundException``, as AWS answers it. Job metrics go into the real
``AWS/KinesisAnalytics`` and ``AWS/Kinesis`` namespaces with ``put_metric_data``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3

from alivemcp.testbed.moto import ACCOUNT_ID, REGION, MotoServer
from tests.support import this_minute

APP = "mcp-analytics"
STREAM = "mcp-tool-events"
JOB_NAMESPACE = "AWS/KinesisAnalytics"


def create_application(
    moto: MotoServer,
    name: str = APP,
    *,
    parallelism: int = 4,
    per_kpu: int = 2,
    autoscaling: bool = True,
    status: str = "RUNNING",
) -> None:
    """A Flink application with custom parallelism (4 at 2 per KPU: 2 KPUs for the job, plus
    one for orchestration), checkpointing every 60 s, in ``status``."""
    client = boto3.client("kinesisanalyticsv2", **moto.boto3_kwargs())
    client.create_application(
        ApplicationName=name,
        RuntimeEnvironment="FLINK-1_20",
        ServiceExecutionRole=f"arn:aws:iam::{ACCOUNT_ID}:role/flink-service",
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
                    "Parallelism": parallelism,
                    "ParallelismPerKPU": per_kpu,
                    "AutoScalingEnabled": autoscaling,
                },
            }
        },
    )
    set_status(name, status)


def set_status(name: str, status: str) -> None:
    """Put moto's application object in ``status``; DescribeApplication over HTTP then
    reports it (moto has no StartApplication/StopApplication)."""
    from moto.kinesisanalyticsv2.models import kinesisanalyticsv2_backends

    backend = kinesisanalyticsv2_backends[ACCOUNT_ID][REGION]
    backend.applications[name].application_status = status


def put_points(
    moto: MotoServer,
    namespace: str,
    metric: str,
    dimensions: dict[str, str],
    points: Sequence[tuple[float, float]],
) -> None:
    """Datapoints ``(minutes_ago, value)``, each at the start of that whole minute."""
    cloudwatch = boto3.client("cloudwatch", **moto.boto3_kwargs())
    minute = this_minute()
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": metric,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
                "Timestamp": datetime.fromtimestamp(minute - int(ago * 60), UTC),
                "Value": value,
            }
            for ago, value in points
        ],
    )


def job_metric(
    moto: MotoServer, metric: str, points: Sequence[tuple[float, float]], app: str = APP
) -> None:
    put_points(moto, JOB_NAMESPACE, metric, {"Application": app}, points)


def incoming_records(
    moto: MotoServer, points: Sequence[tuple[float, float]], stream: str = STREAM
) -> None:
    put_points(moto, "AWS/Kinesis", "IncomingRecords", {"StreamName": stream}, points)


def params(moto: MotoServer, **extra: Any) -> dict[str, Any]:
    return {"aws": moto.aws_params(), "application_name": APP, "source_stream": STREAM, **extra}


@contextmanager
def prober_identity(moto: MotoServer, allowed_actions: list[str]) -> Iterator[dict[str, Any]]:
    """An IAM user allowed only ``allowed_actions``, and moto enforcing IAM while the block
    runs; yields the ``aws:`` params that act as that user. moto names CloudWatch's actions
    by its signing name (``monitoring:``), not ``cloudwatch:``."""
    iam = boto3.client("iam", **moto.boto3_kwargs())
    iam.create_user(UserName="prober")
    iam.put_user_policy(
        UserName="prober",
        PolicyName="only",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": allowed_actions, "Resource": "*"}],
            }
        ),
    )
    key = iam.create_access_key(UserName="prober")["AccessKey"]
    _enforce_iam(moto, "0")
    try:
        yield moto.aws_params(
            access_key_id=key["AccessKeyId"], secret_access_key=key["SecretAccessKey"]
        )
    finally:
        _enforce_iam(moto, "inf")


def _enforce_iam(moto: MotoServer, after_requests: str) -> None:
    req = urllib.request.Request(
        f"{moto.url}/moto-api/reset-auth",
        method="POST",
        data=after_requests.encode(),
        # Not a form: moto reads the raw body.
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()
