"""``s3_access_point``: read one object through an S3 access point ARN within a time limit.

An access point's own policy, the bucket's delegation policy and the reader's IAM role can each
drift independently of the bucket, so a bucket that is perfectly healthy can still refuse every
tenant that reads through its access point. This probe reads through the access point exactly
as a tenant does (GetObject or HeadObject with the ARN as the bucket) and names a 403 as policy
drift rather than as an outage of S3.

Retries (``aws.max_attempts``, every attempt counted) and their backoff fit inside ``limit``:
when time runs out after an error (a 500, throttling, a refused connection), the reason is
that error with its attempts; "no answer within the limit" means nothing came back.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import Field, field_validator

from alivemcp.plumbing.aws import (
    AwsSettings,
    aws_check_deadline,
    aws_error_kind,
    aws_error_summary,
    aws_time_limit,
)
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult

__all__ = ["S3AccessPointParams", "S3AccessPointProbe"]

#: How much of the body a GET reads: enough to prove bytes flow, never a whole large object.
_READ_CHUNK = 64 * 1024


class S3AccessPointParams(ProbeParams):
    aws: AwsSettings = Field(
        default_factory=AwsSettings, description="AWS identity, region and endpoint to read as."
    )
    access_point_arn: str = Field(
        description="Access point ARN used as the bucket, e.g. "
        "arn:aws:s3:us-east-1:123456789012:accesspoint/mcp-tenant-a."
    )
    key: str = Field(min_length=1, description="Object key to read through the access point.")
    method: Literal["get", "head"] = Field(
        "get", description="get: GetObject and read the first bytes; head: HeadObject only."
    )
    limit: Duration = Field(
        3.0,
        description="The read, retries and their backoff included, must finish within this "
        "time, else the check is down.",
    )
    max_read_bytes: int = Field(
        1024 * 1024,
        ge=0,
        description="GET reads at most this many body bytes (0: headers only), then stops.",
    )

    @field_validator("access_point_arn")
    @classmethod
    def _is_access_point_arn(cls, value: str) -> str:
        if not value.startswith("arn:") or ":accesspoint/" not in value:
            raise ValueError(
                "not an access point ARN (arn:aws:s3:REGION:ACCOUNT:accesspoint/NAME)"
            )
        return value


class S3AccessPointProbe(Probe[S3AccessPointParams]):
    Params = S3AccessPointParams
    summary = "GetObject/HeadObject through an S3 access point ARN within a limit; 403 = drift"
    target_param = "key"
    observables = (
        Observable("read_latency_seconds", "The read through the access point."),
        Observable("returned_bytes", "Bytes the read returned."),
    )

    async def probe(self) -> ProbeResult:
        with aws_check_deadline(self.context.timeout):
            return await self._probe()

    async def _probe(self) -> ProbeResult:
        p = self.params
        s3 = await self.context.plumbing.aws.client("s3", p.aws)
        where = f"{p.access_point_arn} key {p.key!r}"
        started = time.perf_counter()
        try:
            async with aws_time_limit(p.limit):
                read_bytes, meta = await self._read(s3)
        except TimeoutError:
            return ProbeResult.down(
                f"no answer within the {p.limit:g}s limit reading {where}",
                details={"access_point_arn": p.access_point_arn, "key": p.key},
            )
        except ClientError as exc:
            return _client_error_result(exc, where)
        except BotoCoreError as exc:
            kind = aws_error_kind(exc)
            if kind == "credentials":
                return ProbeResult.unknown(f"prober credentials: {aws_error_summary(exc)}")
            return ProbeResult.down(f"cannot reach the access point: {aws_error_summary(exc)}")
        elapsed = time.perf_counter() - started
        observations = {"read_latency_seconds": elapsed, "returned_bytes": float(read_bytes)}
        details: dict[str, Any] = {
            "access_point_arn": p.access_point_arn,
            "key": p.key,
            "method": p.method,
            **meta,
        }
        if elapsed > p.limit:  # the timeout above is the hard stop; this catches rounding
            return ProbeResult.down(
                f"read through the access point took {elapsed:.2f}s, over the {p.limit:g}s limit",
                observations=observations,
                details=details,
            )
        return ProbeResult.up(
            f"{p.method.upper()} through the access point in {elapsed * 1000:.0f} ms",
            observations=observations,
            details=details,
        )

    async def _read(self, s3: Any) -> tuple[int, dict[str, Any]]:
        p = self.params
        if p.method == "head":
            resp = await s3.head_object(Bucket=p.access_point_arn, Key=p.key)
            return 0, {"content_length": resp.get("ContentLength"), "etag": resp.get("ETag")}
        resp = await s3.get_object(Bucket=p.access_point_arn, Key=p.key)
        body = resp["Body"]
        read = 0
        try:
            while read < p.max_read_bytes:
                chunk = await body.read(min(_READ_CHUNK, p.max_read_bytes - read))
                if not chunk:
                    break
                read += len(chunk)
        finally:
            body.close()
        return read, {"content_length": resp.get("ContentLength"), "etag": resp.get("ETag")}


def _client_error_result(exc: ClientError, where: str) -> ProbeResult:
    kind = aws_error_kind(exc)
    summary = aws_error_summary(exc)
    details = {"error": summary, "error_kind": kind}
    if kind == "credentials":
        return ProbeResult.unknown(f"prober credentials rejected: {summary}", details=details)
    if kind == "permission":
        return ProbeResult.down(
            f"access denied (403) reading {where}: policy drift: the access point policy, the "
            "bucket's delegation policy or the reader's IAM role no longer allows this read",
            details=details,
        )
    if kind == "not_found":
        return ProbeResult.down(
            f"not found reading {where} (object, access point or bucket missing): {summary}",
            details=details,
        )
    if kind == "throttled":
        return ProbeResult.degraded(f"throttled reading {where}: {summary}", details=details)
    return ProbeResult.down(f"read failed through {where}: {summary}", details=details)
