"""``kinesis_canary``: does every shard of a Kinesis data stream take writes, serve reads, and
(optionally) get consumed?

Kinesis fails quietly: ``PutRecords`` answers HTTP 200 while some records failed
(``FailedRecordCount``, a per-record ``ErrorCode``); a hot partition key throttles one shard
while the stream looks healthy; consumers stop without a word (a ``SubscribeToShard``
subscription that expired after 5 minutes and was never renewed, a missing ``SHARD_END``
checkpoint after a reshard, a poison record blocking a shard). Each run:

1. **Stream state**: ``DescribeStreamSummary``; ``ACTIVE`` is healthy, ``UPDATING`` (a reshard
   or mode change in flight: reads and writes go on) degraded, ``CREATING``/``DELETING`` down.
2. **Write path, every shard**: ``ListShards``, then one ``PutRecords`` with one canary per
   *open* shard, each with that shard's starting hash key as ``ExplicitHashKey``, so every
   shard's write path is exercised (after a split or merge the children are covered; closed
   parents take no writes and are not written). A failed record is named with its shard and
   ``ErrorCode``: ``ProvisionedThroughputExceededException`` (and a whole call throttled) is
   throttling, ``degraded``, and ``down`` once it has lasted ``throttle_down_after``
   consecutive runs; any other code (``InternalFailure``, KMS errors) is ``down``.
3. **Read path**: each canary is read back (``GetShardIterator AT_SEQUENCE_NUMBER``,
   ``GetRecords``) and compared byte for byte; missing or different is ``down``.
4. **Consumer liveness** (``consumer:``): each canary carries an id (``alivemcp_canary`` in its
   JSON body); the user's consumer, on processing it, writes a marker (an S3 object, a
   DynamoDB item, or a record in an output stream holding the id). The probe waits up to
   ``consumer.sla`` for every shard's marker: a shard without one is ``down`` and named, with
   what the pattern suggests (no marker at all: the consumer stopped; only a reshard's
   children: no ``SHARD_END`` checkpoint; one shard among healthy ones: blocked on a record).
5. **CloudWatch** (supporting): ``GetRecords.IteratorAgeMilliseconds`` (maximum; degraded above
   a threshold) and ``WriteProvisionedThroughputExceeded`` (degraded when it is above zero in
   each of the last ``write_throttle_periods`` periods, the seed's alarm rule).

The canaries stay in the stream until retention ends (Kinesis cannot delete a record): your
consumers see them, one per shard per run. Skip records whose JSON has ``alivemcp_canary``,
or, with ``consumer:``, write the marker and skip the rest. Markers seen are deleted (S3,
DynamoDB); markers that arrive after the SLA are deleted at the end of the next run.

Timing: a run waits up to ``readback_timeout`` and, with ``consumer:``, ``consumer.sla``; the
default timeout (60 s) fits the default SLA (30 s).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import AwsSettings, aws_settings_field, within_aws_check_deadline
from alivemcp.plumbing.cloudwatch import MetricQuery, aligned_window, read_metrics
from alivemcp.plumbing.kinesis import Shard, StreamTail, list_shards, open_shards, read_record_at
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings

__all__ = ["KinesisCanaryParams", "KinesisCanaryProbe"]

#: The JSON field holding a canary's id (consumers skip records that have it).
CANARY_FIELD = "alivemcp_canary"
#: Records PutRecords takes in one call.
PUT_BATCH = 500
#: The per-record error code (and whole-call code) for an exhausted shard's write capacity.
THROTTLED_CODE = "ProvisionedThroughputExceededException"
#: Stream states in which records cannot be written or read.
_UNUSABLE_STATES = ("CREATING", "DELETING")
#: A write the stream refuses as invalid (a disabled KMS key, say) blames the stream.
_WRITE_OVERRIDES = {ErrorKind.REJECTED: Status.DOWN}
#: Marker ids remembered for a late clean-up; older ones are left to a lifecycle rule / TTL.
MAX_LEFTOVER_MARKERS = 1000
#: Where Kinesis publishes a stream's metrics (dimension ``StreamName``).
_NAMESPACE = "AWS/Kinesis"
#: How far before the first put the output-stream reader starts (clock skew with Kinesis).
_TAIL_SKEW = timedelta(seconds=5)


def _needs_id(template: str) -> str:
    if "{id}" not in template:
        raise ValueError("the marker name must contain {id} (the canary's id)")
    return template


class S3Marker(ProbeParams):
    """The consumer writes an S3 object named after the canary's id."""

    type: Literal["s3"]
    bucket: str = Field(min_length=3, description="Bucket the consumer writes markers to.")
    key_template: str = Field(
        "alivemcp-canary/kinesis/{id}",
        description="Marker key, with {id} (the canary id, as in the record's "
        "alivemcp_canary field).",
    )
    delete: bool = Field(True, description="Delete each marker once seen (and late ones).")

    @field_validator("key_template")
    @classmethod
    def _names_the_canary(cls, value: str) -> str:
        return _needs_id(value)


