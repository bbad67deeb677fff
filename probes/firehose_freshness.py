"""``firehose_freshness``: is a Firehose delivery stream delivering, on time and intact?

Firehose never reports a failed delivery to the writer: records go stale in the buffer, get
garbled by a transformation Lambda, or land silently under the error prefix. Each run:

1. **Stream state**: ``DescribeDeliveryStream`` must say ``ACTIVE``; the S3 destination's
   buffering hints, prefixes and compression give the default SLAs.
2. **Freshness metric**: CloudWatch ``AWS/Firehose`` ``DeliveryToS3.DataFreshness`` (Maximum
   over the last whole periods, window aligned to the period, exact dimensions) against the
   thresholds; ``DeliveryToS3.Success`` below 1 is degraded.
3. **Error prefix watch**: objects that appeared under the error output prefix since the last
   run are ``down`` (count + sample keys); objects seen before do not re-alert.
4. **End-to-end canary** (direct-PUT streams): put a JSON record with a unique id, then find it
   in S3 under the configured prefix in *later* runs (delivery takes at least the buffer
   interval, and a run must not block the scheduler for it). The canary's line must come back
   as valid, newline-delimited JSON: base64 text, or records run together, is the
   transformation trap and ``down``. The last resolved canary's verdict holds until the next
   canary resolves, so a garbled or missing delivery does not flap back to green.

Retries: each AWS call makes up to ``aws.max_attempts`` attempts in all (5xx, throttling and
connection failures only), and retries stop by the check's timeout, so an error that keeps
coming back is reported as itself rather than as the check's timeout.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import json
import re
import time
import uuid
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.aws import AwsSettings, aws_check_deadline, aws_settings_field
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings

__all__ = ["FirehoseFreshnessParams", "FirehoseFreshnessProbe", "inspect_delivery"]

#: The error output types Firehose writes for S3 destinations (``!{firehose:error-output-type}``).
ERROR_TYPES = ("processing-failed", "format-conversion-failed", "partitioning-failed",
               "delivery-failed")
#: Where Firehose writes failed records when the destination sets no ErrorOutputPrefix.
DEFAULT_ERROR_PREFIXES = tuple(f"{kind}/" for kind in ERROR_TYPES)
_ERROR_TYPE_TOKEN = "!{firehose:error-output-type}"
#: Firehose's documented default when the buffering hints leave the interval out.
DEFAULT_BUFFER_INTERVAL = 300.0
#: The seed's alarm: DataFreshness above 15 minutes means records are not getting out.
SEED_DOWN_SECONDS = 900.0
_CANARY_FIELD = "alivemcp_canary"
_TOKEN = re.compile(r"!\{([^}]*)\}")
_JAVA_TIME = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"),
              ("ss", "%S"))
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")
_CHUNK = 256 * 1024
#: Bytes kept between chunks so a canary (or its base64) cut by a chunk boundary is still seen.
_OVERLAP = 64 * 1024
#: How far past the canary a scan reads looking for the end of its line.
_LINE_CAP = 1024 * 1024
#: A request the stream or bucket refuses as invalid blames the delivery path (as a 5xx does).
_OVERRIDES = {ErrorKind.REJECTED: Status.DOWN}


class FirehoseFreshnessParams(ProbeParams):
    aws: AwsSettings = aws_settings_field(
        "AWS identity/region for Firehose, CloudWatch and the destination bucket."
    )
    stream_name: str = Field(min_length=1, description="Delivery stream name.")
    degraded_above: Duration | None = Field(
        None,
        description="Freshness (metric and canary) above this is degraded; default: the "
        "buffer interval plus margin.",
    )
    down_above: Duration | None = Field(
        None,
        description="Freshness above this is down; default 900 s (the usual alarm), or the "
        "buffer interval plus twice the margin when that is larger.",
    )
    margin: Duration = Field(
        60.0, description="Allowance on top of the buffer interval for the default thresholds."
    )
    metric_period: Duration = Field(60.0, description="CloudWatch period (seconds, whole).")
    metric_periods: int = Field(
        5, ge=1, le=1440, description="How many whole periods (ending at the last one) to read."
    )
    canary: bool = Field(
        True, description="Put and verify a canary record (direct-PUT streams only)."
    )
    canary_inline_wait: Duration = Field(
        5.0,
        description="When the buffer interval is at most this, look for the new canary within "
        "the same run for up to this long (zero-buffering streams).",
    )
    canary_max_objects: int = Field(
        20, ge=1, description="Delivered objects (oldest first since the put) scanned per run."
    )
    canary_max_object_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Decompressed bytes scanned per object (streamed, bounded memory).",
    )
    error_prefixes: list[str] | None = Field(
        None,
        description="Prefixes to watch for failed records; default: the static part of the "
        "destination's ErrorOutputPrefix, else processing-failed/, format-conversion-failed/ "
        "and delivery-failed/.",
    )
    error_lookback: Duration = Field(
        900.0,
        description="On the first run, error objects younger than this count as new (older "
        "ones are history and do not alert).",
    )
    max_list_pages: int = Field(
        10, ge=1, description="ListObjectsV2 pages (1000 keys each) per prefix and run."
    )


@dataclass
class _Destination:
    bucket: str
    prefix: str
    error_prefix: str
    buffer_interval: float
    compression: str
    transformed: bool
    format_conversion: bool
    dynamic_partitioning: bool


@dataclass
class _Canary:
    record_id: str
    put_at: datetime
    scanned: set[str] = field(default_factory=set)
    saw_binary: bool = False


@dataclass
class _CanaryVerdict:
    record_id: str
    status: Status
    reason: str
    freshness: float | None = None
    key: str | None = None


@dataclass
class _DeliveryCheck:
    """What the canary's bytes look like in a delivered object."""

    found: bool
    problem: str | None = None
    binary: bool = False  # undecodable bytes seen (plain text returned where base64 was due)


