"""Set-up for the ``s3_event_delivery`` tests: moto's real S3 → SQS, S3 → SNS → SQS and
S3 → EventBridge → SQS deliveries, plus worker threads that consume events the way real
(correct or buggy) workers do."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote_plus, unquote, unquote_plus

import boto3
from botocore.config import Config

from alivemcp.testbed.moto import MotoServer

BUCKET = "mcp-uploads"
PREFIX = "alivemcp-canary/events/"
_ONE_ATTEMPT = Config(retries={"total_max_attempts": 1})


def client(moto: MotoServer, service: str) -> Any:
    return boto3.client(service, config=_ONE_ATTEMPT, **moto.boto3_kwargs())


def queue_arn(moto: MotoServer, queue_url: str) -> str:
    attrs = client(moto, "sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])
    return str(attrs["Attributes"]["QueueArn"])


def make_queue(moto: MotoServer, name: str) -> str:
    return str(client(moto, "sqs").create_queue(QueueName=name)["QueueUrl"])


def make_bucket(moto: MotoServer, bucket: str = BUCKET) -> None:
    client(moto, "s3").create_bucket(Bucket=bucket)


def notify_queue_directly(
    moto: MotoServer, queue_url: str, bucket: str = BUCKET, prefix: str = PREFIX
) -> None:
    client(moto, "s3").put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": queue_arn(moto, queue_url),
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}},
                }
            ]
        },
    )


def notify_via_sns(moto: MotoServer, queue_url: str, bucket: str = BUCKET) -> None:
    sns = client(moto, "sns")
    topic = sns.create_topic(Name="uploads-topic")["TopicArn"]
    # RawMessageDelivery left unset: moto treats any value as "on" (see the moto notes).
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(moto, queue_url))
    client(moto, "s3").put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "TopicConfigurations": [{"TopicArn": topic, "Events": ["s3:ObjectCreated:*"]}]
        },
    )


def notify_via_eventbridge(moto: MotoServer, queue_url: str, bucket: str = BUCKET) -> None:
    client(moto, "s3").put_bucket_notification_configuration(
        Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    events = client(moto, "events")
    events.put_rule(
        Name="uploads-created",
        EventPattern=json.dumps(
            {
                "source": ["aws.s3"],
                "detail-type": ["Object Created"],
                "detail": {"bucket": {"name": [bucket]}},
            }
        ),
    )
    events.put_targets(
        Rule="uploads-created", Targets=[{"Id": "q", "Arn": queue_arn(moto, queue_url)}]
    )


def drain(moto: MotoServer, queue_url: str) -> list[dict[str, Any]]:
    """Every message now in the queue (received once each, then left to reappear)."""
    sqs = client(moto, "sqs")
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(5):
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            VisibilityTimeout=30,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])
        if not got:
            break
        for message in got:
            seen[message["MessageId"]] = message
    return list(seen.values())


def correct_decode(raw: str) -> str:
    return unquote_plus(raw)


def classic_plus_bug(raw: str) -> str:
    """The classic bug: percent-decoding that leaves '+' (S3's encoded space) alone."""
    return unquote(raw)


class EventWorker:
    """A worker thread on its own queue: reads S3 events, decodes the key with ``decode``,
    and handles the object the way ``mode`` says.

    - ``"read"``: GetObject the decoded key; on success write ``processed/<key>.done``
      (a buggy decode makes GetObject fail, so nothing is written);
    - ``"index"``: record ``processed/<key>.done`` without reading (an indexer: a buggy decode
      writes the marker under the wrong key);
    - ``"relay"``: re-publish the event to ``relay_to`` with the decoded key encoded again
      (a buggy decode there turns spaces into '+' for everyone downstream).
    """

    def __init__(
        self,
        moto: MotoServer,
        queue_url: str,
        decode: Callable[[str], str],
        *,
        mode: str = "read",
        relay_to: str | None = None,
    ) -> None:
        self._sqs = client(moto, "sqs")
        self._s3 = client(moto, "s3")
        self._queue_url = queue_url
        self._decode = decode
        self._mode = mode
        self._relay_to = relay_to
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-worker", daemon=True)
        self.handled: list[str] = []
        self.errors: list[str] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._sqs.receive_message(
                    QueueUrl=self._queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                ).get("Messages", [])
            except Exception as exc:
                self.errors.append(str(exc))
                self._stop.wait(0.2)
                continue
            for message in got:
                self._handle(message)
                self._sqs.delete_message(
                    QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def _handle(self, message: dict[str, Any]) -> None:
        body = json.loads(message["Body"])
        for record in body.get("Records", []):
            bucket = record["s3"]["bucket"]["name"]
            key = self._decode(record["s3"]["object"]["key"])
            self.handled.append(key)
            if self._mode == "relay" and self._relay_to:
                record["s3"]["object"]["key"] = quote_plus(key, safe="/")
                self._sqs.send_message(
                    QueueUrl=self._relay_to, MessageBody=json.dumps({"Records": [record]})
                )
                continue
            if self._mode == "read":
                try:
                    self._s3.get_object(Bucket=bucket, Key=key)
                except Exception as exc:
                    self.errors.append(f"{key}: {exc}")
                    continue
            self._s3.put_object(Bucket=bucket, Key=f"processed/{key}.done", Body=b"ok")

    def __enter__(self) -> EventWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextmanager
def worker(
    moto: MotoServer, queue_url: str, decode: Callable[[str], str], **kwargs: Any
) -> Iterator[EventWorker]:
    with EventWorker(moto, queue_url, decode, **kwargs) as running:
        yield running