class DynamoDbMarker(ProbeParams):
    """The consumer writes a DynamoDB item keyed by the canary's id."""

    type: Literal["dynamodb"]
    table: str = Field(min_length=3, description="Table the consumer writes markers to.")
    key_attribute: str = Field("id", min_length=1, description="The table's (string) hash key.")
    key_template: str = Field("{id}", description="Key value, with {id} (the canary id).")
    delete: bool = Field(True, description="Delete each marker item once seen (and late ones).")

    @field_validator("key_template")
    @classmethod
    def _names_the_canary(cls, value: str) -> str:
        return _needs_id(value)


class OutputStreamMarker(ProbeParams):
    """The consumer writes a record holding the canary's id to another Kinesis stream."""

    type: Literal["output_stream"]
    stream_name: str = Field(min_length=1, description="The consumer's output stream.")
    max_shards: int = Field(100, ge=1, le=10000, description="Output shards read at most.")


Marker = Annotated[S3Marker | DynamoDbMarker | OutputStreamMarker, Field(discriminator="type")]


class ConsumerParams(ProbeParams):
    marker: Marker = Field(description="Where the consumer says it processed a canary.")
    sla: Duration = Field(
        30.0,
        description="How long after the put each shard's marker may take (the check's "
        "timeout must exceed it).",
    )
    poll_interval: Duration = Field(1.0, description="How often markers are looked for.")


class KinesisCanaryParams(ProbeParams):
    aws: AwsSettings = aws_settings_field(
        "AWS identity/region for Kinesis, CloudWatch and the marker store."
    )
    stream_name: str = Field(min_length=1, description="The data stream.")
    readback: bool = Field(True, description="Read every canary back with GetRecords.")
    readback_timeout: Duration = Field(
        5.0, description="How long a canary may take to be readable from its shard."
    )
    throttle_down_after: int = Field(
        3,
        ge=1,
        description="Consecutive runs that meet throttling before it is down "
        "(before that: degraded).",
    )
    max_shards: int = Field(
        1000,
        ge=1,
        le=10000,
        description="Open shards written per run at most (the rest are named in the details).",
    )
    consumer: ConsumerParams | None = Field(
        None, description="Consumer liveness: wait for the consumer's marker of each canary."
    )
    metrics: bool = Field(True, description="Read the stream's CloudWatch metrics.")
    metric_period: Duration = Field(60.0, description="CloudWatch period (seconds, whole).")
    metric_periods: int = Field(
        5, ge=1, le=1440, description="How many whole periods (ending at the last) to read."
    )
    iterator_age_degraded_above: Duration | None = Field(
        300.0,
        description="GetRecords.IteratorAgeMilliseconds (maximum) above this is "
        "degraded: a consumer is falling behind (None: not judged).",
    )
    iterator_age_down_above: Duration | None = Field(
        None, description="Iterator age above this is down (None: never down on it)."
    )
    write_throttle_periods: int = Field(
        3,
        ge=1,
        description="WriteProvisionedThroughputExceeded above zero in each of the "
        "last this many periods is degraded.",
    )
    body_fields: dict[str, str] = canary.body_fields_field()


@dataclass
class _Put:
    """One canary record: where it was aimed, where it landed, and what became of it."""

    shard: Shard
    canary_id: str
    data: bytes
    landed: str | None = None
    sequence_number: str | None = None
    put_at: float = 0.0
    readback_seconds: float | None = None
    marker_seconds: float | None = None


