"""Demo part: a two-shard Kinesis data stream on moto, with a consumer that writes S3 markers.

``kinesis_canary`` writes one canary per open shard, reads each back, and (its consumer mode)
waits for the consumer's marker of each: the consumer here is a thread reading both shards
with plain boto3, as a user's consumer would, writing ``processed/<id>.done`` to a marker
bucket for every record carrying ``alivemcp_canary`` and skipping the rest.

The demo never reshards the stream: moto keeps routing records to a split's closed parent,
which real Kinesis never does, so a reshard here would show moto's behaviour, not the probe's.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import boto3
from botocore.config import Config

from alivemcp.testbed.stack import DemoStack

__all__ = ["start"]

STREAM = "demo-mcp-tool-stream"
SHARDS = 2
MARKER_BUCKET = "demo-kinesis-consumer-markers"
MARKER_TEMPLATE = "processed/{id}.done"
#: The JSON field holding a canary's id (what the probe puts in each canary record).
CANARY_FIELD = "alivemcp_canary"
#: Seconds between two reads of every shard (a consumer's polling interval).
POLL_EVERY = 0.5


async def start(stack: DemoStack) -> None:
    kwargs = {**stack.moto.boto3_kwargs(), "config": Config(retries={"total_max_attempts": 1})}
    kinesis = boto3.client("kinesis", **kwargs)
    s3 = boto3.client("s3", **kwargs)
    kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS)
    s3.create_bucket(Bucket=MARKER_BUCKET)
    consumer = _MarkerConsumer(kinesis, s3).start()
    stack.add_cleanup(consumer.stop)
    stack.set_env("DEMO_KINESIS_STREAM", STREAM)
    stack.set_env("DEMO_KINESIS_MARKER_BUCKET", MARKER_BUCKET)
    stack.note(
        f"Kinesis: stream {STREAM} ({SHARDS} shards) read by a consumer writing "
        f"s3://{MARKER_BUCKET}/{MARKER_TEMPLATE} for each canary"
    )


class _MarkerConsumer:
    """A correct consumer: reads every shard from its start and marks each canary it sees."""

    def __init__(self, kinesis: Any, s3: Any) -> None:
        self._kinesis = kinesis
        self._s3 = s3
        self._iterators: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-kinesis-consumer", daemon=True)

    def start(self) -> _MarkerConsumer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(POLL_EVERY):
            try:
                self._discover()
                for shard_id, iterator in list(self._iterators.items()):
                    self._iterators[shard_id] = self._read(iterator)
            except Exception:  # a demo consumer keeps going (moto busy, a bad record)
                self._stop.wait(1.0)

    def _discover(self) -> None:
        """Iterators for shards not yet read (all of them on the first call)."""
        for shard in self._kinesis.list_shards(StreamName=STREAM)["Shards"]:
            shard_id = shard["ShardId"]
            if shard_id not in self._iterators:
                self._iterators[shard_id] = self._kinesis.get_shard_iterator(
                    StreamName=STREAM, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]

    def _read(self, iterator: str) -> str:
        page = self._kinesis.get_records(ShardIterator=iterator, Limit=100)
        for record in page["Records"]:
            try:
                doc = json.loads(record["Data"])
            except ValueError:
                continue  # not ours to mark
            if isinstance(doc, dict) and CANARY_FIELD in doc:
                key = MARKER_TEMPLATE.format(id=doc[CANARY_FIELD])
                self._s3.put_object(Bucket=MARKER_BUCKET, Key=key, Body=b"processed")
        return str(page["NextShardIterator"])
