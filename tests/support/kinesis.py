"""Set-up for the Kinesis tests: streams on moto, a stand-in in front of it, and consumers.

- moto 5.2.5 routes a record by hash key to the *first* shard whose range holds it, closed
  parents included, so after a split new records land in the closed parent; real Kinesis
  writes only to open shards. :func:`route_to_open_shards` corrects that in the in-process
  server for the reshard tests.
- moto never fails a record nor throttles: :class:`KinesisStandIn` is a real HTTP server in
  front of moto that the probe reaches with its unchanged aiobotocore calls (``endpoint_urls:
  {kinesis: ...}``); it drops chosen records from a ``PutRecords`` before moto sees them and
  answers them with an ``ErrorCode``, exactly as the service does, or throttles whole calls.
- :class:`Consumer` stands in for the user's consumer: a thread reading every shard with
  plain boto3 that writes a marker for each canary, with each of the seed's bugs on request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import boto3
import yaml
from aiohttp import web

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.runner import ProbeHandle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.moto import ACCOUNT_ID, REGION, MotoServer
from tests.support import this_minute
from tests.support.aiohttp_server import serve_app

CANARY_FIELD = "alivemcp_canary"
THROTTLED = "ProvisionedThroughputExceededException"
_TARGET = "Kinesis_20131202."


@asynccontextmanager
async def check_handle(probe: str, check_params: dict[str, Any]) -> AsyncIterator[ProbeHandle]:
    """One check built as the daemon builds it, to run several times (state kept between runs)
    with changes to the world in between."""
    doc = {"checks": [{"name": "t", "probe": probe, "timeout": 30, "params": check_params}]}
    plumbing = Plumbing()
    handle = build_handle(load_config_text(yaml.safe_dump(doc), env={}).checks[0], plumbing)
    try:
        yield handle
    finally:
        await handle.teardown()
        await plumbing.aclose()


def kinesis(moto: MotoServer) -> Any:
    return boto3.client("kinesis", **moto.boto3_kwargs())


def create_stream(moto: MotoServer, name: str, shards: int = 2) -> list[dict[str, Any]]:
    client = kinesis(moto)
    client.create_stream(StreamName=name, ShardCount=shards)
    return list(client.list_shards(StreamName=name)["Shards"])


def shard_ids(moto: MotoServer, stream: str, *, open_only: bool = True) -> list[str]:
    shards = kinesis(moto).list_shards(StreamName=stream)["Shards"]
    return [
        s["ShardId"]
        for s in shards
        if not open_only or "EndingSequenceNumber" not in s["SequenceNumberRange"]
    ]


def params(moto: MotoServer, stream: str, **extra: Any) -> dict[str, Any]:
    return {"stream_name": stream, "aws": moto.aws_params(), "readback_timeout": 2, **extra}


def set_stream_status(stream: str, status: str) -> None:
    """moto creates streams ACTIVE and has no API that changes the status."""
    from moto.kinesis.models import kinesis_backends

    kinesis_backends[ACCOUNT_ID][REGION].streams[stream].status = status


@contextmanager
def route_to_open_shards() -> Iterator[None]:
    """Make moto route records to open shards only, as Kinesis does after a reshard."""
    from moto.kinesis.models import Stream

    original = Stream.get_shard_for_key

    def open_only(self: Any, partition_key: str, explicit_hash_key: str) -> Any:
        shard = original(self, partition_key, explicit_hash_key)  # moto's own validation
        if shard is None or shard.is_open:
            return shard
        key = (
            int(explicit_hash_key)
            if explicit_hash_key
            else int(hashlib.md5(partition_key.encode()).hexdigest(), 16)
        )
        return next(
            (
                s
                for s in self.shards.values()
                if s.is_open and s.starting_hash <= key <= s.ending_hash
            ),
            shard,
        )

    Stream.get_shard_for_key = open_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        Stream.get_shard_for_key = original  # type: ignore[method-assign]


def split_first_shard(moto: MotoServer, stream: str) -> str:
    """Split the stream's first open shard in the middle; returns the parent's id."""
    client = kinesis(moto)
    shard = next(
        s
        for s in client.list_shards(StreamName=stream)["Shards"]
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
    )
    low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(
        StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2)
    )
    return str(shard["ShardId"])


def put_metric(moto: MotoServer, stream: str, name: str, values: list[float]) -> None:
    """One datapoint per whole minute, the last value in the last whole minute."""
    cloudwatch = boto3.client("cloudwatch", **moto.boto3_kwargs())
    last_whole = datetime.fromtimestamp(this_minute(), UTC)
    for back, value in enumerate(reversed(values)):
        cloudwatch.put_metric_data(
            Namespace="AWS/Kinesis",
            MetricData=[
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "StreamName", "Value": stream}],
                    "Timestamp": last_whole - timedelta(seconds=60 * back + 30),
                    "Value": value,
                }
            ],
        )


# --- the stand-in in front of moto -----------------------------------------------------------


@dataclass
class KinesisStandIn:
    """Forwards every Kinesis call to moto; ``fail`` decides a per-record ErrorCode for a
    PutRecords entry (None: the record goes through), ``throttle`` names the actions answered
    as a whole with a throttling error, ``hide_records`` empties GetRecords answers."""

    moto: MotoServer
    fail: Callable[[dict[str, Any]], str | None] | None = None
    throttle: frozenset[str] = frozenset()
    hide_records: bool = False
    port: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def aws_params(self) -> dict[str, Any]:
        return self.moto.aws_params(endpoint_urls={"kinesis": self.url})

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        action = request.headers.get("X-Amz-Target", "").removeprefix(_TARGET)
        if action in self.throttle:
            return _json(
                400, {"__type": THROTTLED, "message": "Rate exceeded for stream under account."}
            )
        failures: dict[int, str] = {}
        if action == "PutRecords" and self.fail is not None:
            doc = json.loads(body)
            kept = []
            for index, record in enumerate(doc["Records"]):
                code = self.fail(record)
                if code:
                    failures[index] = code
                else:
                    kept.append(record)
            doc["Records"] = kept
            body = json.dumps(doc).encode()
        status, answer = await self._forward(request, body)
        if action == "PutRecords" and failures and status == 200:
            answer = self._splice(answer, failures)
        if action == "GetRecords" and self.hide_records and status == 200:
            answer["Records"] = []
        return _json(status, answer)

    def _splice(self, answer: dict[str, Any], failures: dict[int, str]) -> dict[str, Any]:
        results = iter(answer.get("Records", []))
        total = len(answer.get("Records", [])) + len(failures)
        merged = []
        for index in range(total):
            if index in failures:
                code = failures[index]
                self.failed.append(code)
                merged.append(
                    {
                        "ErrorCode": code,
                        "ErrorMessage": (
                            "Rate exceeded for shard in stream under account."
                            if code == THROTTLED
                            else "Internal service failure."
                        ),
                    }
                )
            else:
                merged.append(next(results))
        return {**answer, "FailedRecordCount": len(failures), "Records": merged}

    async def _forward(self, request: web.Request, body: bytes) -> tuple[int, dict[str, Any]]:
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.moto.url + request.path_qs, data=body, headers=headers) as resp,
        ):
            text = await resp.text()
            return resp.status, (json.loads(text) if text else {})


def _json(status: int, doc: dict[str, Any]) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(doc), content_type="application/x-amz-json-1.1"
    )


@asynccontextmanager
async def stand_in(moto: MotoServer, **settings: Any) -> AsyncIterator[KinesisStandIn]:
    proxy = KinesisStandIn(moto, **settings)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    async with serve_app(app) as served:
        proxy.port = served.port
        yield proxy


def fail_shard(shard: dict[str, Any], code: str) -> Callable[[dict[str, Any]], str | None]:
    """Fail every record whose explicit hash key falls in ``shard``'s range."""
    low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))

    def decide(record: dict[str, Any]) -> str | None:
        key = record.get("ExplicitHashKey")
        return code if key is not None and low <= int(key) <= high else None

    return decide


