"""Demo part: S3 replication and event delivery on moto, live.

- Replication: versioned primary and DR buckets with a replication rule, the replicator
  stand-in copying new canaries after a second (moto copies nothing itself), and the proxy that
  reports ``ReplicationStatus`` on the source like S3 does. ``s3_replication_lag`` reads the
  source through the proxy and the DR bucket directly.
- Event delivery: an upload bucket notifying an SNS topic that fans out to a dedicated canary
  queue (what the probe watches) and the worker's own queue; a worker thread decodes each key
  correctly, reads the object and writes ``processed/<key>.done``, which the probe's end-to-end
  mode waits for.
"""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import unquote_plus

import boto3
from botocore.config import Config

from alivemcp.testbed.s3_replicator import (
    ReplicationStatusProxy,
    S3Replicator,
    create_replicated_buckets,
)
from alivemcp.testbed.stack import DemoStack

__all__ = ["start"]

SOURCE_BUCKET = "demo-mcp-data-primary"
DR_BUCKET = "demo-mcp-data-dr"
REPLICATION_PREFIX = "alivemcp-canary/replication/"
REPLICATION_DELAY_SECONDS = 1.0
UPLOAD_BUCKET = "demo-mcp-uploads"
EVENTS_PREFIX = "alivemcp-canary/events/"


async def start(stack: DemoStack) -> None:
    moto = stack.moto
    kwargs = {**moto.boto3_kwargs(), "config": Config(retries={"total_max_attempts": 1})}
    s3 = boto3.client("s3", **kwargs)

    create_replicated_buckets(s3, SOURCE_BUCKET, DR_BUCKET, prefix=REPLICATION_PREFIX)
    replicator = S3Replicator(
        boto3.client("s3", **kwargs),
        SOURCE_BUCKET,
        DR_BUCKET,
        prefix=REPLICATION_PREFIX,
        delay=REPLICATION_DELAY_SECONDS,
    ).start()
    stack.add_cleanup(replicator.stop)
    proxy = ReplicationStatusProxy(moto.url, replicator).start()
    stack.add_cleanup(proxy.stop)

    sqs = boto3.client("sqs", **kwargs)
    sns = boto3.client("sns", **kwargs)
    s3.create_bucket(Bucket=UPLOAD_BUCKET)
    canary_queue = sqs.create_queue(QueueName="demo-canary-events")["QueueUrl"]
    work_queue = sqs.create_queue(QueueName="demo-upload-work")["QueueUrl"]
    topic = sns.create_topic(Name="demo-uploads")["TopicArn"]
    for queue in (canary_queue, work_queue):
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn["Attributes"]["QueueArn"])
    s3.put_bucket_notification_configuration(
        Bucket=UPLOAD_BUCKET,
        NotificationConfiguration={
            "TopicConfigurations": [
                {
                    "TopicArn": topic,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {
                        "Key": {"FilterRules": [{"Name": "prefix", "Value": EVENTS_PREFIX}]}
                    },
                }
            ]
        },
    )
    worker = _UploadWorker(
        boto3.client("sqs", **kwargs), boto3.client("s3", **kwargs), work_queue
    ).start()
    stack.add_cleanup(worker.stop)

    stack.set_env("DEMO_S3_REPLICATION_SOURCE_URL", proxy.url)
    stack.set_env("DEMO_S3_REPLICATION_SOURCE", SOURCE_BUCKET)
    stack.set_env("DEMO_S3_REPLICATION_DR", DR_BUCKET)
    stack.set_env("DEMO_S3_UPLOAD_BUCKET", UPLOAD_BUCKET)
    stack.set_env("DEMO_S3_CANARY_QUEUE_URL", canary_queue)
    stack.note(
        f"S3 replication stand-in: {SOURCE_BUCKET} -> {DR_BUCKET} after "
        f"{REPLICATION_DELAY_SECONDS:g}s (status proxy {proxy.url})"
    )
    stack.note(
        f"S3 events: {UPLOAD_BUCKET} -> SNS -> demo-canary-events (probe) + demo-upload-work "
        "(a worker writing processed/<key>.done)"
    )


class _UploadWorker:
    """A correct worker: SNS envelope -> S3 event -> key decoded with unquote_plus."""

    def __init__(self, sqs: Any, s3: Any, queue_url: str) -> None:
        self._sqs = sqs
        self._s3 = s3
        self._queue_url = queue_url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-upload-worker", daemon=True)

    def start(self) -> _UploadWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=self._queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                ).get("Messages", [])
                for message in messages:
                    self._handle(message["Body"])
                    self._sqs.delete_message(
                        QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"]
                    )
            except Exception:  # a demo worker keeps going (moto restarting, bad message)
                self._stop.wait(1.0)

    def _handle(self, body: str) -> None:
        envelope = json.loads(body)
        event = json.loads(envelope.get("Message", "{}"))
        for record in event.get("Records", []):
            bucket = record["s3"]["bucket"]["name"]
            key = unquote_plus(record["s3"]["object"]["key"])
            self._s3.head_object(Bucket=bucket, Key=key)
            self._s3.put_object(Bucket=bucket, Key=f"processed/{key}.done", Body=b"ok")
