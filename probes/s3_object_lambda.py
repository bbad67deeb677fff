"""``s3_object_lambda``: prove an Object Lambda access point still redacts, fast and closed.

The probe seeds a canary document holding known PII samples (SSN, email, phone, card number) in
the backing location, then reads it through the Object Lambda access point ARN exactly like an
MCP tool does (``GetObject`` with the ARN as the bucket: botocore resolves the
``s3-object-lambda`` endpoint and signs for it). Verdicts:

- ``down`` when the read fails, answers non-200 or takes longer than ``limit`` (default 5 s).
  Retries (``aws.max_attempts``, every attempt counted) and their backoff fit inside ``limit``:
  when time runs out after an error, the reason is that error with its attempts ("... 500
  TransformationFailed ... (3 attempts in 1.2s)"); "did not answer" means nothing came back;
- ``down`` with a loud reason when any raw PII sample comes back: the transformer failed open,
  which is a compliance failure and worse than an error;
- ``degraded`` when configured markers (e.g. ``[SSN REDACTED]``) are missing from the body;
- ``up`` otherwise, with the transform latency and the bytes returned.

Large results come back through a 307 redirect to a written-back object; the HTTP layer under
botocore follows a 307 by itself (dropping the signature on the cross-host hop), so the
redirected body is checked exactly like an inline one.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.errors import ErrorKind, ProbeError, describe_failure
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import (
    AwsSettings,
    aws_settings_field,
    aws_time_limit,
    within_aws_check_deadline,
)
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN

__all__ = ["CanarySeed", "S3ObjectLambdaParams", "S3ObjectLambdaProbe"]

#: Well-known fake values: the SSA's retired specimen SSN, a reserved example.com address, a
#: 555 number and the Visa test card. They match the usual redaction patterns.
DEFAULT_PII_SAMPLES: dict[str, str] = {
    "ssn": "078-05-1120",
    "email": "canary.pii@example.com",
    "phone": "555-201-7788",
    "card": "4111111111111111",
}
_READ_CHUNK = 256 * 1024


class CanarySeed(BaseModel):
    """Where the probe writes its canary document (the Object Lambda's backing location)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str = Field(
        description="Backing bucket name, or the supporting access point ARN, to write to."
    )
    key: str | None = Field(
        None, description="Key to write; default: the probe's key (the same object)."
    )
    aws: AwsSettings | None = Field(
        None,
        description="Identity/endpoint for the write (a writer role, or a different local "
        "endpoint); default: the probe's aws block.",
    )
    every: Duration = Field(
        3600.0,
        description="Rewrite the canary this often (also whenever the read says it is missing).",
    )
    tags: dict[str, str] = canary.tags_field("true")


class S3ObjectLambdaParams(ProbeParams):
    aws: AwsSettings = aws_settings_field()
    access_point_arn: str = Field(
        description="Object Lambda access point ARN, e.g. "
        "arn:aws:s3-object-lambda:us-east-1:123456789012:accesspoint/mcp-data-pii-clean."
    )
    key: str = Field(min_length=1, description="Key of the canary document, read through it.")
    seed: CanarySeed | None = Field(
        None,
        description="Write the canary document to the backing location; without it the "
        "document must already exist and contain every PII sample.",
    )
    pii_samples: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_PII_SAMPLES),
        min_length=1,
        description="Named raw PII values in the canary; any of them coming back is a failure.",
    )
    canary_body: str | None = Field(
        None,
        description="The canary document's text (must contain every PII sample); default: a "
        "short document with one sentence per sample.",
    )
    expected_markers: list[str] = Field(
        default_factory=list,
        description="Text the transformed body must contain (e.g. '[SSN REDACTED]'); missing "
        "markers are degraded.",
    )
    limit: Duration = Field(
        5.0,
        description="The transformed read, retries and their backoff included, must finish "
        "within this.",
    )
    max_read_bytes: int = Field(
        16 * 1024 * 1024, ge=1, description="Read at most this many bytes of the response."
    )

    @field_validator("access_point_arn")
    @classmethod
    def _is_olap_arn(cls, value: str) -> str:
        if (
            not value.startswith("arn:")
            or ":s3-object-lambda:" not in value
            or (":accesspoint/" not in value)
        ):
            raise ValueError(
                "not an Object Lambda access point ARN "
                "(arn:aws:s3-object-lambda:REGION:ACCOUNT:accesspoint/NAME)"
            )
        return value

    @model_validator(mode="after")
    def _body_holds_samples(self) -> S3ObjectLambdaParams:
        if self.canary_body is not None:
            missing = [n for n, v in self.pii_samples.items() if v not in self.canary_body]
            if missing:
                raise ValueError(f"canary_body lacks the PII samples {missing}")
        return self

    def document(self) -> str:
        if self.canary_body is not None:
            return self.canary_body
        lines = ["alivemcp Object Lambda canary: every value below is fake and must be redacted."]
        lines += [f"{name}: {value}" for name, value in self.pii_samples.items()]
        return "\n".join(lines) + "\n"