# --- consumers ---------------------------------------------------------------------------------


def s3_marker(moto: MotoServer, bucket: str, template: str) -> Callable[[str], None]:
    s3 = boto3.client("s3", **moto.boto3_kwargs())
    return lambda canary_id: s3.put_object(
        Bucket=bucket, Key=template.format(id=canary_id), Body=b"processed"
    )


def dynamodb_marker(moto: MotoServer, table: str) -> Callable[[str], None]:
    dynamodb = boto3.client("dynamodb", **moto.boto3_kwargs())
    return lambda canary_id: dynamodb.put_item(
        TableName=table, Item={"id": {"S": canary_id}, "done": {"BOOL": True}}
    )


def output_stream_marker(moto: MotoServer, stream: str) -> Callable[[str], None]:
    client = kinesis(moto)
    return lambda canary_id: client.put_record(
        StreamName=stream,
        PartitionKey=canary_id,
        Data=json.dumps({"processed": canary_id}).encode(),
    )


class Consumer(threading.Thread):
    """The user's consumer: reads every shard from TRIM_HORIZON and writes a marker for each
    canary. Bugs, each from the seed:

    - ``lifetime``: its subscription ends after this many seconds (5 minutes, compressed) and
      is never renewed: it silently stops reading (``expired`` is set then);
    - ``follow_children=False``: it reads the shards it found at start and never moves on to
      a reshard's children (no ``SHARD_END`` checkpoint on the parent);
    - ``block_on_poison``: a record that is not JSON is retried forever, blocking its shard
      (without it, such a record is skipped, as a DLQ would take it).
    """

    def __init__(
        self,
        moto: MotoServer,
        stream: str,
        marker: Callable[[str], None],
        *,
        lifetime: float | None = None,
        follow_children: bool = True,
        block_on_poison: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self._client = kinesis(moto)
        self._stream = stream
        self._marker = marker
        self._lifetime = lifetime
        self._follow = follow_children
        self._block = block_on_poison
        self._stop_event = threading.Event()
        self.expired = threading.Event()
        self.ready = threading.Event()  # the shards at start are known
        self.marked: list[str] = []
        self.blocked_on: set[str] = set()
        self.errors: list[BaseException] = []

    def __enter__(self) -> Consumer:
        self.start()
        assert self.ready.wait(10), "the consumer did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_event.set()
        self.join(10)
        assert not self.errors, self.errors

    def run(self) -> None:
        try:
            self._consume()
        except BaseException as exc:  # surfaced by __exit__
            self.errors.append(exc)

    def _consume(self) -> None:
        iterators: dict[str, str] = {}
        started = time.monotonic()
        self._discover(iterators)
        self.ready.set()
        while not self._stop_event.wait(0.05):
            if self._lifetime is not None and time.monotonic() - started > self._lifetime:
                self.expired.set()
                continue
            if self._follow:
                self._discover(iterators)
            for shard_id, iterator in list(iterators.items()):
                iterators[shard_id] = self._read(shard_id, iterator)

    def _discover(self, iterators: dict[str, str]) -> None:
        for shard in self._client.list_shards(StreamName=self._stream)["Shards"]:
            if shard["ShardId"] not in iterators:
                iterators[shard["ShardId"]] = self._client.get_shard_iterator(
                    StreamName=self._stream,
                    ShardId=shard["ShardId"],
                    ShardIteratorType="TRIM_HORIZON",
                )["ShardIterator"]

    def _read(self, shard_id: str, iterator: str) -> str:
        page = self._client.get_records(ShardIterator=iterator, Limit=100)
        for record in page["Records"]:
            try:
                doc = json.loads(record["Data"])
            except ValueError:
                if not self._block:
                    continue
                # Retry the poison record forever: the shard goes no further.
                self.blocked_on.add(shard_id)
                return str(
                    self._client.get_shard_iterator(
                        StreamName=self._stream,
                        ShardId=shard_id,
                        ShardIteratorType="AT_SEQUENCE_NUMBER",
                        StartingSequenceNumber=record["SequenceNumber"],
                    )["ShardIterator"]
                )
            if isinstance(doc, dict) and CANARY_FIELD in doc:
                self._marker(doc[CANARY_FIELD])
                self.marked.append(doc[CANARY_FIELD])
        return str(page["NextShardIterator"])
