"""Kinesis-sourced, dynamically partitioned delivery streams on moto, and a stand-in for the
delivery moto does not do.

moto stores a ``KinesisStreamAsSource`` delivery stream's configuration (source ARN, prefix,
dynamic partitioning, processors, format conversion) and describes it over HTTP, but never
reads the source stream, expands no prefix and partitions nothing. :class:`KinesisFirehose`
plays Firehose's part: a thread reading every shard of the source stream from moto with plain
boto3 that writes each record to the destination bucket under the stream's ``Prefix`` as
``DescribeDeliveryStream`` returns it, its timestamps expanded for the record's arrival time
and its ``partitionKeyFromQuery`` keys computed by the stream's ``MetadataExtractionQuery``
(the ``{k: .field}`` form, evaluated here on its own, not with the probe's code). A record the
query finds no value in goes to the error output (``partitioning-failed``) as a Firehose error
record with the original bytes in ``rawData``. ``transform`` plays the transformation Lambda
(base64 twice, no newline), ``columnar`` writes a Parquet- or ORC-shaped file instead of the
JSON line (Firehose's format conversion). The probe's own calls go to moto unchanged.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3

from alivemcp.testbed.moto import ACCOUNT_ID, MotoServer

BUCKET = "mcp-events"
SOURCE = "mcp-tool-events-stream"
#: The seed's reference stream (001): tenant and tool partitions, hourly.
SEED_PREFIX = (
    "tool-events/tenant=!{partitionKeyFromQuery:tenantId}/"
    "tool=!{partitionKeyFromQuery:toolName}/year=!{timestamp:yyyy}/"
    "month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/"
)
SEED_ERROR_PREFIX = "tool-events-errors/!{firehose:error-output-type}/year=!{timestamp:yyyy}/"
SEED_QUERY = "{tenantId: .tenant_id, toolName: .tool_name}"
#: The canary fields that route the probe's canary to a partition of its own.
CANARY_FIELDS = {"tenant_id": "alivemcp-canary", "tool_name": "canary"}

_JAVA = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def create_kinesis_sourced_stream(
    moto: MotoServer,
    name: str,
    *,
    prefix: str = SEED_PREFIX,
    query: str | None = SEED_QUERY,
    interval: int = 0,
    columnar: str | None = None,
    source_exists: bool = True,
) -> str:
    """A source Kinesis stream (one shard) and a delivery stream reading it into
    ``mcp-events`` with dynamic partitioning; returns the source stream's ARN."""
    kwargs = moto.boto3_kwargs()
    kinesis = boto3.client("kinesis", **kwargs)
    s3 = boto3.client("s3", **kwargs)
    if source_exists:
        kinesis.create_stream(StreamName=SOURCE, ShardCount=1)
        arn = kinesis.describe_stream_summary(StreamName=SOURCE)["StreamDescriptionSummary"][
            "StreamARN"
        ]
    else:
        arn = f"arn:aws:kinesis:{kwargs['region_name']}:{ACCOUNT_ID}:stream/{SOURCE}"
    s3.create_bucket(Bucket=BUCKET)
    role = f"arn:aws:iam::{ACCOUNT_ID}:role/firehose-delivery"
    processors: list[dict[str, Any]] = []
    if query is not None:
        processors.append(
            {
                "Type": "MetadataExtraction",
                "Parameters": [
                    {"ParameterName": "MetadataExtractionQuery", "ParameterValue": query},
                    {"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"},
                ],
            }
        )
    destination: dict[str, Any] = {
        "RoleARN": role,
        "BucketARN": f"arn:aws:s3:::{BUCKET}",
        "Prefix": prefix,
        "ErrorOutputPrefix": SEED_ERROR_PREFIX,
        "BufferingHints": {"IntervalInSeconds": interval, "SizeInMBs": 64},
        "CompressionFormat": "UNCOMPRESSED",
        "DynamicPartitioningConfiguration": {"Enabled": True},
        "ProcessingConfiguration": {"Enabled": bool(processors), "Processors": processors},
    }
    if columnar is not None:
        serializer: dict[str, Any] = {"OrcSerDe" if columnar == "orc" else "ParquetSerDe": {}}
        destination["DataFormatConversionConfiguration"] = {
            "Enabled": True,
            "SchemaConfiguration": {
                "RoleARN": role,
                "DatabaseName": "mcp",
                "TableName": "tool_events",
            },
            "InputFormatConfiguration": {"Deserializer": {"OpenXJsonSerDe": {}}},
            "OutputFormatConfiguration": {"Serializer": serializer},
        }
    boto3.client("firehose", **kwargs).create_delivery_stream(
        DeliveryStreamName=name,
        DeliveryStreamType="KinesisStreamAsSource",
        KinesisStreamSourceConfiguration={"KinesisStreamARN": arn, "RoleARN": role},
        ExtendedS3DestinationConfiguration=destination,
    )
    return arn


