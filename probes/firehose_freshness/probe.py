"""``firehose_freshness``: is a Firehose delivery stream delivering, on time and intact?

Firehose never reports a failed delivery to the writer: records go stale in the buffer, get
garbled by a transformation Lambda, land under the wrong partition, or land silently under the
error prefix. Each run:

1. **Stream state**: ``DescribeDeliveryStream`` must say ``ACTIVE``; the S3 destination's
   buffering hints, prefixes, compression, dynamic partitioning and format conversion shape the
   rest.
2. **Freshness metric**: CloudWatch ``AWS/Firehose`` ``DeliveryToS3.DataFreshness`` (Maximum
   over the last whole periods, window aligned to the period, exact dimensions) against the
   thresholds; ``DeliveryToS3.Success`` below 1 is degraded.
3. **Error prefix watch**: objects that appeared under the error output prefix since the last
   run are ``down`` (count + sample keys); objects seen before do not re-alert.
4. **End-to-end canary**: a JSON record with a unique id (plus ``canary_fields``), put with
   ``PutRecord`` into a direct-PUT stream, or into the *source Kinesis stream* of a
   Kinesis-sourced one (``KinesisStreamSourceDescription``; Firehose refuses PutRecord there),
   with ``partition_key``. It is looked for in *later* runs (delivery takes at least the buffer
   interval, and a run must not block the scheduler for it) under the expected prefix:
   ``expected_prefix`` or the destination's ``Prefix``, its ``!{timestamp:...}`` expanded for
   the put time and its ``!{partitionKeyFromQuery:k}``/``!{partitionKeyFromLambda:k}`` from
   ``partition_keys``, else from the stream's JQ ``MetadataExtractionQuery`` (the simple
   ``{k: .path}`` form inline parsing writes) evaluated over the canary, else
   ``canary_fields[k]``. A key it cannot fill is ``unknown`` and no canary is put (it would
   only add a partitioning failure). The canary's line must come back as valid,
   newline-delimited JSON: base64 text, or records run together, is the transformation trap
   and ``down``. Once the canary is overdue, the probe also looks for it under the stream's
   whole prefix and the error prefixes: found under another partition is ``down`` naming the
   expected and the found prefix; found in the error output is ``down`` naming the error type.
   Not found by ``down_above`` is ``down`` naming the stream it was put into and the expected
   prefix. The last resolved canary's verdict holds until the next canary resolves, so a
   garbled or missing delivery does not flap back to green.

   **Parquet/ORC** (``DataFormatConversionConfiguration`` enabled): the objects are binary and
   the records in them are not decoded. What is verified: an object written after the put
   appeared under the expected (expanded) prefix within the thresholds, and it is a complete
   file of the configured format (``PAR1`` at both ends for Parquet; ``ORC`` at the start and
   before the postscript-length byte for ORC). What is not: that the object holds the canary
   (Firehose keeps only the Glue table's columns) or that its rows are right. With
   ``canary_fields`` that route the canary to a partition of its own, an object there after
   the put is the canary's delivery; a canary that failed conversion is found by its id in the
   ``format-conversion-failed`` error output.

Retries: each AWS call makes up to ``aws.max_attempts`` attempts in all (5xx, throttling and
connection failures only), and retries stop by the check's timeout, so an error that keeps
coming back is reported as itself rather than as the check's timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from alivemcp.errors import ProbeError, describe_failure
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.aws import within_aws_check_deadline
from alivemcp.plumbing.canary import check_slug
from alivemcp.plumbing.cloudwatch import MetricQuery
from alivemcp.probe import Observable, Probe, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN, read_metric_window
from probes.firehose_freshness.canary import (
    Canary,
    CanaryVerdict,
    canary_record,
    canary_skipped,
    not_delivered,
    partition_values,
    resolve,
)
from probes.firehose_freshness.params import FirehoseFreshnessParams
from probes.firehose_freshness.prefixes import (
    ERROR_TYPES,
    Destination,
    UnresolvedKey,
    error_listing_prefixes,
    expected_prefixes,
    s3_destination,
)
from probes.firehose_freshness.search import list_objects, search_elsewhere, search_expected

__all__ = ["FirehoseFreshnessProbe"]

#: The seed's alarm: DataFreshness above 15 minutes means records are not getting out.
SEED_DOWN_SECONDS = 900.0
#: Where Firehose publishes a stream's metrics (dimension ``DeliveryStreamName``).
_NAMESPACE = "AWS/Firehose"


class FirehoseFreshnessProbe(Probe[FirehoseFreshnessParams]):
    Params = FirehoseFreshnessParams
    summary = "Firehose stream ACTIVE, DataFreshness, error prefix and a canary record in S3"
    target_param = "stream_name"
    default_timeout = 30.0
    observables = (
        Observable("buffer_interval_seconds", "The destination's buffering interval."),
        Observable(
            "data_freshness_seconds",
            "CloudWatch DataFreshness: age of the oldest record not yet delivered.",
        ),
        Observable("delivery_success_ratio", "CloudWatch DeliveryToS3.Success (1: all)."),
        Observable("new_error_objects", "Objects that appeared under the error prefix."),
        Observable("canary_freshness_seconds", "Put of the canary record to its object in S3."),
        Observable("canary_pending_seconds", "Age of the canary still awaited in S3."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: Canary | None = None
        self._last_canary: CanaryVerdict | None = None
        self._error_watermark: datetime | None = None
        self._error_seen_at_watermark: set[str] = set()

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        aws = plumbing_of(self.context).aws
        firehose = await aws.client("firehose", p.aws)
        findings = Findings()
        try:
            described = await firehose.describe_delivery_stream(DeliveryStreamName=p.stream_name)
        except ProbeError as err:
            reason = describe_failure(
                err.kind, f"delivery stream {p.stream_name}", action="describe"
            )
            findings.add_error(err, REJECTED_IS_DOWN, reason=reason)
            return findings.result()
        desc = described.get("DeliveryStreamDescription") or {}
        status = desc.get("DeliveryStreamStatus")
        if status != "ACTIVE":
            failure = (desc.get("FailureDescription") or {}).get("Details")
            return ProbeResult.down(
                f"delivery stream {p.stream_name} is {status}, not ACTIVE"
                + (f": {failure}" if failure else ""),
                details={"stream": p.stream_name, "stream_status": status},
            )
        dest = s3_destination(desc)
        if dest is None:
            return ProbeResult.unknown(
                f"{p.stream_name} has no S3 destination: only S3 delivery is checked"
            )
        degraded_above, down_above = self._thresholds(dest)
        findings.observe("buffer_interval_seconds", dest.buffer_interval)
        findings.details.update(
            stream=p.stream_name,
            bucket=dest.bucket,
            prefix=dest.prefix,
            error_prefix=dest.error_prefix,
            compression=dest.compression,
            degraded_above_seconds=degraded_above,
            down_above_seconds=down_above,
        )
        if dest.columnar:
            findings.details["format_conversion"] = dest.columnar
        if dest.dynamic_partitioning:
            findings.details["dynamic_partitioning"] = True
        s3 = await aws.client("s3", p.aws)
        cloudwatch = await aws.client("cloudwatch", p.aws)
        await self._check_metrics(cloudwatch, degraded_above, down_above, findings)
        await self._check_errors(s3, dest, findings)
        if p.canary:
            await self._check_canary(firehose, s3, desc, dest, degraded_above, down_above, findings)
        findings.details["findings"] = findings.as_json()
        return findings.result(_all_well(findings, self._last_canary))

    # --- thresholds ---

    def _thresholds(self, dest: Destination) -> tuple[float, float]:
        p = self.params
        down = p.down_above or max(SEED_DOWN_SECONDS, dest.buffer_interval + 2 * p.margin)
        degraded = p.degraded_above or dest.buffer_interval + p.margin
        return min(degraded, down), down

    # --- CloudWatch ---

    async def _check_metrics(
        self, cloudwatch: Any, degraded_above: float, down_above: float, findings: Findings
    ) -> None:
        p = self.params
        stream = {"DeliveryStreamName": p.stream_name}
        queries = [
            MetricQuery("freshness", _NAMESPACE, "DeliveryToS3.DataFreshness", stream),
            MetricQuery("success", _NAMESPACE, "DeliveryToS3.Success", stream, "Average"),
        ]
        read = await read_metric_window(
            cloudwatch, queries, p.metric_period, p.metric_periods, findings
        )
        if read is None:
            return
        _, series = read
        freshness = [value for _, value in series["freshness"]]
        if freshness:
            worst = max(freshness)
            findings.observe("data_freshness_seconds", worst)
            if worst > down_above:
                findings.add(
                    Status.DOWN,
                    f"DataFreshness {worst:.0f}s is over the "
                    f"{down_above:.0f}s limit (records stale)",
                )
            elif worst > degraded_above:
                findings.add(
                    Status.DEGRADED, f"DataFreshness {worst:.0f}s is over {degraded_above:.0f}s"
                )
        else:
            findings.details["metric_note"] = "no DataFreshness datapoints in the window"
        success = [value for _, value in series["success"]]
        if success:
            lowest = min(success)
            findings.observe("delivery_success_ratio", lowest)
            if lowest < 1:
                findings.add(
                    Status.DEGRADED,
                    f"DeliveryToS3.Success {lowest:.2f} < 1: some S3 deliveries failed",
                )

    # --- error prefix ---

    def _error_prefixes(self, dest: Destination) -> list[str]:
        p = self.params
        return (
            list(p.error_prefixes)
            if p.error_prefixes is not None
            else error_listing_prefixes(dest.error_prefix)
        )

    async def _check_errors(self, s3: Any, dest: Destination, findings: Findings) -> None:
        p = self.params
        prefixes = self._error_prefixes(dest)
        findings.details["error_prefixes_watched"] = prefixes
        now = datetime.now(UTC)
        watermark = self._error_watermark or now - timedelta(seconds=p.error_lookback)
        listed: list[dict[str, Any]] = []
        try:
            for prefix in prefixes:
                listed += await list_objects(s3, dest.bucket, prefix, p.max_list_pages)
        except ProbeError as err:
            findings.add_error(
                err,
                REJECTED_IS_DOWN,
                reason=f"listing error prefixes in {dest.bucket}: {err.operation}",
            )
            return
        seen = self._error_seen_at_watermark
        new = [
            obj
            for obj in listed
            if obj["LastModified"] > watermark
            or (obj["LastModified"] == watermark and obj["Key"] not in seen)
        ]
        newest = max((obj["LastModified"] for obj in listed), default=watermark)
        self._error_watermark = max(newest, watermark)
        self._error_seen_at_watermark = {
            obj["Key"] for obj in listed if obj["LastModified"] == self._error_watermark
        }
        findings.observe("new_error_objects", float(len(new)))
        if not new:
            return
        new.sort(key=lambda obj: obj["LastModified"])
        samples = [obj["Key"] for obj in new[-5:]]
        kinds = sorted({kind for kind in ERROR_TYPES if any(kind in k for k in samples)})
        findings.details["new_error_objects"] = {"count": len(new), "sample_keys": samples}
        what = f" ({', '.join(kinds)})" if kinds else ""
        findings.add(
            Status.DOWN,
            f"{len(new)} new object(s) under the error prefix{what} since "
            f"the last run, e.g. {samples[-1]}",
        )

    # --- canary ---

    async def _check_canary(
        self,
        firehose: Any,
        s3: Any,
        desc: Mapping[str, Any],
        dest: Destination,
        degraded_above: float,
        down_above: float,
        findings: Findings,
    ) -> None:
        p = self.params
        stream_type = desc.get("DeliveryStreamType") or "DirectPut"
        source_arn = _kinesis_source(desc) if stream_type == "KinesisStreamAsSource" else None
        skipped = canary_skipped(dest, stream_type, source_arn)
        if skipped is not None:
            findings.details["canary"] = f"skipped: {skipped}"
            return
        if self._pending is not None:
            await self._verify_pending(s3, dest, degraded_above, down_above, findings)
        if self._pending is None:
            if not await self._put_canary(firehose, dest, source_arn, findings):
                self._canary_findings(degraded_above, down_above, findings)
                return
            if dest.buffer_interval <= p.canary_inline_wait:
                deadline = time.monotonic() + p.canary_inline_wait
                while self._pending is not None and time.monotonic() < deadline:
                    if not await self._verify_pending(
                        s3, dest, degraded_above, down_above, findings
                    ):
                        break
                    if self._pending is not None:
                        await asyncio.sleep(0.5)
        self._canary_findings(degraded_above, down_above, findings)

    async def _put_canary(
        self, firehose: Any, dest: Destination, source_arn: str | None, findings: Findings
    ) -> bool:
        """Put a new canary record; False when it was not put (a finding says why)."""
        p = self.params
        kinesis: Any = None
        if source_arn is not None:
            # The client first: its first creation loads the service model, and that time is
            # the prober's, not the stream's, so it must not count in the canary's age.
            try:
                kinesis = await plumbing_of(self.context).aws.client(
                    "kinesis", p.aws, region=_arn_region(source_arn) or p.aws.region
                )
            except ProbeError as err:
                return _put_failed(err, _source_stream(source_arn), findings)
        record_id = uuid.uuid4().hex
        put_at = datetime.now(UTC)
        record = canary_record(p, self.context.name, record_id, put_at)
        try:
            values = partition_values(p, dest, record)
        except UnresolvedKey as missing:
            query = f" (the stream's query is {dest.metadata_query})" if dest.metadata_query else ""
            findings.add(
                Status.UNKNOWN,
                (
                    f"cannot tell where the canary would land: no value for {missing.expression}"
                    f"{query}; set canary_fields so the query finds it, or partition_keys"
                ),
            )
            return False
        expected = expected_prefixes(
            p.expected_prefix or dest.prefix,
            put_at,
            values,
            dynamic_partitioning=dest.dynamic_partitioning,
        )
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        if source_arn is None:
            put_into = f"delivery stream {p.stream_name}"
            try:
                await firehose.put_record(DeliveryStreamName=p.stream_name, Record={"Data": data})
            except ProbeError as err:
                return _put_failed(err, put_into, findings)
        else:
            name = source_arn.split("/", 1)[-1]
            partition_key = p.partition_key or f"alivemcp-canary-{check_slug(self.context.name)}"
            put_into = f"Kinesis stream {name} (partition key {partition_key})"
            try:
                await kinesis.put_record(
                    StreamARN=source_arn, Data=data, PartitionKey=partition_key
                )
            except ProbeError as err:
                return _put_failed(err, _source_stream(source_arn), findings)
        self._pending = Canary(record_id, put_at, put_into, expected)
        return True

    async def _verify_pending(
        self,
        s3: Any,
        dest: Destination,
        degraded_above: float,
        down_above: float,
        findings: Findings,
    ) -> bool:
        """Look for the pending canary in S3 and resolve it when found or overdue; False when
        the search failed (a finding says why)."""
        canary = self._pending
        assert canary is not None
        age = (datetime.now(UTC) - canary.put_at).total_seconds()
        try:
            hit = await search_expected(s3, dest, canary, self.params)
            if hit is None and age > degraded_above:
                # Overdue: it may have landed, just not where it should.
                errors = self._error_prefixes(dest)
                hit = await search_elsewhere(s3, dest, canary, self.params, errors)
        except ProbeError as err:
            findings.add_error(
                err,
                REJECTED_IS_DOWN,
                reason=f"looking for the canary in {dest.bucket}: {err.operation}",
            )
            return False
        if hit is not None:
            self._last_canary = resolve(canary, dest, hit)
            self._pending = None
            return True
        if age > down_above:
            self._last_canary = not_delivered(canary, dest, age, down_above)
            self._pending = None
        return True

    def _canary_findings(
        self, degraded_above: float, down_above: float, findings: Findings
    ) -> None:
        """The last resolved canary's verdict (it holds until the next one resolves) and the
        pending one's age."""
        last = self._last_canary
        if last is not None:
            findings.details["canary"] = {
                "id": last.record_id,
                "status": last.status.value,
                "reason": last.reason,
                "key": last.key,
            }
            if last.verified:
                findings.details["canary"]["verified"] = last.verified
            if last.freshness is not None:
                findings.observe("canary_freshness_seconds", last.freshness)
            if last.status is not Status.UP:
                findings.add(last.status, last.reason)
            elif last.freshness is not None and last.freshness > down_above:
                findings.add(
                    Status.DOWN,
                    f"canary took {last.freshness:.0f}s end to end (limit {down_above:.0f}s)",
                )
            elif last.freshness is not None and last.freshness > degraded_above:
                findings.add(
                    Status.DEGRADED,
                    f"canary took {last.freshness:.0f}s end to end (over {degraded_above:.0f}s)",
                )
        pending = self._pending
        if pending is not None:
            age = (datetime.now(UTC) - pending.put_at).total_seconds()
            findings.observe("canary_pending_seconds", age)
            findings.details["canary_pending"] = {
                "id": pending.record_id,
                "age_seconds": round(age, 1),
                "put_into": pending.put_into,
                "expected_prefix": pending.expected_shown,
            }
            if age > degraded_above:
                findings.add(
                    Status.DEGRADED,
                    f"canary {pending.record_id} not delivered yet "
                    f"under {pending.expected_shown} after {age:.0f}s",
                )


def _kinesis_source(desc: Mapping[str, Any]) -> str | None:
    source = (desc.get("Source") or {}).get("KinesisStreamSourceDescription") or {}
    arn = source.get("KinesisStreamARN")
    return str(arn) if arn else None


def _source_stream(arn: str) -> str:
    return f"source Kinesis stream {arn.split('/', 1)[-1]}"


def _put_failed(err: ProbeError, into: str, findings: Findings) -> bool:
    """Say why the canary could not be put ``into`` a stream; False, for the put."""
    reason = describe_failure(err.kind, into, action="put the canary into")
    findings.add_error(err, REJECTED_IS_DOWN, reason=reason)
    return False


def _arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    return (parts[3] or None) if len(parts) > 3 else None


def _all_well(findings: Findings, last: CanaryVerdict | None) -> str:
    """The reason when nothing is wrong: what was checked and how fresh it was."""
    parts = ["stream ACTIVE"]
    metric = findings.observations.get("data_freshness_seconds")
    if metric is not None:
        parts.append(f"DataFreshness {metric:.0f}s")
    if last is not None and last.status is Status.UP and last.summary:
        parts.append(last.summary)
    elif "canary_pending" in findings.details:
        parts.append("canary pending")
    return ", ".join(parts)
