"""``s3_replication_lag``: is the DR replica of an S3 bucket fresh, right now?

Each run writes a small JSON canary (unique key under ``prefix``, tagged so a lifecycle rule can
expire leftovers) to the source bucket, then polls the destination bucket with HeadObject at a
short, backing-off cadence until the SLA (default 45 s: 15 s Replication Time Control + 30 s
margin) plus a grace period has passed:

- ``up`` with ``replication_lag_seconds`` when the replica appears within the SLA;
- ``degraded`` when it appears after the SLA but within the grace period (RTC SLA exceeded);
- ``down`` when it never appears (replication failure), at once when the source object's
  ``ReplicationStatus`` turns ``FAILED``, and when the destination still refuses the check
  with a 403 at the end of the window: the reason names the identity (role) and bucket and
  says it is a permission problem, not lag (``destination_forbidden_status`` can make that
  ``unknown`` instead). A 403 is not final earlier: S3 answers 403 for a missing key when the
  reader lacks ``s3:ListBucket``, then 200 once the replica lands;
- ``unknown`` when the prober's own credentials fail, or it cannot place its canary.

CloudWatch's ``ReplicationLatency`` only covers objects that did replicate; a canary also
catches objects stuck behind a revoked KMS grant, a disabled rule or a destination policy.

Timing: one run waits up to SLA + grace, so the check's timeout must exceed that (plus a few
seconds to write and clean up) and its interval must exceed the timeout; the default timeout
(80 s) fits the default SLA (45 s) and grace (15 s): run it every 5 minutes.

Retries: each AWS call makes up to ``aws.max_attempts`` attempts in all (5xx, throttling and
connection failures only), and retries stop by the check's timeout; a HeadObject poll cut at
the give-up point after an error counts as that error, not as a timeout.

Cleanup: the canary is deleted from both buckets (every version: replication requires
versioning, and a plain delete would only add a delete marker). Replicas that land after a run
gave up are deleted by the next run, and ``setup`` sweeps canaries older than
``sweep_min_age`` under the prefix in both buckets, so a crash leaves at most one canary behind
until the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import Field, field_validator, model_validator

from alivemcp.plumbing.aws import (
    AwsSettings,
    aws_check_deadline,
    aws_error_kind,
    aws_error_summary,
    aws_time_limit,
)
from alivemcp.plumbing.s3 import delete_all_versions, delete_versions_under
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult

__all__ = ["S3ReplicationLagProbe"]

#: Seconds a run keeps for writing the canary and cleaning up, beyond SLA + grace.
RUN_OVERHEAD_SECONDS = 10.0
#: Most versions one sweep deletes, so a huge leftover pile cannot stall a run.
SWEEP_BATCH = 1000
#: Destination deletes remembered for later runs; older ones are left to the start-up sweep.
MAX_PENDING_DELETES = 50
_SAFE_KEY_PART = re.compile(r"[^A-Za-z0-9._-]+")


class S3ReplicationLagParams(ProbeParams):
    source_bucket: str = Field(min_length=3, description="Bucket the canary is written to.")
    destination_bucket: str = Field(
        min_length=3, description="Replica (DR) bucket polled for the canary."
    )
    aws: AwsSettings = Field(
        default_factory=AwsSettings,
        description="Identity/region for both buckets unless source_aws/destination_aws is set.",
    )
    source_aws: AwsSettings | None = Field(
        None, description="Identity/region for the source bucket (default: aws)."
    )
    destination_aws: AwsSettings | None = Field(
        None,
        description="Identity/region for the destination bucket, e.g. a read-only role in the "
        "DR region (default: aws).",
    )
    prefix: str = Field(
        "alivemcp-canary/replication/",
        min_length=1,
        description="Key prefix of canaries; must be covered by a replication rule. Everything "
        "under it that looks like a canary is swept, so keep it dedicated to the probe.",
    )
    sla: Duration = Field(
        45.0,
        description="Canary SLA (set it to what failover needs; S3 RTC itself promises 15 min). "
        "Later arrival is degraded. The "
        "check's timeout must exceed sla + grace + 10 s (default timeout 80 s) and its "
        "interval the timeout (e.g. 5m).",
    )
    grace: Duration = Field(
        15.0, description="How long after the SLA to keep polling before calling it down."
    )
    poll_initial: Duration = Field(0.5, description="First wait between destination checks.")
    poll_max: Duration = Field(5.0, description="Longest wait between destination checks.")
    poll_backoff: float = Field(1.5, ge=1.0, le=4.0, description="Growth of the poll wait.")
    source_status_every: Duration = Field(
        3.0, description="How often the source ReplicationStatus is read (FAILED: down at once)."
    )
    tags: dict[str, str] = Field(
        default_factory=lambda: {"alivemcp-canary": "replication"},
        description="Tags on every canary, so a lifecycle rule can expire leftovers.",
    )
    body_fields: dict[str, str] = Field(
        default_factory=dict, description="Extra string fields added to the canary's JSON body."
    )
    cleanup: bool = Field(True, description="Delete canaries (every version) from both buckets.")
    sweep_min_age: Duration = Field(
        600.0,
        description="Leftover canaries older than this are swept on start (younger ones may "
        "belong to a run in flight elsewhere).",
    )
    destination_forbidden_status: Literal["down", "unknown"] = Field(
        "down",
        description="Verdict when the destination answers 403: down (a DR bucket the "
        "configured reader cannot read is a broken DR path) or unknown (treat it as the "
        "prober's own permission problem).",
    )

    @field_validator("prefix")
    @classmethod
    def _prefix_not_root(cls, value: str) -> str:
        if value.strip("/") == "":
            raise ValueError("the canary prefix must not be the bucket root (it is swept)")
        return value

    @model_validator(mode="after")
    def _poll_window(self) -> S3ReplicationLagParams:
        if self.poll_initial > self.poll_max:
            raise ValueError("poll_initial must not exceed poll_max")
        return self

    def source_settings(self) -> AwsSettings:
        return self.source_aws or self.aws

    def destination_settings(self) -> AwsSettings:
        return self.destination_aws or self.aws


class S3ReplicationLagProbe(Probe[S3ReplicationLagParams]):
    Params = S3ReplicationLagParams
    summary = "Replication-lag canary: write to the source bucket, time its arrival in the DR one"
    target_param = "source_bucket"
    #: SLA (45 s) + grace (15 s) + time to write, clean up and unwind.
    default_timeout = 80.0
    observables = (
        Observable("replication_lag_seconds",
                   "Write of the canary to the source to its arrival in the destination."),
    )

    def __init__(self, context: Any, params: S3ReplicationLagParams) -> None:
        super().__init__(context, params)
        # Keys whose destination replica may still land after their run gave up (insertion
        # ordered, capped so a destination that refuses deletes cannot grow it forever).
        self._pending_destination: dict[str, None] = {}
        self._swept = False

    # -- lifecycle -------------------------------------------------------------------------

    async def setup(self) -> None:
        # Clients are created up front so the first run's timing excludes client creation.
        await self._source()
        await self._destination()
        if self.params.cleanup and not self._swept:
            await self._sweep()
            self._swept = True

    async def teardown(self) -> None:
        if self.params.cleanup and self._pending_destination:
            await self._delete_pending()

    async def _source(self) -> Any:
        return await self.context.plumbing.aws.client("s3", self.params.source_settings())

    async def _destination(self) -> Any:
        return await self.context.plumbing.aws.client("s3", self.params.destination_settings())

    # -- one run ---------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        with aws_check_deadline(self.context.timeout):
            return await self._probe()

    async def _probe(self) -> ProbeResult:
        p = self.params
        window = p.sla + p.grace
        if self.context.timeout < window + RUN_OVERHEAD_SECONDS:
            return ProbeResult.unknown(
                f"check timeout {self.context.timeout:g}s cannot hold SLA {p.sla:g}s + grace "
                f"{p.grace:g}s + {RUN_OVERHEAD_SECONDS:g}s to write and clean up: raise the "
                "check's timeout (and its interval above it)"
            )
        if p.cleanup and self._pending_destination:
            await self._delete_pending()

        key = self._canary_key()
        source = await self._source()
        destination = await self._destination()
        details: dict[str, Any] = {
            "source_bucket": p.source_bucket,
            "destination_bucket": p.destination_bucket,
            "key": key,
            "sla_seconds": p.sla,
            "grace_seconds": p.grace,
        }
        try:
            version_id = await self._write_canary(source, key)
        except Exception as exc:
            return _write_failure(exc, p.source_bucket, key, details)
        written = time.monotonic()
        details["source_version_id"] = version_id
        try:
            return await self._wait_for_replica(source, destination, key, written, details)
        finally:
            if p.cleanup:
                # Shielded: a run cancelled at its timeout still removes its canary.
                await _shielded(self._cleanup_run(key, details))

    async def _write_canary(self, source: Any, key: str) -> str | None:
        now = datetime.now(UTC)
        body = {
            "probe": "s3_replication_lag",
            "check": self.context.name,
            "written_at": now.isoformat(),
            "written_at_epoch": now.timestamp(),
            **self.params.body_fields,
        }
        response = await source.put_object(
            Bucket=self.params.source_bucket,
            Key=key,
            Body=json.dumps(body).encode(),
            ContentType="application/json",
            Tagging=urlencode(self.params.tags),
        )
        version = response.get("VersionId")
        return version if version and version != "null" else None

    async def _wait_for_replica(
        self,
        source: Any,
        destination: Any,
        key: str,
        written: float,
        details: dict[str, Any],
    ) -> ProbeResult:
        p = self.params
        sla_at = written + p.sla
        give_up_at = sla_at + p.grace
        wait = p.poll_initial
        polls = 0
        errors = 0
        last_error: str | None = None
        next_source_check = written + min(p.source_status_every, p.poll_initial)
        source_status: str | None = None
        last_miss = written
        forbidden: BaseException | None = None  # the latest poll's 403, if it was one
        forbidden_polls = 0
        while True:
            polls += 1
            asked = time.monotonic()
            try:
                # A hung destination must not carry the run past its give-up point.
                async with aws_time_limit(max(1.0, give_up_at - time.monotonic())):
                    await destination.head_object(Bucket=p.destination_bucket, Key=key)
            except TimeoutError:
                errors += 1
                last_error = "HeadObject timed out"
                forbidden = None
            except Exception as exc:
                kind = aws_error_kind(exc)
                if kind == "not_found":
                    last_miss = asked
                elif kind == "credentials":
                    self._remember_pending(key)
                    return ProbeResult.unknown(
                        f"prober's destination credentials failed: {aws_error_summary(exc)}",
                        details=details,
                    )
                elif kind == "permission":
                    # Not final yet: S3 answers 403 for a key that is not there when the
                    # reader lacks s3:ListBucket, and 200 once the replica lands.
                    last_miss = asked
                    forbidden = exc
                    forbidden_polls += 1
                else:
                    errors += 1
                    last_error = aws_error_summary(exc)
                if kind != "permission":
                    forbidden = None
            else:
                arrived = time.monotonic()
                lag = arrived - written
                details.update(
                    polls=polls,
                    poll_errors=errors,
                    source_replication_status=source_status,
                    # The replica landed after the last miss: the lag is at least this.
                    lag_lower_bound_seconds=round(last_miss - written, 3),
                )
                if forbidden_polls:
                    details["forbidden_polls"] = forbidden_polls
                    details["hint"] = (
                        "the destination answered 403 until the replica landed: grant the "
                        "reader s3:ListBucket so a missing key answers 404"
                    )
                observations = {"replication_lag_seconds": round(lag, 3)}
                if arrived <= sla_at:
                    return ProbeResult.up(
                        f"replica arrived in {lag:.2f}s (SLA {p.sla:g}s)",
                        observations=observations,
                        details=details,
                    )
                return ProbeResult.degraded(
                    f"replication SLA exceeded: replica of {key} arrived in {lag:.2f}s "
                    f"(SLA {p.sla:g}s)",
                    observations=observations,
                    details=details,
                )

            now = time.monotonic()
            if now >= next_source_check:
                next_source_check = now + p.source_status_every
                source_status = await self._source_status(source, key) or source_status
                if source_status == "FAILED":
                    self._remember_pending(key)
                    details.update(polls=polls, source_replication_status=source_status)
                    return ProbeResult.down(
                        f"replication FAILED for {key}: the source object's ReplicationStatus "
                        f"is FAILED after {now - written:.1f}s (check the replication role, "
                        "KMS grants and the destination bucket policy)",
                        details=details,
                    )
            if now >= give_up_at:
                break
            # Never sleep past the SLA boundary: an arrival just inside the SLA must not be
            # reported as late because the poll cadence had grown.
            boundary = sla_at if now < sla_at else give_up_at
            await asyncio.sleep(max(0.0, min(wait, boundary - now)))
            wait = min(wait * p.poll_backoff, p.poll_max)

        self._remember_pending(key)
        waited = time.monotonic() - written
        details.update(polls=polls, poll_errors=errors, source_replication_status=source_status)
        if forbidden is not None:
            details["forbidden_polls"] = forbidden_polls
            return self._forbidden(forbidden, details)
        if errors and errors == polls:
            return ProbeResult.down(
                f"destination bucket {p.destination_bucket} unreachable for {waited:.1f}s: "
                f"{last_error}",
                details=details,
            )
        hint = ""
        if details.get("source_version_id") is None:
            hint = (
                f" (the source bucket {p.source_bucket} returned no version id: replication "
                "needs versioning on both buckets)"
            )
        elif source_status is None:
            hint = (
                f" (the source object has no ReplicationStatus: does a replication rule cover "
                f"prefix {p.prefix!r}?)"
            )
        elif source_status == "PENDING":
            hint = " (source ReplicationStatus still PENDING)"
        elif source_status == "COMPLETED":
            hint = (
                " (the source says COMPLETED: does the rule replicate to another bucket, or "
                "does the destination identity read a different account or region?)"
            )
        return ProbeResult.down(
            f"replication failure: canary {key} not in {p.destination_bucket} after "
            f"{waited:.1f}s (SLA {p.sla:g}s + grace {p.grace:g}s){hint}",
            details=details,
        )

    async def _source_status(self, source: Any, key: str) -> str | None:
        """The source object's ReplicationStatus; None when unreadable (a source HEAD that
        fails says nothing about replication, so the destination poll decides)."""
        try:
            async with aws_time_limit(self.params.poll_max):
                head = await source.head_object(Bucket=self.params.source_bucket, Key=key)
        except Exception:
            return None
        status = head.get("ReplicationStatus")
        return str(status).upper() if status else None

    def _forbidden(self, exc: BaseException, details: dict[str, Any]) -> ProbeResult:
        p = self.params
        identity = _identity(p.destination_settings())
        details["failure"] = "permission"
        reason = (
            f"permission problem, not lag: {identity} is denied HeadObject on destination "
            f"bucket {p.destination_bucket} ({aws_error_summary(exc)}); check the DR bucket "
            "policy and the reader role (S3 also answers 403 for a key that is not there yet "
            "when the reader lacks s3:ListBucket)"
        )
        if p.destination_forbidden_status == "unknown":
            return ProbeResult.unknown(reason, details=details)
        return ProbeResult.down(reason, details=details)

    def _remember_pending(self, key: str) -> None:
        self._pending_destination[key] = None
        while len(self._pending_destination) > MAX_PENDING_DELETES:
            self._pending_destination.pop(next(iter(self._pending_destination)))

    def _canary_key(self) -> str:
        check = _SAFE_KEY_PART.sub("-", self.context.name).strip("-") or "check"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        return f"{self.params.prefix}{check}/{stamp}-{uuid.uuid4().hex[:12]}.json"

    # -- cleanup ---------------------------------------------------------------------------

    async def _cleanup_run(self, key: str, details: dict[str, Any]) -> None:
        failures: list[str] = []
        try:
            await delete_all_versions(await self._source(), self.params.source_bucket, key)
        except Exception as exc:
            failures.append(f"source: {aws_error_summary(exc)}")
        if key not in self._pending_destination:
            try:
                await delete_all_versions(
                    await self._destination(), self.params.destination_bucket, key
                )
            except Exception as exc:
                failures.append(f"destination: {aws_error_summary(exc)}")
                self._remember_pending(key)
        if failures:
            details["cleanup_failed"] = failures

    async def _delete_pending(self) -> None:
        destination = await self._destination()
        for key in list(self._pending_destination):
            try:
                await delete_all_versions(destination, self.params.destination_bucket, key)
            except Exception:
                continue
            self._pending_destination.pop(key, None)

    async def _sweep(self) -> None:
        """Delete canaries older than ``sweep_min_age`` from both buckets (crash leftovers)."""
        cutoff = datetime.now(UTC).timestamp() - self.params.sweep_min_age
        for client, bucket in (
            (await self._source(), self.params.source_bucket),
            (await self._destination(), self.params.destination_bucket),
        ):
            with contextlib.suppress(Exception):  # a failed sweep must not block the probe
                await delete_versions_under(
                    client, bucket, self.params.prefix, cutoff, _looks_like_canary, SWEEP_BATCH
                )


async def _shielded(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    with contextlib.suppress(Exception):
        await asyncio.shield(task)


def _identity(settings: AwsSettings) -> str:
    if settings.role_arn:
        return f"role {settings.role_arn}"
    if settings.profile:
        return f"profile {settings.profile}"
    if settings.access_key_id is not None:
        return "the configured static-key identity"
    return "the prober's default identity"


def _write_failure(
    exc: BaseException, bucket: str, key: str, details: dict[str, Any]
) -> ProbeResult:
    kind = aws_error_kind(exc)
    summary = aws_error_summary(exc)
    if kind == "credentials":
        return ProbeResult.unknown(f"prober's source credentials failed: {summary}",
                                   details=details)
    if kind == "permission":
        return ProbeResult.unknown(
            f"cannot write canary {key} to {bucket} (the prober's own write permission): "
            f"{summary}",
            details=details,
        )
    return ProbeResult.down(f"cannot write canary to source bucket {bucket}: {summary}",
                            details=details)


def _looks_like_canary(key: str) -> bool:
    return key.endswith(".json")