class S3ObjectLambdaProbe(Probe[S3ObjectLambdaParams]):
    Params = S3ObjectLambdaParams
    summary = "GetObject through an Object Lambda access point; raw PII back = failed open"
    default_timeout = 15.0
    observables = (
        Observable("transform_latency_seconds", "The read through the Object Lambda."),
        Observable("returned_bytes", "Bytes the transformed read returned."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seeded_at: float | None = None

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        seed_note = await self._seed_if_due()
        if isinstance(seed_note, ProbeResult):
            return seed_note
        s3 = await plumbing_of(self.context).aws.client("s3", p.aws)
        started = time.perf_counter()
        try:
            async with aws_time_limit(p.limit):
                status, body = await self._read(s3)
        except TimeoutError:
            return ProbeResult.down(
                f"Object Lambda transform did not answer within {p.limit:g}s "
                f"({p.access_point_arn})",
                details=self._details(),
            )
        except ProbeError as err:
            return self._read_failed(err)
        elapsed = time.perf_counter() - started
        observations = {"transform_latency_seconds": elapsed, "returned_bytes": float(len(body))}
        return self._judge(status, body, elapsed, observations, seed_note)

    def _judge(
        self,
        status: int,
        body: bytes,
        elapsed: float,
        observations: dict[str, float],
        seed_note: str | None,
    ) -> ProbeResult:
        p = self.params
        details = self._details(http_status=status, seed=seed_note)
        text = body.decode("utf-8", errors="replace")
        leaked = [name for name, value in p.pii_samples.items() if _contains(text, value)]
        if leaked:
            return ProbeResult.down(
                f"FAILED OPEN: raw PII came back through {p.access_point_arn} "
                f"({', '.join(leaked)}): the transformer returned unredacted data "
                "(compliance failure: it must fail closed with an error)",
                observations=observations,
                details={**details, "leaked_samples": leaked},
            )
        if status != 200:
            return ProbeResult.down(
                f"Object Lambda answered HTTP {status}, not 200",
                observations=observations,
                details=details,
            )
        if elapsed > p.limit:
            return ProbeResult.down(
                f"transform took {elapsed:.2f}s, over the {p.limit:g}s limit",
                observations=observations,
                details=details,
            )
        missing = [marker for marker in p.expected_markers if marker not in text]
        if missing:
            return ProbeResult.degraded(
                f"transformed body lacks expected markers {missing} (no raw PII came back)",
                observations=observations,
                details={**details, "missing_markers": missing},
            )
        return ProbeResult.up(
            f"redacted in {elapsed * 1000:.0f} ms, {len(body)} bytes, no raw PII",
            observations=observations,
            details=details,
        )

    async def _read(self, s3: Any) -> tuple[int, bytes]:
        p = self.params
        resp = await s3.get_object(Bucket=p.access_point_arn, Key=p.key)
        status = int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        stream = resp["Body"]
        chunks: list[bytes] = []
        size = 0
        try:
            while size < p.max_read_bytes:
                chunk = await stream.read(min(_READ_CHUNK, p.max_read_bytes - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            stream.close()
        return status, b"".join(chunks)

    async def _seed_if_due(self) -> str | ProbeResult | None:
        """Write the canary when due. A failed write before any success is ``unknown`` (the
        probe cannot know what it reads); after one, the earlier canary is still checked."""
        seed = self.params.seed
        if seed is None:
            return None
        now = time.monotonic()
        if self._seeded_at is not None and now - self._seeded_at < seed.every:
            return None
        s3 = await plumbing_of(self.context).aws.client("s3", seed.aws or self.params.aws)
        kwargs: dict[str, Any] = {
            "Bucket": seed.bucket,
            "Key": seed.key or self.params.key,
            "Body": self.params.document().encode(),
            "ContentType": "text/plain; charset=utf-8",
        }
        if seed.tags:
            kwargs["Tagging"] = canary.tagging(seed.tags)
        try:
            async with aws_time_limit(self.params.limit):
                await s3.put_object(**kwargs)
        except (ProbeError, TimeoutError) as exc:
            summary = exc.detail if isinstance(exc, ProbeError) else "timeout"
            if self._seeded_at is None:
                return ProbeResult.unknown(
                    f"cannot write the canary document to {seed.bucket}: {summary}",
                    details=self._details(),
                )
            return f"reseed failed ({summary}); checked the earlier canary"
        self._seeded_at = now
        return "seeded"

    def _read_failed(self, err: ProbeError) -> ProbeResult:
        p = self.params
        if err.kind is ErrorKind.NOT_FOUND and p.seed is not None:
            self._seeded_at = None  # rewrite it on the next run
        findings = Findings()
        findings.details.update(self._details(error=err.detail, error_kind=err.kind.value))
        where = f"{p.access_point_arn} key {p.key!r}"
        reason = describe_failure(err.kind, where, action="read", overrides=_SENTENCES)
        findings.add_error(err, _OVERRIDES, reason=reason)
        return findings.result()

    def _details(self, **extra: Any) -> dict[str, Any]:
        return {
            "access_point_arn": self.params.access_point_arn,
            "key": self.params.key,
            **{k: v for k, v in extra.items() if v is not None},
        }


def _contains(text: str, sample: str) -> bool:
    # Emails are case-insensitive; the numeric samples are matched literally.
    return sample in text or ("@" in sample and sample.lower() in text.lower())


#: A 403 is policy drift on the Object Lambda (its view of the tenant), and a refused read
#: blames it too.
_OVERRIDES = {**REJECTED_IS_DOWN, ErrorKind.PERMISSION: Status.DOWN}
#: Where this probe says more than the shared sentences (``alivemcp.errors``): a 403 is
#: policy drift, a timeout is the transform's, and an unreachable endpoint is the tenant's view.
_UNREACHABLE = "cannot reach the Object Lambda access point"
_SENTENCES = {
    ErrorKind.PERMISSION: "access denied reading {subject}: policy drift on the Object Lambda "
    "or supporting access point, or the Lambda's role",
    ErrorKind.TIMEOUT: "Object Lambda transform did not answer ({subject})",
    ErrorKind.CONNECT: _UNREACHABLE,
    ErrorKind.DNS: _UNREACHABLE,
    ErrorKind.TLS: _UNREACHABLE,
}
