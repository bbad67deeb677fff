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

from pydantic import Field, field_validator

from alivemcp.errors import ErrorKind, ProbeError, describe_failure
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.aws import (
    AwsSettings,
    aws_settings_field,
    aws_time_limit,
    within_aws_check_deadline,
)
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN

__all__ = ["S3AccessPointParams", "S3AccessPointProbe"]

#: How much of the body a GET reads: enough to prove bytes flow, never a whole large object.
_READ_CHUNK = 64 * 1024


class S3AccessPointParams(ProbeParams):
    aws: AwsSettings = aws_settings_field()
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
            raise ValueError("not an access point ARN (arn:aws:s3:REGION:ACCOUNT:accesspoint/NAME)")
        return value


class S3AccessPointProbe(Probe[S3AccessPointParams]):
    Params = S3AccessPointParams
    summary = "GetObject/HeadObject through an S3 access point ARN within a limit; 403 = drift"
    target_param = "key"
    observables = (
        Observable("read_latency_seconds", "The read through the access point."),
        Observable("returned_bytes", "Bytes the read returned."),
    )

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        s3 = await plumbing_of(self.context).aws.client("s3", p.aws)
        where = f"{p.access_point_arn} key {p.key!r}"
        findings = Findings()
        findings.details.update(access_point_arn=p.access_point_arn, key=p.key)
        started = time.perf_counter()
        try:
            async with aws_time_limit(p.limit):
                read_bytes, meta = await self._read(s3)
        except TimeoutError:
            findings.add(Status.DOWN, f"no answer within the {p.limit:g}s limit reading {where}")
            return findings.result()
        except ProbeError as err:
            findings.details.update(error=err.detail, error_kind=err.kind.value)
            reason = describe_failure(err.kind, where, action="read", overrides=_SENTENCES)
            findings.add_error(err, _OVERRIDES, reason=reason)
            return findings.result()
        elapsed = time.perf_counter() - started
        findings.observe("read_latency_seconds", elapsed)
        findings.observe("returned_bytes", float(read_bytes))
        findings.details.update(method=p.method, **meta)
        if elapsed > p.limit:  # the timeout above is the hard stop; this catches rounding
            findings.add(
                Status.DOWN,
                f"read through the access point took {elapsed:.2f}s, over the {p.limit:g}s limit",
            )
        return findings.result(
            f"{p.method.upper()} through the access point in {elapsed * 1000:.0f} ms"
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


#: A 403 here is the access point's policy drifting (the tenant's view), and any other
#: refusal of a plain read blames the access point too.
_OVERRIDES = {**REJECTED_IS_DOWN, ErrorKind.PERMISSION: Status.DOWN}


#: Where this probe says more than the shared sentences (``alivemcp.errors``): a 403 is
#: policy drift, a missing key may be any of three things, and the tenant's view of
#: throttling and of an unreachable endpoint is the access point's.
_UNREACHABLE = "cannot reach the access point"
_SENTENCES = {
    ErrorKind.PERMISSION: (
        "access denied (403) reading {subject}: policy drift: the access point policy, the "
        "bucket's delegation policy or the reader's IAM role no longer allows this read"
    ),
    ErrorKind.NOT_FOUND: "{subject} not found (object, access point or bucket missing)",
    ErrorKind.THROTTLED: "throttled reading {subject}",
    ErrorKind.CONNECT: _UNREACHABLE,
    ErrorKind.DNS: _UNREACHABLE,
    ErrorKind.TLS: _UNREACHABLE,
    ErrorKind.TIMEOUT: _UNREACHABLE,
}