@dataclass
class _Run:
    stream: str
    findings: Findings
    shards: list[Shard] = field(default_factory=list)
    puts: list[_Put] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)


class KinesisCanaryProbe(Probe[KinesisCanaryParams]):
    Params = KinesisCanaryParams
    summary = (
        "Kinesis stream: a canary to every open shard, read back, optionally through "
        "the consumer; throttling and iterator age"
    )
    target_param = "stream_name"
    default_timeout = 60.0
    observables = (
        Observable("open_shards", "Open shards of the stream (one canary each)."),
        Observable("failed_put_records", "Canary records PutRecords refused this run."),
        Observable("readback_seconds", "Slowest shard: canary put to read back (GetRecords)."),
        Observable(
            "consumer_latency_seconds", "Slowest shard: canary put to the consumer's marker."
        ),
        Observable(
            "consumer_missing_shards", "Shards whose canary got no consumer marker within the SLA."
        ),
        Observable("throttled_runs", "Consecutive runs that met throttling."),
        Observable(
            "iterator_age_seconds",
            "CloudWatch GetRecords.IteratorAgeMilliseconds, maximum over the window.",
        ),
        Observable(
            "write_throttled_records",
            "CloudWatch WriteProvisionedThroughputExceeded, sum over the window.",
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._throttled_runs = 0
        #: Canary ids whose marker had not come when their run ended.
        self._leftover_markers: list[str] = []

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        aws = plumbing_of(self.context).aws
        kinesis = await aws.client("kinesis", p.aws)
        run = _Run(p.stream_name, Findings())
        findings = run.findings
        findings.details["stream"] = p.stream_name
        if not await self._check_state(kinesis, run):
            return findings.result()
        try:
            run.shards = await list_shards(kinesis, p.stream_name)
        except ProbeError as err:
            findings.add_error(err, reason=f"cannot list the shards of stream {p.stream_name}")
            return findings.result()
        targets = open_shards(run.shards)
        findings.observe("open_shards", float(len(targets)))
        findings.details["open_shards"] = [s.shard_id for s in targets]
        findings.details["closed_shards"] = [s.shard_id for s in run.shards if not s.is_open]
        if not targets:
            findings.add(Status.DOWN, f"stream {p.stream_name} has no open shard")
            return findings.result()
        if len(targets) > p.max_shards:
            findings.details["shards_not_written"] = [s.shard_id for s in targets[p.max_shards :]]
            targets = targets[: p.max_shards]

        tail = await self._start_tail()
        await self._put(kinesis, run, targets)
        written = [put for put in run.puts if put.sequence_number is not None]
        waits = []
        if p.readback:
            waits.append(self._read_back(kinesis, run, written))
        if p.consumer is not None:
            waits.append(self._await_markers(run, written, tail))
        await asyncio.gather(*waits)
        await self._clean_leftovers(run)
        self._judge_throttling(run)
        if p.metrics:
            await self._check_metrics(run)
        findings.details["shards"] = [_put_json(put) for put in run.puts]
        findings.details["findings"] = findings.as_json()
        return findings.result(self._all_well(run))

    # --- 1. stream state ---

    async def _check_state(self, kinesis: Any, run: _Run) -> bool:
        """Whether records can be written; adds what is wrong to the findings."""
        findings = run.findings
        try:
            resp = await kinesis.describe_stream_summary(StreamName=run.stream)
        except ProbeError as err:
            reason = (
                f"stream {run.stream} not found"
                if err.kind is ErrorKind.NOT_FOUND
                else f"cannot describe stream {run.stream}"
            )
            findings.add_error(err, reason=reason)
            return False
        summary = resp.get("StreamDescriptionSummary") or {}
        state = str(summary.get("StreamStatus", "UNKNOWN"))
        findings.details["stream_status"] = state
        mode = (summary.get("StreamModeDetails") or {}).get("StreamMode")
        if mode:
            findings.details["stream_mode"] = mode
        if state in _UNUSABLE_STATES:
            findings.add(Status.DOWN, f"stream {run.stream} is {state}, not ACTIVE")
            return False
        if state == "UPDATING":
            findings.add(
                Status.DEGRADED,
                f"stream {run.stream} is UPDATING (a reshard or mode change in flight)",
            )
        elif state != "ACTIVE":
            findings.add(Status.DEGRADED, f"stream {run.stream} is {state}, not ACTIVE")
        return True

    # --- 2. write path ---

    async def _put(self, kinesis: Any, run: _Run, targets: Sequence[Shard]) -> None:
        nonce = canary.nonce()
        for shard in targets:
            canary_id = f"{nonce}-{shard.shard_id}"
            doc = canary.document(
                "kinesis_canary",
                self.context.name,
                fields={CANARY_FIELD: canary_id, "stream": run.stream, "shard": shard.shard_id},
                body_fields=self.params.body_fields,
            )
            run.puts.append(_Put(shard, canary_id, json.dumps(doc).encode()))
        for start in range(0, len(run.puts), PUT_BATCH):
            await self._put_batch(kinesis, run, run.puts[start : start + PUT_BATCH])
        failed = sum(1 for put in run.puts if put.sequence_number is None)
        run.findings.observe("failed_put_records", float(failed))

    async def _put_batch(self, kinesis: Any, run: _Run, batch: Sequence[_Put]) -> None:
        findings = run.findings
        records = [
            {
                "Data": put.data,
                "PartitionKey": f"alivemcp-canary-{put.canary_id}",
                "ExplicitHashKey": str(put.shard.starting_hash_key),
            }
            for put in batch
        ]
        started = time.monotonic()
        try:
            resp = await kinesis.put_records(StreamName=run.stream, Records=records)
        except ProbeError as err:
            shards = _shard_list([put.shard.shard_id for put in batch])
            if err.kind is ErrorKind.THROTTLED:
                run.throttled.append(
                    f"PutRecords on stream {run.stream} throttled as a whole "
                    f"({shards}): {err.detail}"
                )
            else:
                findings.add_error(
                    err,
                    _WRITE_OVERRIDES,
                    reason=f"PutRecords on stream {run.stream} failed ({shards})",
                )
            return
        answers = resp.get("Records") or []
        if len(answers) != len(batch):
            findings.add(
                Status.DOWN,
                f"PutRecords on stream {run.stream} answered "
                f"{len(answers)} results for {len(batch)} records",
            )
            return
        # The answer's i-th entry is the i-th record's fate (the seed's index mapping).
        for put, answer in zip(batch, answers, strict=True):
            code = answer.get("ErrorCode")
            where = f"stream {run.stream} shard {put.shard.shard_id}"
            if code:
                message = answer.get("ErrorMessage") or ""
                line = f"PutRecords failed on {where}: {code}" + (
                    f" ({message})" if message else ""
                )
                if code == THROTTLED_CODE:
                    run.throttled.append(line + ": a hot partition key or too few shards")
                else:
                    findings.add(Status.DOWN, line)
                continue
            if not answer.get("SequenceNumber"):
                findings.add(
                    Status.DOWN,
                    f"PutRecords on {where} answered neither a sequence number nor an error code",
                )
                continue
            put.sequence_number = str(answer["SequenceNumber"])
            put.landed = str(answer.get("ShardId") or put.shard.shard_id)
            put.put_at = started
        if resp.get("FailedRecordCount") and not any(a.get("ErrorCode") for a in answers):
            findings.add(
                Status.DOWN,
                f"PutRecords on stream {run.stream} says "
                f"{resp['FailedRecordCount']} records failed but names none",
            )

    # --- 3. read path ---

    async def _read_back(self, kinesis: Any, run: _Run, written: Sequence[_Put]) -> None:
        await asyncio.gather(*(self._read_one(kinesis, run, put) for put in written))
        times = [put.readback_seconds for put in written if put.readback_seconds is not None]
        if times:
            run.findings.observe("readback_seconds", max(times))

    async def _read_one(self, kinesis: Any, run: _Run, put: _Put) -> None:
        assert put.sequence_number is not None and put.landed is not None
        where = f"stream {run.stream} shard {put.landed}"
        try:
            record = await read_record_at(
                kinesis,
                run.stream,
                put.landed,
                put.sequence_number,
                within=self.params.readback_timeout,
            )
        except ProbeError as err:
            if err.kind is ErrorKind.THROTTLED:
                run.throttled.append(
                    f"reading the canary back from {where} throttled: {err.detail}"
                )
            else:
                run.findings.add_error(err, reason=f"cannot read the canary back from {where}")
            return
        if record is None:
            run.findings.add(
                Status.DOWN,
                f"canary {put.canary_id} written to {where} (sequence "
                f"{put.sequence_number}) not readable within "
                f"{self.params.readback_timeout:g}s",
            )
            return
        if _data_of(record) != put.data:
            run.findings.add(
                Status.DOWN, f"canary read back from {where} differs from what was written"
            )
            return
        put.readback_seconds = time.monotonic() - put.put_at

    # --- 4. consumer liveness ---

    async def _start_tail(self) -> StreamTail | None:
        consumer = self.params.consumer
        if consumer is None or not isinstance(consumer.marker, OutputStreamMarker):
            return None
        client = await plumbing_of(self.context).aws.client("kinesis", self.params.aws)
        return StreamTail(
            client,
            consumer.marker.stream_name,
            datetime.now(UTC) - _TAIL_SKEW,
            consumer.marker.max_shards,
        )

    async def _await_markers(
        self, run: _Run, written: Sequence[_Put], tail: StreamTail | None
    ) -> None:
        consumer = self.params.consumer
        assert consumer is not None
        waiting = {put.canary_id: put for put in written}
        findings = run.findings
        last_error: ProbeError | None = None
        deadline = min((put.put_at for put in written), default=time.monotonic()) + consumer.sla
        while waiting:
            try:
                seen = await self._markers_seen(list(waiting), tail)
            except ProbeError as err:
                last_error = err
                if err.kind not in (
                    ErrorKind.PERMISSION,
                    ErrorKind.THROTTLED,
                    ErrorKind.UNAVAILABLE,
                    ErrorKind.TIMEOUT,
                ):
                    break
                seen = set()
            now = time.monotonic()
            for canary_id in seen:
                put = waiting.pop(canary_id)
                put.marker_seconds = now - put.put_at
            if seen:
                await self._delete_markers(sorted(seen))
            if not waiting or now >= deadline:
                break
            await asyncio.sleep(min(consumer.poll_interval, max(0.0, deadline - now)))
        latencies = [put.marker_seconds for put in written if put.marker_seconds is not None]
        if latencies:
            findings.observe("consumer_latency_seconds", max(latencies))
        findings.observe("consumer_missing_shards", float(len(waiting)))
        findings.details["marker"] = consumer.marker.model_dump(exclude={"delete"})
        if not waiting:
            return
        if last_error is not None and len(waiting) == len(written):
            # Nothing was ever seen and the marker store answered with an error: that error
            # is the finding (the prober's own permission is unknown, a missing table down).
            findings.add_error(
                last_error,
                reason=f"cannot read the consumer's markers ({_describe_marker(consumer.marker)})",
            )
            return
        self._blame_consumer(run, written, list(waiting.values()), consumer.sla)

    def _blame_consumer(
        self, run: _Run, written: Sequence[_Put], missing: Sequence[_Put], sla: float
    ) -> None:
        """One finding per shard without a marker, with what the pattern suggests."""
        stream = run.stream
        marker = _describe_marker(self.params.consumer.marker)  # type: ignore[union-attr]
        if len(missing) == len(written) and len(written) > 1:
            shards = _shard_list([put.shard.shard_id for put in missing])
            run.findings.add(
                Status.DOWN,
                (
                    f"stream {stream}: no consumer marker for any shard ({shards}) within {sla:g}s "
                    f"in {marker}: the consumer has stopped (e.g. a SubscribeToShard subscription "
                    "that expired after 5 minutes and was never renewed)"
                ),
            )
            return
        by_id = {s.shard_id: s for s in run.shards}
        for put in missing:
            shard = put.shard
            closed_parents = [p for p in shard.parents if p in by_id and not by_id[p].is_open]
            if closed_parents:
                hint = (
                    f"it is a child of {', '.join(closed_parents)} after a reshard: a "
                    "consumer that never checkpointed SHARD_END on the parent never reads "
                    "its children"
                )
            elif len(missing) < len(written):
                hint = (
                    "other shards are consumed: the consumer is stuck on this shard (a "
                    "record it cannot get past, e.g. a poison record retried forever)"
                )
            else:
                hint = "the consumer has stopped"
            run.findings.add(
                Status.DOWN,
                (
                    f"stream {stream} shard {shard.shard_id}: no consumer marker for canary "
                    f"{put.canary_id} within {sla:g}s in {marker}; {hint}"
                ),
            )

    async def _markers_seen(self, ids: Sequence[str], tail: StreamTail | None) -> set[str]:
        marker = self.params.consumer.marker  # type: ignore[union-attr]
        aws = plumbing_of(self.context).aws
        if isinstance(marker, OutputStreamMarker):
            assert tail is not None
            arrived = await tail.poll()
            return {i for i in ids if any(i.encode() in data for data in arrived)}
        if isinstance(marker, S3Marker):
            s3 = await aws.client("s3", self.params.aws)

            async def s3_has(canary_id: str) -> bool:
                key = marker.key_template.format(id=canary_id)
                try:
                    await s3.head_object(Bucket=marker.bucket, Key=key)
                except ProbeError as err:
                    if err.kind is ErrorKind.NOT_FOUND:
                        return False
                    raise
                return True

            found = await asyncio.gather(*(s3_has(i) for i in ids))
        else:
            dynamodb = await aws.client("dynamodb", self.params.aws)

            async def item_has(canary_id: str) -> bool:
                key = {marker.key_attribute: {"S": marker.key_template.format(id=canary_id)}}
                resp = await dynamodb.get_item(TableName=marker.table, Key=key, ConsistentRead=True)
                return bool(resp.get("Item"))

            found = await asyncio.gather(*(item_has(i) for i in ids))
        return {i for i, present in zip(ids, found, strict=True) if present}

    async def _delete_markers(self, ids: Sequence[str]) -> None:
        """Delete the markers of ``ids``; failures are left to a lifecycle rule or TTL."""
        consumer = self.params.consumer
        if consumer is None or isinstance(consumer.marker, OutputStreamMarker):
            return
        marker = consumer.marker
        if not marker.delete:
            return
        aws = plumbing_of(self.context).aws
        if isinstance(marker, S3Marker):
            s3 = await aws.client("s3", self.params.aws)
            calls = [
                s3.delete_object(Bucket=marker.bucket, Key=marker.key_template.format(id=i))
                for i in ids
            ]
        else:
            dynamodb = await aws.client("dynamodb", self.params.aws)
            calls = [
                dynamodb.delete_item(
                    TableName=marker.table,
                    Key={marker.key_attribute: {"S": marker.key_template.format(id=i)}},
                )
                for i in ids
            ]
        await canary.run_to_completion(_quietly(calls))

    async def _clean_leftovers(self, run: _Run) -> None:
        """Delete the markers that came after an earlier run had given up on them (at the end
        of a run: a consumer catching up had this run's SLA to write them); remember this
        run's missing ones for the next."""
        earlier, self._leftover_markers = self._leftover_markers, []
        if earlier:
            await self._delete_markers(earlier)
        missing = [
            put.canary_id
            for put in run.puts
            if put.sequence_number is not None and put.marker_seconds is None
        ]
        if self.params.consumer is not None:
            self._leftover_markers = missing[-MAX_LEFTOVER_MARKERS:]

    # --- throttling, across runs ---

    def _judge_throttling(self, run: _Run) -> None:
        findings = run.findings
        if not run.throttled:
            self._throttled_runs = 0
            findings.observe("throttled_runs", 0.0)
            return
        self._throttled_runs += 1
        limit = self.params.throttle_down_after
        findings.observe("throttled_runs", float(self._throttled_runs))
        if self._throttled_runs >= limit:
            status = Status.DOWN
            tail = f" (throttled {self._throttled_runs} runs in a row)"
        else:
            status = Status.DEGRADED
            tail = f" (throttled run {self._throttled_runs}; down after {limit} in a row)"
        for line in run.throttled:
            findings.add(status, line + tail)

    # --- 5. CloudWatch ---

    async def _check_metrics(self, run: _Run) -> None:
        p = self.params
        findings = run.findings
        cloudwatch = await plumbing_of(self.context).aws.client("cloudwatch", p.aws)
        window = aligned_window(p.metric_period, p.metric_periods)
        stream = {"StreamName": run.stream}
        queries = [
            MetricQuery("age", _NAMESPACE, "GetRecords.IteratorAgeMilliseconds", stream),
            MetricQuery(
                "wthrottle", _NAMESPACE, "WriteProvisionedThroughputExceeded", stream, "Sum"
            ),
        ]
        try:
            series = await read_metrics(
                cloudwatch, queries, window.start, window.end, window.period
            )
        except ProbeError as err:
            # The metrics are the prober's view of the stream, not the stream itself.
            findings.add(
                Status.UNKNOWN,
                f"cannot read CloudWatch metrics of stream "
                f"{run.stream}: {err.operation}: {err.detail}",
            )
            return
        findings.details["metric_window"] = window.as_json()
        ages = series["age"]
        if ages:
            age = max(value for _, value in ages) / 1000.0
            findings.observe("iterator_age_seconds", age)
            down, degraded = p.iterator_age_down_above, p.iterator_age_degraded_above
            if down is not None and age > down:
                findings.add(
                    Status.DOWN,
                    f"stream {run.stream}: iterator age {age:.0f}s is over "
                    f"{down:g}s (a consumer is far behind)",
                )
            elif degraded is not None and age > degraded:
                findings.add(
                    Status.DEGRADED,
                    f"stream {run.stream}: iterator age {age:.0f}s is "
                    f"over {degraded:g}s (a consumer is falling "
                    "behind)",
                )
        throttles = series["wthrottle"]
        if throttles:
            findings.observe("write_throttled_records", sum(value for _, value in throttles))
            period, end = window.period, int(window.end.timestamp())
            by_start = {int(start): value for start, value in throttles}
            last = [end - period * (i + 1) for i in range(p.write_throttle_periods)]
            if all(by_start.get(start, 0.0) > 0 for start in last):
                findings.add(
                    Status.DEGRADED,
                    (
                        f"stream {run.stream}: WriteProvisionedThroughputExceeded above zero in "
                        f"each of the last {p.write_throttle_periods} periods of {period}s: "
                        "writes are throttled (a hot partition key or too few shards)"
                    ),
                )

    # --- reason ---

    def _all_well(self, run: _Run) -> str:
        obs = run.findings.observations
        parts = [
            f"stream {run.stream} ACTIVE",
            f"{len([p for p in run.puts if p.sequence_number])} shards written",
        ]
        if "readback_seconds" in obs:
            parts.append("read back")
        if "consumer_latency_seconds" in obs:
            parts.append(f"consumer markers in {obs['consumer_latency_seconds']:.1f}s")
        return ", ".join(parts)


# --- helpers ---


async def _quietly(calls: Sequence[Any]) -> None:
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException) and not isinstance(result, ProbeError):
            raise result


def _data_of(record: Mapping[str, Any]) -> bytes:
    data = record.get("Data") or b""
    return data if isinstance(data, bytes) else base64.b64decode(data)


def _shard_list(shard_ids: Sequence[str], shown: int = 5) -> str:
    listed = ", ".join(shard_ids[:shown])
    return listed + (f" +{len(shard_ids) - shown} more" if len(shard_ids) > shown else "")


def _describe_marker(marker: S3Marker | DynamoDbMarker | OutputStreamMarker) -> str:
    if isinstance(marker, S3Marker):
        return f"s3://{marker.bucket}/{marker.key_template}"
    if isinstance(marker, DynamoDbMarker):
        return f"DynamoDB table {marker.table}"
    return f"output stream {marker.stream_name}"


def _put_json(put: _Put) -> dict[str, Any]:
    out: dict[str, Any] = {
        "shard": put.shard.shard_id,
        "canary_id": put.canary_id,
        "written": put.sequence_number is not None,
    }
    if put.landed and put.landed != put.shard.shard_id:
        out["landed_on"] = put.landed
    if put.readback_seconds is not None:
        out["readback_seconds"] = round(put.readback_seconds, 3)
    if put.marker_seconds is not None:
        out["consumer_latency_seconds"] = round(put.marker_seconds, 3)
    return out