def parquet_file(complete: bool = True) -> bytes:
    """Bytes shaped like a Parquet file: magic, (opaque) pages, footer length, magic."""
    body = b"PAR1" + bytes(range(200)) + (40).to_bytes(4, "little")
    return body + b"PAR1" if complete else body


def orc_file() -> bytes:
    """Bytes shaped like an ORC file: "ORC", stripes, postscript ending in "ORC", its length."""
    return b"ORC" + bytes(range(120)) + b"\x08\x01\x82\xf4\x03\x03ORC" + bytes([9])


class KinesisFirehose:
    """Plays Firehose for one Kinesis-sourced delivery stream on moto (see the module)."""

    def __init__(
        self,
        moto: MotoServer,
        delivery_stream: str,
        *,
        transform: Callable[[bytes], bytes] | None = None,
        columnar: Callable[[], bytes] | None = None,
        poll: float = 0.1,
    ) -> None:
        kwargs = moto.boto3_kwargs()
        self._kinesis = boto3.client("kinesis", **kwargs)
        self._s3 = boto3.client("s3", **kwargs)
        desc = boto3.client("firehose", **kwargs).describe_delivery_stream(
            DeliveryStreamName=delivery_stream
        )["DeliveryStreamDescription"]
        self._name = delivery_stream
        self.source_arn = desc["Source"]["KinesisStreamSourceDescription"]["KinesisStreamARN"]
        conf = desc["Destinations"][0]["ExtendedS3DestinationDescription"]
        self._bucket = conf["BucketARN"].split(":")[-1]
        self._prefix = conf["Prefix"]
        self._error_prefix = conf["ErrorOutputPrefix"]
        self._keys = _query_paths(conf)
        self._transform = transform or (lambda data: data)
        self._columnar = columnar
        self._poll = poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Every record read from the source stream (boto3's GetRecords entries).
        self.records: list[dict[str, Any]] = []
        #: The keys of the objects written, in order.
        self.written: list[str] = []

    def start(self) -> None:
        shards = self._kinesis.list_shards(StreamARN=self.source_arn)["Shards"]
        self._iterators = [
            self._kinesis.get_shard_iterator(
                StreamARN=self.source_arn, ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            for s in shards
        ]
        self._thread = threading.Thread(target=self._run, name="kinesis-firehose", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.pump()
            self._stop.wait(self._poll)

    def pump(self) -> None:
        for index, iterator in enumerate(self._iterators):
            resp = self._kinesis.get_records(ShardIterator=iterator, StreamARN=self.source_arn)
            self._iterators[index] = resp["NextShardIterator"]
            for record in resp["Records"]:
                self.records.append(record)
                self._deliver(record)

    def _deliver(self, record: dict[str, Any]) -> None:
        data: bytes = record["Data"]
        arrival: datetime = record["ApproximateArrivalTimestamp"].astimezone(UTC)
        doc = json.loads(data)
        values = {name: doc.get(field) for name, field in self._keys.items()}
        stamp = f"{self._name}-1-{arrival:%Y-%m-%d-%H-%M-%S}-{uuid.uuid4()}"
        if any(not isinstance(v, str) for v in values.values()):
            key = _expand(self._error_prefix, arrival, {}, "partitioning-failed") + stamp
            body = (
                json.dumps(
                    {
                        "rawData": base64.b64encode(data).decode(),
                        "errorCode": "DynamicPartitioning.MetadataExtractionFailed",
                        "errorMessage": "Non-string value or missing key in the JQ result",
                    }
                ).encode()
                + b"\n"
            )
        else:
            key = _expand(self._prefix, arrival, values) + stamp
            body = self._columnar() if self._columnar else self._transform(data)
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body)
        self.written.append(key)


@contextmanager
def kinesis_firehose(
    moto: MotoServer, delivery_stream: str, **kwargs: Any
) -> Iterator[KinesisFirehose]:
    standin = KinesisFirehose(moto, delivery_stream, **kwargs)
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()


def _query_paths(conf: dict[str, Any]) -> dict[str, str]:
    """The ``{name: .field}`` pairs of the stream's MetadataExtractionQuery."""
    for proc in (conf.get("ProcessingConfiguration") or {}).get("Processors") or []:
        for param in proc.get("Parameters") or []:
            if param["ParameterName"] == "MetadataExtractionQuery":
                return dict(re.findall(r"(\w+)\s*:\s*\.(\w+)", param["ParameterValue"]))
    return {}


def _expand(prefix: str, moment: datetime, values: dict[str, Any], error_type: str = "") -> str:
    def one(match: re.Match[str]) -> str:
        kind, _, arg = match.group(1).partition(":")
        if kind == "timestamp":
            return moment.strftime(re.sub("yyyy|MM|dd|HH|mm|ss", lambda m: _JAVA[m.group()], arg))
        if kind == "partitionKeyFromQuery":
            return str(values[arg])
        if match.group(1) == "firehose:error-output-type":
            return error_type
        raise AssertionError(f"the stand-in does not expand {match.group()}")

    return re.sub(r"!\{([^}]*)\}", one, prefix)
