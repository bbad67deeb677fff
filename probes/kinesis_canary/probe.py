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
from typing import Any

from alivemcp.errors import ErrorKind, ProbeError, describe_failure
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import within_aws_check_deadline
from alivemcp.plumbing.cloudwatch import MetricQuery
from alivemcp.plumbing.kinesis import Shard, list_shards, open_shards, read_record_at
from alivemcp.probe import Observable, Probe, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN, read_metric_window
from probes.kinesis_canary.consumer import ConsumerWatch
from probes.kinesis_canary.params import KinesisCanaryParams
from probes.kinesis_canary.run import Put, Run, put_json, shard_list

__all__ = ["KinesisCanaryProbe"]

#: The JSON field holding a canary's id (consumers skip records that have it).
CANARY_FIELD = "alivemcp_canary"
#: Records PutRecords takes in one call.
PUT_BATCH = 500
#: The per-record error code (and whole-call code) for an exhausted shard's write capacity.
THROTTLED_CODE = "ProvisionedThroughputExceededException"
#: Stream states in which records cannot be written or read.
_UNUSABLE_STATES = ("CREATING", "DELETING")
#: Where Kinesis publishes a stream's metrics (dimension ``StreamName``).
_NAMESPACE = "AWS/Kinesis"


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
        consumer = self.params.consumer
        self._consumer = (
            ConsumerWatch(self.context, self.params.aws, consumer) if consumer else None
        )

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        aws = plumbing_of(self.context).aws
        kinesis = await aws.client("kinesis", p.aws)
        run = Run(p.stream_name, Findings())
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

        watch = self._consumer
        tail = await watch.start_tail() if watch is not None else None
        await self._put(kinesis, run, targets)
        written = [put for put in run.puts if put.sequence_number is not None]
        waits = []
        if p.readback:
            waits.append(self._read_back(kinesis, run, written))
        if watch is not None:
            waits.append(watch.await_markers(run, written, tail))
        await asyncio.gather(*waits)
        if watch is not None:
            await watch.clean_leftovers(run)
        self._judge_throttling(run)
        if p.metrics:
            await self._check_metrics(run)
        findings.details["shards"] = [put_json(put) for put in run.puts]
        findings.details["findings"] = findings.as_json()
        return findings.result(self._all_well(run))

    # --- 1. stream state ---

    async def _check_state(self, kinesis: Any, run: Run) -> bool:
        """Whether records can be written; adds what is wrong to the findings."""
        findings = run.findings
        try:
            resp = await kinesis.describe_stream_summary(StreamName=run.stream)
        except ProbeError as err:
            reason = describe_failure(err.kind, f"stream {run.stream}", action="describe")
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

    async def _put(self, kinesis: Any, run: Run, targets: Sequence[Shard]) -> None:
        nonce = canary.nonce()
        for shard in targets:
            canary_id = f"{nonce}-{shard.shard_id}"
            doc = canary.document(
                "kinesis_canary",
                self.context.name,
                fields={CANARY_FIELD: canary_id, "stream": run.stream, "shard": shard.shard_id},
                body_fields=self.params.body_fields,
            )
            run.puts.append(Put(shard, canary_id, json.dumps(doc).encode()))
        for start in range(0, len(run.puts), PUT_BATCH):
            await self._put_batch(kinesis, run, run.puts[start : start + PUT_BATCH])
        failed = sum(1 for put in run.puts if put.sequence_number is None)
        run.findings.observe("failed_put_records", float(failed))

    async def _put_batch(self, kinesis: Any, run: Run, batch: Sequence[Put]) -> None:
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
            shards = shard_list([put.shard.shard_id for put in batch])
            if err.kind is ErrorKind.THROTTLED:
                run.throttled.append(
                    f"PutRecords on stream {run.stream} throttled as a whole "
                    f"({shards}): {err.detail}"
                )
            else:
                findings.add_error(
                    err,
                    REJECTED_IS_DOWN,
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

    async def _read_back(self, kinesis: Any, run: Run, written: Sequence[Put]) -> None:
        await asyncio.gather(*(self._read_one(kinesis, run, put) for put in written))
        times = [put.readback_seconds for put in written if put.readback_seconds is not None]
        if times:
            run.findings.observe("readback_seconds", max(times))

    async def _read_one(self, kinesis: Any, run: Run, put: Put) -> None:
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

    # --- throttling, across runs ---

    def _judge_throttling(self, run: Run) -> None:
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

    async def _check_metrics(self, run: Run) -> None:
        p = self.params
        findings = run.findings
        cloudwatch = await plumbing_of(self.context).aws.client("cloudwatch", p.aws)
        stream = {"StreamName": run.stream}
        queries = [
            MetricQuery("age", _NAMESPACE, "GetRecords.IteratorAgeMilliseconds", stream),
            MetricQuery(
                "wthrottle", _NAMESPACE, "WriteProvisionedThroughputExceeded", stream, "Sum"
            ),
        ]
        read = await read_metric_window(
            cloudwatch,
            queries,
            p.metric_period,
            p.metric_periods,
            findings,
            subject=f"stream {run.stream}",
        )
        if read is None:
            return
        window, series = read
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

    def _all_well(self, run: Run) -> str:
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


def _data_of(record: Mapping[str, Any]) -> bytes:
    data = record.get("Data") or b""
    return data if isinstance(data, bytes) else base64.b64decode(data)