class FirehoseFreshnessProbe(Probe[FirehoseFreshnessParams]):
    Params = FirehoseFreshnessParams
    summary = "Firehose stream ACTIVE, DataFreshness, error prefix and a canary record in S3"
    target_param = "stream_name"
    default_timeout = 30.0
    observables = (
        Observable("buffer_interval_seconds", "The destination's buffering interval."),
        Observable("data_freshness_seconds",
                   "CloudWatch DataFreshness: age of the oldest record not yet delivered."),
        Observable("delivery_success_ratio", "CloudWatch DeliveryToS3.Success (1: all)."),
        Observable("new_error_objects", "Objects that appeared under the error prefix."),
        Observable("canary_freshness_seconds", "Put of the canary record to its object in S3."),
        Observable("canary_pending_seconds", "Age of the canary still awaited in S3."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: _Canary | None = None
        self._last_canary: _CanaryVerdict | None = None
        self._error_watermark: datetime | None = None
        self._error_seen_at_watermark: set[str] = set()

    async def probe(self) -> ProbeResult:
        with aws_check_deadline(self.context.timeout):
            return await self._probe()

    async def _probe(self) -> ProbeResult:
        p = self.params
        aws = self.context.plumbing.aws
        firehose = await aws.client("firehose", p.aws)
        findings = Findings()
        try:
            described = await firehose.describe_delivery_stream(DeliveryStreamName=p.stream_name)
        except ProbeError as err:
            findings.add_error(err, _OVERRIDES, reason=_describe_failure(err.kind, p.stream_name))
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
        dest = _s3_destination(desc)
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
        s3 = await aws.client("s3", p.aws)
        cloudwatch = await aws.client("cloudwatch", p.aws)
        await self._check_metrics(cloudwatch, degraded_above, down_above, findings)
        await self._check_errors(s3, dest, findings)
        if p.canary:
            direct_put = desc.get("DeliveryStreamType", "DirectPut") == "DirectPut"
            await self._check_canary(firehose, s3, dest, direct_put, degraded_above, down_above,
                                     findings)
        findings.details["findings"] = findings.as_json()
        return findings.result(_all_well(findings))

    # --- thresholds ---

    def _thresholds(self, dest: _Destination) -> tuple[float, float]:
        p = self.params
        down = p.down_above or max(SEED_DOWN_SECONDS, dest.buffer_interval + 2 * p.margin)
        degraded = p.degraded_above or dest.buffer_interval + p.margin
        return min(degraded, down), down

    # --- CloudWatch ---

    async def _check_metrics(self, cloudwatch: Any, degraded_above: float, down_above: float,
                             findings: Findings) -> None:
        p = self.params
        period = max(60, int(p.metric_period) // 60 * 60)  # standard-resolution periods
        end_epoch = int(time.time()) // period * period
        end = datetime.fromtimestamp(end_epoch, UTC)
        start = end - timedelta(seconds=period * p.metric_periods)
        dims = [{"Name": "DeliveryStreamName", "Value": p.stream_name}]

        def query(qid: str, name: str, stat: str) -> dict[str, Any]:
            metric = {"Namespace": "AWS/Firehose", "MetricName": name, "Dimensions": dims}
            return {"Id": qid, "MetricStat": {"Metric": metric, "Period": period, "Stat": stat},
                    "ReturnData": True}

        try:
            resp = await cloudwatch.get_metric_data(
                MetricDataQueries=[
                    query("freshness", "DeliveryToS3.DataFreshness", "Maximum"),
                    query("success", "DeliveryToS3.Success", "Average"),
                ],
                StartTime=start,
                EndTime=end,
            )
        except ProbeError as err:
            # The metrics are the prober's view of the stream, not the stream itself.
            findings.add(Status.UNKNOWN, f"cannot read CloudWatch metrics: {err.operation}: "
                                         f"{err.detail}")
            return
        values = {r["Id"]: [float(v) for v in r.get("Values", [])]
                  for r in resp.get("MetricDataResults", [])}
        findings.details["metric_window"] = {"start": start.isoformat(), "end": end.isoformat(),
                                             "period_seconds": period}
        freshness = values.get("freshness") or []
        if freshness:
            worst = max(freshness)
            findings.observe("data_freshness_seconds", worst)
            if worst > down_above:
                findings.add(Status.DOWN, f"DataFreshness {worst:.0f}s is over the "
                                          f"{down_above:.0f}s limit (records stale)")
            elif worst > degraded_above:
                findings.add(Status.DEGRADED, f"DataFreshness {worst:.0f}s is over "
                                              f"{degraded_above:.0f}s")
        else:
            findings.details["metric_note"] = "no DataFreshness datapoints in the window"
        success = values.get("success") or []
        if success:
            lowest = min(success)
            findings.observe("delivery_success_ratio", lowest)
            if lowest < 1:
                findings.add(Status.DEGRADED, f"DeliveryToS3.Success {lowest:.2f} < 1: "
                                              "some S3 deliveries failed")

    # --- error prefix ---

    async def _check_errors(self, s3: Any, dest: _Destination, findings: Findings) -> None:
        p = self.params
        prefixes = (list(p.error_prefixes) if p.error_prefixes is not None
                    else _error_listing_prefixes(dest.error_prefix))
        findings.details["error_prefixes_watched"] = prefixes
        now = datetime.now(UTC)
        watermark = self._error_watermark or now - timedelta(seconds=p.error_lookback)
        listed: list[dict[str, Any]] = []
        try:
            for prefix in prefixes:
                listed += await _list(s3, dest.bucket, prefix, p.max_list_pages)
        except ProbeError as err:
            findings.add_error(err, _OVERRIDES,
                               reason=f"listing error prefixes in {dest.bucket}: {err.operation}")
            return
        seen = self._error_seen_at_watermark
        new = [
            obj for obj in listed
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
        findings.add(Status.DOWN, f"{len(new)} new object(s) under the error prefix{what} since "
                                  f"the last run, e.g. {samples[-1]}")

    # --- canary ---

    async def _check_canary(self, firehose: Any, s3: Any, dest: _Destination, direct_put: bool,
                            degraded_above: float, down_above: float,
                            findings: Findings) -> None:
        p = self.params
        skipped = _canary_skipped(dest, direct_put)
        if skipped is not None:
            findings.details["canary"] = f"skipped: {skipped}"
            return
        if self._pending is not None:
            await self._verify_pending(s3, dest, down_above, findings)
        if self._pending is None:
            if not await self._put_canary(firehose, findings):
                return
            if dest.buffer_interval <= p.canary_inline_wait:
                deadline = time.monotonic() + p.canary_inline_wait
                while self._pending is not None and time.monotonic() < deadline:
                    if not await self._verify_pending(s3, dest, down_above, findings):
                        break
                    if self._pending is not None:
                        await asyncio.sleep(0.5)
        self._canary_findings(degraded_above, down_above, findings)

    async def _put_canary(self, firehose: Any, findings: Findings) -> bool:
        """Put a new canary record; False when the put failed (a finding says why)."""
        record_id = uuid.uuid4().hex
        put_at = datetime.now(UTC)
        record = {_CANARY_FIELD: record_id, "sent_at": put_at.isoformat(),
                  "check": self.context.name}
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            await firehose.put_record(DeliveryStreamName=self.params.stream_name,
                                      Record={"Data": data})
        except ProbeError as err:
            findings.add_error(err, _OVERRIDES, reason="prober credentials"
                               if err.kind is ErrorKind.AUTH else "PutRecord of the canary failed")
            return False
        self._pending = _Canary(record_id, put_at)
        return True

    async def _verify_pending(self, s3: Any, dest: _Destination, down_above: float,
                              findings: Findings) -> bool:
        """Look for the pending canary in S3 and resolve it when found or overdue; False when
        the search failed (a finding says why)."""
        canary = self._pending
        assert canary is not None
        try:
            hit = await self._search(s3, dest, canary)
        except ProbeError as err:
            findings.add_error(err, _OVERRIDES, reason=f"looking for the canary in "
                                                       f"{dest.bucket}: {err.operation}")
            return False
        if hit is not None:
            key, modified, check = hit
            freshness = max(0.0, (modified - canary.put_at).total_seconds())
            if check.problem:
                self._last_canary = _CanaryVerdict(canary.record_id, Status.DOWN, check.problem,
                                                   freshness, key)
            else:
                self._last_canary = _CanaryVerdict(canary.record_id, Status.UP, "delivered",
                                                   freshness, key)
            self._pending = None
            return True
        age = (datetime.now(UTC) - canary.put_at).total_seconds()
        if age > down_above:
            self._last_canary = _CanaryVerdict(
                canary.record_id, Status.DOWN,
                f"canary record {canary.record_id} not found under "
                f"s3://{dest.bucket}/{_static_part(dest.prefix)} after {age:.0f}s "
                f"(limit {down_above:.0f}s): records are not being delivered"
                + (" (objects delivered since hold undecodable bytes: a transformation Lambda "
                   "returning plain text where base64 was due garbles records this way)"
                   if canary.saw_binary else ""),
            )
            self._pending = None
        return True

    def _canary_findings(self, degraded_above: float, down_above: float,
                         findings: Findings) -> None:
        """The last resolved canary's verdict (it holds until the next one resolves) and the
        pending one's age."""
        last = self._last_canary
        if last is not None:
            findings.details["canary"] = {"id": last.record_id, "status": last.status.value,
                                          "reason": last.reason, "key": last.key}
            if last.freshness is not None:
                findings.observe("canary_freshness_seconds", last.freshness)
            if last.status is not Status.UP:
                findings.add(last.status, last.reason)
            elif last.freshness is not None and last.freshness > down_above:
                findings.add(Status.DOWN, f"canary took {last.freshness:.0f}s end to end "
                                          f"(limit {down_above:.0f}s)")
            elif last.freshness is not None and last.freshness > degraded_above:
                findings.add(Status.DEGRADED, f"canary took {last.freshness:.0f}s end to end "
                                              f"(over {degraded_above:.0f}s)")
        pending = self._pending
        if pending is not None:
            age = (datetime.now(UTC) - pending.put_at).total_seconds()
            findings.observe("canary_pending_seconds", age)
            findings.details["canary_pending"] = {"id": pending.record_id,
                                                  "age_seconds": round(age, 1)}
            if age > degraded_above:
                findings.add(Status.DEGRADED, f"canary {pending.record_id} not delivered yet "
                                              f"after {age:.0f}s")

    async def _search(self, s3: Any, dest: _Destination,
                      canary: _Canary) -> tuple[str, datetime, _DeliveryCheck] | None:
        p = self.params
        # The object holding the canary is written after the put; LastModified has whole
        # seconds, and the prober's clock may be a little off S3's.
        since = canary.put_at.replace(microsecond=0) - timedelta(seconds=5)
        candidates: dict[str, dict[str, Any]] = {}
        for prefix in _delivery_prefixes(dest.prefix, canary.put_at):
            for obj in await _list(s3, dest.bucket, prefix, p.max_list_pages):
                if obj["LastModified"] >= since and obj["Key"] not in canary.scanned:
                    candidates[obj["Key"]] = obj
        oldest_first = sorted(candidates.values(), key=lambda o: o["LastModified"])
        for obj in oldest_first[: p.canary_max_objects]:
            resp = await s3.get_object(Bucket=dest.bucket, Key=obj["Key"])
            async with resp["Body"] as stream:
                check = await scan_delivery(
                    _chunks(stream), canary.record_id, transformed=dest.transformed,
                    max_bytes=p.canary_max_object_bytes,
                )
            canary.scanned.add(obj["Key"])
            canary.saw_binary = canary.saw_binary or check.binary
            if check.found:
                return obj["Key"], obj["LastModified"], check
        return None


async def _chunks(stream: Any) -> AsyncIterator[bytes]:
    while chunk := await stream.read(_CHUNK):
        yield chunk


async def scan_delivery(chunks: AsyncIterator[bytes], record_id: str, *,
                        transformed: bool = False, max_bytes: int = 64 << 20) -> _DeliveryCheck:
    """Stream a delivered object (gzip or not) looking for the canary, in bounded memory:
    only the current chunk, a short overlap and the canary's own line are held."""
    needle = record_id.encode()
    inflater: _Gunzip | None = None
    text = codecs.getincrementaldecoder("utf-8")()
    binary = False
    window = b""
    total = 0
    first = True
    iterator = aiter(chunks)
    async for raw in iterator:
        if first:
            first = False
            if raw[:2] == b"\x1f\x8b":
                inflater = _Gunzip()
        data = _inflate(inflater, raw)
        total += len(data)
        if not binary:
            try:
                text.decode(data)
            except UnicodeDecodeError:
                binary = True
        window += data
        where = window.find(needle)
        if where >= 0:
            # Read on to the end of the canary's line (bounded), then judge that line.
            while window.find(b"\n", where) < 0 and len(window) - where < _LINE_CAP:
                more = await anext(iterator, b"")
                if not more:
                    break
                window += _inflate(inflater, more)
            return inspect_delivery(window, record_id, transformed)
        if _base64_hides(window, needle):
            return inspect_delivery(window, record_id, transformed)
        window = window[-_OVERLAP:]
        if total >= max_bytes:
            break
    return _DeliveryCheck(False, binary=binary)


class _Gunzip:
    """Incremental gunzip that also reads concatenated gzip members."""

    def __init__(self) -> None:
        self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, raw: bytes) -> bytes:
        out = b""
        try:
            while raw:
                out += self._member.decompress(raw)
                if not self._member.eof:
                    break
                raw = self._member.unused_data
                self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        except zlib.error:
            pass  # a corrupt stream: keep what was inflated so far
        return out


def _inflate(inflater: _Gunzip | None, raw: bytes) -> bytes:
    return raw if inflater is None else inflater.feed(raw)


def _base64_hides(body: bytes, needle: bytes) -> bool:
    """Whether ``needle`` is inside base64 text in ``body`` (any alignment: a run may have been
    cut anywhere, and records run together keep no padding between them)."""
    for match in _BASE64_RUN.finditer(body):
        core = match.group().rstrip(b"=")
        for offset in range(4):
            piece = core[offset:]
            piece = piece[: len(piece) // 4 * 4]
            if len(piece) < 16:
                continue
            try:
                decoded = base64.b64decode(piece, validate=True)
            except (binascii.Error, ValueError):
                continue
            if needle in decoded:
                return True
    return False


def inspect_delivery(body: bytes, record_id: str, transformed: bool = False) -> _DeliveryCheck:
    """Find the canary in a delivered object and say whether its bytes survived intact:
    one valid JSON document on its own newline-terminated line."""
    needle = record_id.encode()
    where = body.find(needle)
    lambda_hint = " by the transformation Lambda" if transformed else ""
    if where < 0:
        if _base64_hides(body, needle):
            return _DeliveryCheck(True, (
                    "canary delivered as base64 text where JSON was expected: the "
                    f"transformation trap (records base64-encoded twice{lambda_hint}: return "
                "base64 of the JSON line, not of its base64)"))
        return _DeliveryCheck(False)
    start = body.rfind(b"\n", 0, where) + 1
    end = body.find(b"\n", where)
    line = body[start:] if end < 0 else body[start:end]
    run_together = b"}{" in line
    if run_together:
        return _DeliveryCheck(True, (
            "canary delivered run together with other records (no newline between them): the "
            f"transformation trap (append \\n to each record before base64-encoding"
            f"{lambda_hint})"))
    try:
        doc = json.loads(line)
    except ValueError:
        return _DeliveryCheck(True, "canary line is not valid JSON in the delivered object"
                                    f"{lambda_hint}: records are garbled")
    if not isinstance(doc, dict) or doc.get(_CANARY_FIELD) != record_id:
        return _DeliveryCheck(True, "canary id found, but not as the record's "
                                    f"{_CANARY_FIELD} field: records are garbled")
    if end < 0:
        return _DeliveryCheck(True, (
            "canary delivered without its trailing newline: the transformation trap "
            f"(records must end with \\n{lambda_hint}, or they run together in S3)"))
    return _DeliveryCheck(True)


# --- helpers ---


def _s3_destination(desc: dict[str, Any]) -> _Destination | None:
    for destination in desc.get("Destinations") or []:
        conf = (destination.get("ExtendedS3DestinationDescription")
                or destination.get("S3DestinationDescription"))
        if not conf:
            continue
        hints = conf.get("BufferingHints") or {}
        processing = conf.get("ProcessingConfiguration") or {}
        lambdas = [proc for proc in processing.get("Processors") or []
                   if proc.get("Type") == "Lambda"]
        conversion = conf.get("DataFormatConversionConfiguration") or {}
        return _Destination(
            bucket=str(conf.get("BucketARN", "")).split(":")[-1],
            prefix=conf.get("Prefix") or "",
            error_prefix=conf.get("ErrorOutputPrefix") or "",
            buffer_interval=float(hints.get("IntervalInSeconds", DEFAULT_BUFFER_INTERVAL)),
            compression=conf.get("CompressionFormat") or "UNCOMPRESSED",
            transformed=bool(processing.get("Enabled")) and bool(lambdas),
            format_conversion=bool(conversion.get("Enabled")),
            dynamic_partitioning=bool(
                (conf.get("DynamicPartitioningConfiguration") or {}).get("Enabled")
            ),
        )
    return None


def _static_part(prefix: str) -> str:
    """The literal part of a Firehose prefix before its first ``!{...}`` expression."""
    match = _TOKEN.search(prefix)
    return prefix if match is None else prefix[: match.start()]


def _error_listing_prefixes(error_prefix: str) -> list[str]:
    """Literal prefixes to list for failed records: one per error type when the prefix
    names the type, never the whole bucket (where the good deliveries also live)."""
    if _ERROR_TYPE_TOKEN in error_prefix:
        expanded = [_static_part(error_prefix.replace(_ERROR_TYPE_TOKEN, kind))
                    for kind in ERROR_TYPES]
        return list(dict.fromkeys(expanded))
    static = _static_part(error_prefix)
    return [static] if static else list(DEFAULT_ERROR_PREFIXES)


def _delivery_prefixes(prefix: str, put_at: datetime) -> list[str]:
    """Where a record put at ``put_at`` can land: timestamp expressions expanded for the
    arrival time (a few seconds either side, for hour boundaries), up to the first expression
    that cannot be expanded (dynamic partitioning keys)."""
    out: list[str] = []
    for moment in (put_at - timedelta(seconds=10), put_at, put_at + timedelta(seconds=30)):
        if "!{timestamp:" not in prefix:
            # Firehose appends yyyy/MM/dd/HH/ to a prefix without timestamp expressions.
            candidate = prefix + moment.strftime("%Y/%m/%d/%H/") if (
                prefix == "" or prefix.endswith("/")) else prefix
            candidate = _static_part(candidate)
        else:
            candidate = _expand_timestamps(prefix, moment)
        if candidate not in out:
            out.append(candidate)
    return out


def _expand_timestamps(prefix: str, moment: datetime) -> str:
    result: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(prefix):
        result.append(prefix[pos:match.start()])
        expr = match.group(1)
        if not expr.startswith("timestamp:"):
            return "".join(result)
        fmt = expr.removeprefix("timestamp:")
        for java, c_fmt in _JAVA_TIME:
            fmt = fmt.replace(java, c_fmt)
        result.append(moment.strftime(fmt))
        pos = match.end()
    result.append(prefix[pos:])
    return "".join(result)


async def _list(s3: Any, bucket: str, prefix: str, max_pages: int) -> list[dict[str, Any]]:
    """The objects under ``prefix``, at most ``max_pages`` ListObjectsV2 pages of them."""
    objects: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    for _ in range(max_pages):
        resp = await s3.list_objects_v2(**kwargs)
        objects += resp.get("Contents", [])
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            break
        kwargs["ContinuationToken"] = token
    return objects


def _canary_skipped(dest: _Destination, direct_put: bool) -> str | None:
    """Why no canary can be put or found for this stream (None: it can)."""
    if not direct_put:
        return "the stream reads from Kinesis (no direct PUT)"
    if dest.format_conversion:
        return "records are converted to Parquet/ORC"
    if dest.dynamic_partitioning:
        # A canary lacks the partition keys (it would land under the error prefix), and its
        # object could be anywhere under the partitions.
        return "dynamic partitioning"
    if dest.compression not in ("UNCOMPRESSED", "GZIP"):
        return f"cannot read {dest.compression} objects"
    return None


def _describe_failure(kind: ErrorKind, stream: str) -> str:
    if kind is ErrorKind.AUTH:
        return "prober credentials"
    if kind is ErrorKind.NOT_FOUND:
        return f"delivery stream {stream} not found"
    if kind is ErrorKind.PERMISSION:
        return f"not allowed to describe {stream}"
    return "DescribeDeliveryStream failed"


def _all_well(findings: Findings) -> str:
    """The reason when nothing is wrong: what was checked and how fresh it was."""
    parts = ["stream ACTIVE"]
    metric = findings.observations.get("data_freshness_seconds")
    if metric is not None:
        parts.append(f"DataFreshness {metric:.0f}s")
    fresh = findings.observations.get("canary_freshness_seconds")
    if fresh is not None:
        parts.append(f"canary delivered in {fresh:.0f}s")
    elif "canary_pending" in findings.details:
        parts.append("canary pending")
    return ", ".join(parts)
