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
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from alivemcp.errors import ErrorKind, ProbeError, describe_failure
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import (
    AwsSettings,
    aws_settings_field,
    aws_time_limit,
    within_aws_check_deadline,
)
from alivemcp.plumbing.s3 import S3Canaries
from alivemcp.probe import Duration, Observable, Probe, ProbeParams, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN

__all__ = ["S3ReplicationLagProbe"]

#: Seconds a run keeps for writing the canary and cleaning up, beyond SLA + grace.
RUN_OVERHEAD_SECONDS = 10.0


class S3ReplicationLagParams(ProbeParams):
    source_bucket: str = Field(min_length=3, description="Bucket the canary is written to.")
    destination_bucket: str = Field(
        min_length=3, description="Replica (DR) bucket polled for the canary."
    )
    aws: AwsSettings = aws_settings_field(
        "Identity/region for both buckets unless source_aws/destination_aws is set."
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
    tags: dict[str, str] = canary.tags_field("replication")
    body_fields: dict[str, str] = canary.body_fields_field()
    cleanup: bool = canary.cleanup_field()
    sweep_min_age: Duration = canary.sweep_min_age_field()
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
        Observable(
            "replication_lag_seconds",
            "Write of the canary to the source to its arrival in the destination.",
        ),
    )

    def __init__(self, context: Any, params: S3ReplicationLagParams) -> None:
        super().__init__(context, params)
        # Destination replicas of runs that gave up may still land: their deletes are kept.
        self._canaries = S3Canaries()
        self._swept = False

    # -- lifecycle -------------------------------------------------------------------------

    async def setup(self) -> None:
        # Clients are created up front so the first run's timing excludes client creation.
        source, destination = await self._source(), await self._destination()
        if self.params.cleanup and not self._swept:
            # Crash leftovers in both buckets; a failed sweep must not block the probe.
            for client, bucket in (
                (source, self.params.source_bucket),
                (destination, self.params.destination_bucket),
            ):
                await self._canaries.sweep(
                    client,
                    bucket,
                    self.params.prefix,
                    self.params.sweep_min_age,
                    _looks_like_canary,
                )
            self._swept = True

    async def teardown(self) -> None:
        if self.params.cleanup:
            await self._canaries.delete_deferred()

    async def _source(self) -> Any:
        return await plumbing_of(self.context).aws.client("s3", self.params.source_settings())

    async def _destination(self) -> Any:
        return await plumbing_of(self.context).aws.client("s3", self.params.destination_settings())

    # -- one run ---------------------------------------------------------------------------

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        window = p.sla + p.grace
        if self.context.timeout < window + RUN_OVERHEAD_SECONDS:
            return ProbeResult.unknown(
                f"check timeout {self.context.timeout:g}s cannot hold SLA {p.sla:g}s + grace "
                f"{p.grace:g}s + {RUN_OVERHEAD_SECONDS:g}s to write and clean up: raise the "
                "check's timeout (and its interval above it)"
            )
        if p.cleanup:
            await self._canaries.delete_deferred()

        key = self._canary_key()
        source = await self._source()
        findings = Findings()
        findings.details.update(
            source_bucket=p.source_bucket,
            destination_bucket=p.destination_bucket,
            key=key,
            sla_seconds=p.sla,
            grace_seconds=p.grace,
        )
        document = canary.document(
            "s3_replication_lag", self.context.name, body_fields=p.body_fields
        )
        try:
            version_id = await self._canaries.write(source, p.source_bucket, key, document, p.tags)
        except ProbeError as err:
            where = f"source bucket {p.source_bucket}"
            reason = describe_failure(err.kind, where, action=f"write canary {key} to")
            findings.add_error(err, REJECTED_IS_DOWN, reason=reason)
            return findings.result()
        written = time.monotonic()
        findings.details["source_version_id"] = version_id
        try:
            ok_reason = await self._wait_for_replica(source, key, written, findings)
        finally:
            if p.cleanup:
                # A run cancelled at its timeout still removes its canary.
                await canary.run_to_completion(self._cleanup_run(key, findings.details))
        return findings.result(ok_reason)

    async def _wait_for_replica(
        self, source: Any, key: str, written: float, findings: Findings
    ) -> str:
        """Poll the destination until the replica lands, the source says FAILED, or the SLA
        and grace pass; adds what it found and returns the reason when all is well."""
        p = self.params
        destination = await self._destination()
        polls = _Polls(written)
        sla_at = written + p.sla
        give_up_at = sla_at + p.grace
        wait = p.poll_initial
        next_source_check = written + min(p.source_status_every, p.poll_initial)
        while True:
            try:
                arrived = await self._poll(destination, key, give_up_at, polls)
            except ProbeError as err:  # the prober's own credentials: nothing more to learn
                self._canaries.defer(destination, p.destination_bucket, key)
                where = f"destination bucket {p.destination_bucket}"
                reason = describe_failure(err.kind, where, action=f"read canary {key} from")
                findings.add_error(err, reason=reason)
                return ""
            if arrived is not None:
                return self._arrived(key, arrived, sla_at, polls, findings)
            now = time.monotonic()
            if now >= next_source_check:
                next_source_check = now + p.source_status_every
                polls.source_status = await self._source_status(source, key) or (
                    polls.source_status
                )
                if polls.source_status == "FAILED":
                    self._canaries.defer(destination, p.destination_bucket, key)
                    findings.details.update(
                        polls=polls.count, source_replication_status=polls.source_status
                    )
                    findings.add(
                        Status.DOWN,
                        f"replication FAILED for {key}: the source object's ReplicationStatus "
                        f"is FAILED after {now - written:.1f}s (check the replication role, "
                        "KMS grants and the destination bucket policy)",
                    )
                    return ""
            if now >= give_up_at:
                break
            # Never sleep past the SLA boundary: an arrival just inside the SLA must not be
            # reported as late because the poll cadence had grown.
            boundary = sla_at if now < sla_at else give_up_at
            await asyncio.sleep(max(0.0, min(wait, boundary - now)))
            wait = min(wait * p.poll_backoff, p.poll_max)
        self._canaries.defer(destination, p.destination_bucket, key)
        self._gave_up(key, polls, findings)
        return ""

    async def _poll(
        self, destination: Any, key: str, give_up_at: float, polls: _Polls
    ) -> float | None:
        """One HeadObject on the destination: the arrival time, or None while it is missing.
        Raises the ``ProbeError`` when the prober's own credentials fail."""
        polls.count += 1
        asked = time.monotonic()
        forbidden: ProbeError | None = None
        try:
            # A hung destination must not carry the run past its give-up point.
            async with aws_time_limit(max(1.0, give_up_at - time.monotonic())):
                await destination.head_object(Bucket=self.params.destination_bucket, Key=key)
        except TimeoutError:
            polls.errors += 1
            polls.last_error = "HeadObject timed out"
        except ProbeError as err:
            if err.kind is ErrorKind.AUTH:
                raise
            if err.kind is ErrorKind.NOT_FOUND:
                polls.last_miss = asked
            elif err.kind is ErrorKind.PERMISSION:
                # Not final yet: S3 answers 403 for a key that is not there when the reader
                # lacks s3:ListBucket, and 200 once the replica lands.
                polls.last_miss = asked
                forbidden = err
                polls.forbidden_count += 1
            else:
                polls.errors += 1
                polls.last_error = err.detail
        else:
            return time.monotonic()
        finally:
            polls.forbidden = forbidden
        return None

    def _arrived(
        self, key: str, arrived: float, sla_at: float, polls: _Polls, findings: Findings
    ) -> str:
        p = self.params
        lag = arrived - polls.written
        findings.details.update(
            polls=polls.count,
            poll_errors=polls.errors,
            source_replication_status=polls.source_status,
            # The replica landed after the last miss: the lag is at least this.
            lag_lower_bound_seconds=round(polls.last_miss - polls.written, 3),
        )
        if polls.forbidden_count:
            findings.details["forbidden_polls"] = polls.forbidden_count
            findings.details["hint"] = (
                "the destination answered 403 until the replica landed: grant the reader "
                "s3:ListBucket so a missing key answers 404"
            )
        findings.observe("replication_lag_seconds", round(lag, 3))
        if arrived > sla_at:
            findings.add(
                Status.DEGRADED,
                f"replication SLA exceeded: replica of {key} arrived in {lag:.2f}s "
                f"(SLA {p.sla:g}s)",
            )
        return f"replica arrived in {lag:.2f}s (SLA {p.sla:g}s)"

    def _gave_up(self, key: str, polls: _Polls, findings: Findings) -> None:
        p = self.params
        waited = time.monotonic() - polls.written
        details = findings.details
        details.update(
            polls=polls.count,
            poll_errors=polls.errors,
            source_replication_status=polls.source_status,
        )
        if polls.forbidden is not None:
            details["forbidden_polls"] = polls.forbidden_count
            details["failure"] = "permission"
            findings.add(
                Status(p.destination_forbidden_status),
                f"permission problem, not lag: {p.destination_settings().describe_identity()} "
                f"is denied HeadObject on destination bucket {p.destination_bucket} "
                f"({polls.forbidden.operation}: {polls.forbidden.detail}); check the DR bucket "
                "policy and the reader role (S3 also answers 403 for a key that is not there "
                "yet when the reader lacks s3:ListBucket)",
            )
        elif polls.errors and polls.errors == polls.count:
            findings.add(
                Status.DOWN,
                f"destination bucket {p.destination_bucket} unreachable for {waited:.1f}s: "
                f"{polls.last_error}",
            )
        else:
            findings.add(
                Status.DOWN,
                f"replication failure: canary {key} not in {p.destination_bucket} after "
                f"{waited:.1f}s (SLA {p.sla:g}s + grace {p.grace:g}s)"
                f"{self._missing_hint(details, polls.source_status)}",
            )

    def _missing_hint(self, details: dict[str, Any], source_status: str | None) -> str:
        p = self.params
        if details.get("source_version_id") is None:
            return (
                f" (the source bucket {p.source_bucket} returned no version id: replication "
                "needs versioning on both buckets)"
            )
        if source_status is None:
            return (
                f" (the source object has no ReplicationStatus: does a replication rule cover "
                f"prefix {p.prefix!r}?)"
            )
        if source_status == "PENDING":
            return " (source ReplicationStatus still PENDING)"
        if source_status == "COMPLETED":
            return (
                " (the source says COMPLETED: does the rule replicate to another bucket, or "
                "does the destination identity read a different account or region?)"
            )
        return ""

    async def _source_status(self, source: Any, key: str) -> str | None:
        """The source object's ReplicationStatus; None when unreadable (a source HEAD that
        fails says nothing about replication, so the destination poll decides)."""
        try:
            async with aws_time_limit(self.params.poll_max):
                head = await source.head_object(Bucket=self.params.source_bucket, Key=key)
        except (ProbeError, TimeoutError):
            return None
        status = head.get("ReplicationStatus")
        return str(status).upper() if status else None

    def _canary_key(self) -> str:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        return (
            f"{self.params.prefix}{canary.check_slug(self.context.name)}/"
            f"{stamp}-{canary.nonce()}.json"
        )

    async def _cleanup_run(self, key: str, details: dict[str, Any]) -> None:
        """Delete the canary from both buckets (a replica still expected is deleted by a
        later run); a failed delete is retried by the next run."""
        p = self.params
        failures: list[str] = []
        if err := await self._canaries.delete(await self._source(), p.source_bucket, key):
            failures.append(f"source: {err.detail}")
        if not self._canaries.is_deferred(p.destination_bucket, key):
            destination = await self._destination()
            if err := await self._canaries.delete(destination, p.destination_bucket, key):
                failures.append(f"destination: {err.detail}")
        if failures:
            details["cleanup_failed"] = failures


@dataclass
class _Polls:
    """What the destination polls of one run saw."""

    written: float
    count: int = 0
    errors: int = 0
    last_error: str | None = None
    #: When the replica was last seen missing (the lag is at least this long).
    last_miss: float = 0.0
    #: The latest poll's 403, if it was one.
    forbidden: ProbeError | None = None
    forbidden_count: int = 0
    source_status: str | None = None

    def __post_init__(self) -> None:
        self.last_miss = self.written


def _looks_like_canary(key: str) -> bool:
    return key.endswith(".json")
