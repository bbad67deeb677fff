"""``s3_event_delivery``: does an upload still reach the workers, under the right key?

Each run uploads a canary whose key contains a space and a non-ASCII character (by default
``<prefix><check>/<nonce> canary café.json``), then waits on the canary SQS queue (default
limit 120 s) for its ObjectCreated event. Understood deliveries: direct S3 → SQS, S3 → SNS → SQS
(the SNS envelope, or raw delivery), S3 → EventBridge → SQS (the EventBridge envelope),
``s3:TestEvent`` messages (ignored) and duplicate deliveries (counted).

Keys in S3 event notifications are URL-encoded with ``+`` for spaces. The probe decodes them the
way S3 encodes them (``unquote_plus``) and compares exactly: an event for the canary whose key
only matches when decoded some other way (double-encoded, spaces turned into ``+``, UTF-8 read as
Latin-1) is reported ``down`` as an encoding failure, since a worker would look up a key that
does not exist.

Shared queues: the probe never consumes messages that are not its own. Others are made
visible again at once (they are received with a short visibility timeout, so even a prober that
dies mid-run hides them only briefly). Receiving still counts towards a message's
``ApproximateReceiveCount``, which a redrive policy uses to move messages to a dead-letter
queue, and a worker on a shared queue may consume the canary's event before the probe sees it:
give the probe a dedicated queue (a second notification configuration on the canary prefix, or
an SNS/EventBridge fan-out) whenever you can.

End-to-end mode (``end_to_end``): wait for a marker object the worker writes when it has
processed the canary (a key template such as ``processed/{key}.done``); a marker written under a
wrongly decoded key is reported as the encoding failure it is. End-to-end mode works without a
queue, for a worker that owns its queue.

Retries: each AWS call makes up to ``aws.max_attempts`` attempts in all (5xx, throttling and
connection failures only), and retries stop by the check's timeout, so an error that keeps
coming back is reported as itself rather than as the check's timeout.

Verdicts: ``up`` with ``delivery_latency_seconds`` (and ``end_to_end_latency_seconds``);
``degraded`` past ``degraded_after``; ``down`` when nothing arrives in time, on an encoding
failure, or when the queue or bucket is gone; ``unknown`` when the prober's own credentials or
permissions fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import string
import time
from typing import Any
from urllib.parse import unquote_plus

from alivemcp.errors import ErrorKind, ProbeError, describe_failure
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import within_aws_check_deadline
from alivemcp.plumbing.s3 import S3Canaries
from alivemcp.probe import Observable, Probe, ProbeResult, Status
from alivemcp.verdict import Findings
from probes._aws_common import REJECTED_IS_DOWN
from probes.s3_event_delivery.events import (
    S3Event,
    diagnose_key,
    parse_message,
    wrong_marker_keys,
)
from probes.s3_event_delivery.params import S3EventDeliveryParams

__all__ = ["S3EventDeliveryProbe"]

#: Seconds a run keeps for the upload and cleanup beyond its waiting limit.
RUN_OVERHEAD_SECONDS = 10.0
_NONCE_PATTERN = "[0-9a-f]{12}"


class S3EventDeliveryProbe(Probe[S3EventDeliveryParams]):
    Params = S3EventDeliveryParams
    summary = "Event-delivery canary: upload a spaced, non-ASCII key and wait for its event"
    target_param = "bucket"
    #: The 120 s delivery limit + upload, cleanup and unwinding.
    default_timeout = 135.0
    observables = (
        Observable("delivery_latency_seconds", "Upload of the canary to its event arriving."),
        Observable(
            "end_to_end_latency_seconds", "Upload of the canary to the worker's marker for it."
        ),
    )

    def __init__(self, context: Any, params: S3EventDeliveryParams) -> None:
        super().__init__(context, params)
        self._check_slug = canary.check_slug(context.name)
        self._canary_re = self._canary_regex()
        # This run's canary and the worker's markers, deleted after the run or by a later one.
        self._canaries = S3Canaries()
        self._swept = False

    async def setup(self) -> None:
        s3 = await self._s3()
        if self.params.queue_url is not None:
            await self._sqs()
        if self.params.cleanup and not self._swept:
            # A failed sweep must not block the probe: its error is left for the runs to see.
            await self._canaries.sweep(
                s3,
                self.params.bucket,
                self._static_prefix(),
                self.params.sweep_min_age,
                self._canary_re.fullmatch,
            )
            self._swept = True

    async def teardown(self) -> None:
        await self._canaries.delete_deferred()

    async def _s3(self) -> Any:
        return await plumbing_of(self.context).aws.client("s3", self.params.aws)

    async def _sqs(self) -> Any:
        return await plumbing_of(self.context).aws.client("sqs", self.params.queue_settings())

    # -- one run ---------------------------------------------------------------------------

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        longest = max(p.limit if p.queue_url else 0.0, p.end_to_end.limit if p.end_to_end else 0.0)
        if self.context.timeout < longest + RUN_OVERHEAD_SECONDS:
            return ProbeResult.unknown(
                f"check timeout {self.context.timeout:g}s cannot hold the {longest:g}s wait + "
                f"{RUN_OVERHEAD_SECONDS:g}s to upload and clean up: raise the check's timeout "
                "(and its interval above it)"
            )
        await self._canaries.delete_deferred()
        nonce = canary.nonce()
        key = self._render_key(nonce)
        findings = Findings()
        findings.details.update(bucket=p.bucket, key=key)
        s3 = await self._s3()
        started = time.monotonic()
        document = canary.document(
            "s3_event_delivery", self.context.name, fields={"key": key}, body_fields=p.body_fields
        )
        try:
            await self._canaries.write(s3, p.bucket, key, document, p.tags)
        except ProbeError as err:
            where = f"bucket {p.bucket}"
            reason = describe_failure(err.kind, where, action="upload the canary to")
            findings.add_error(err, REJECTED_IS_DOWN, reason=reason)
            return findings.result()
        try:
            watchers = []
            if p.queue_url is not None:
                watchers.append(self._watch_queue(key, nonce, started, findings))
            if p.end_to_end is not None:
                watchers.append(self._watch_marker(key, nonce, started, findings))
            all_well = await asyncio.gather(*watchers)
        finally:
            if p.cleanup:
                self._canaries.defer(s3, p.bucket, key)
            # A run cancelled at its timeout still removes its canary.
            await canary.run_to_completion(self._canaries.delete_deferred())
        return findings.result("; ".join(all_well))

    # -- the queue -------------------------------------------------------------------------

    async def _watch_queue(self, key: str, nonce: str, started: float, findings: Findings) -> str:
        """Wait for the canary's event on the queue; adds what went wrong to ``findings`` and
        returns the reason when all is well."""
        p = self.params
        assert p.queue_url is not None
        sqs = await self._sqs()
        deadline = started + p.limit
        stats = {"received": 0, "foreign_released": 0, "stale_deleted": 0, "test_events": 0}
        findings.details["queue"] = stats
        idle = 0.1
        last_error: str | None = None
        # A long poll must end before the client's read timeout, or it becomes an error.
        long_poll_cap = max(0, int(p.queue_settings().read_timeout) - 2)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                response = await sqs.receive_message(
                    QueueUrl=p.queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=max(0, min(20, int(remaining), long_poll_cap)),
                    VisibilityTimeout=p.receive_visibility,
                )
            except ProbeError as err:
                if err.kind in _FINAL_QUEUE_ERRORS:  # waiting will not fix these
                    where = f"canary queue {_queue_name(p.queue_url)}"
                    reason = describe_failure(err.kind, where, action="receive from")
                    findings.add_error(err, reason=reason)
                    return ""
                last_error = f"{err.operation}: {err.detail}"
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                continue
            received_at = time.monotonic()
            messages = response.get("Messages") or []
            stats["received"] += len(messages)
            mine, foreign, stale = self._sort_messages(messages, key, nonce, stats)
            await _release(sqs, p.queue_url, foreign)
            await _delete(sqs, p.queue_url, mine + stale)
            stats["foreign_released"] += len(foreign)
            stats["stale_deleted"] += len(stale)
            if mine:
                return self._delivered(mine, key, received_at - started, findings)
            if not messages or len(foreign) == len(messages):
                # Only others' messages (made visible again): do not spin on them.
                await asyncio.sleep(min(idle, max(0.0, deadline - time.monotonic())))
                idle = min(idle * 2, 2.0)
        waited = time.monotonic() - started
        hints: list[str] = []
        if stats["test_events"]:
            hints.append("s3:TestEvent messages arrived, so a notification configuration exists")
        if stats["foreign_released"]:
            hints.append(
                f"{stats['foreign_released']} other messages were released: on a shared queue a "
                "worker may have consumed the canary's event; use a dedicated queue"
            )
        if last_error:
            hints.append(f"last queue error: {last_error}")
        hint = f" ({'; '.join(hints)})" if hints else ""
        findings.add(
            Status.DOWN,
            f"no ObjectCreated event for canary {key!r} on {_queue_name(p.queue_url)} within "
            f"{waited:.1f}s{hint}",
        )
        return ""

    def _sort_messages(
        self, messages: list[dict[str, Any]], key: str, nonce: str, stats: dict[str, int]
    ) -> tuple[
        list[tuple[dict[str, Any], list[S3Event]]], list[dict[str, Any]], list[dict[str, Any]]
    ]:
        """Split a batch into this run's canary events, others' messages and this check's
        stale canary events (earlier runs, duplicates, removals of old canaries)."""
        mine: list[tuple[dict[str, Any], list[S3Event]]] = []
        foreign: list[dict[str, Any]] = []
        stale: list[dict[str, Any]] = []
        for message in messages:
            parsed = parse_message(str(message.get("Body", "")))
            if parsed.test_event:
                stats["test_events"] += 1
            ours = [e for e in parsed.events if e.bucket == self.params.bucket]
            current = [e for e in ours if e.created and _mentions(e, nonce)]
            if current:
                mine.append((message, current))
            elif ours and all(self._is_canary(e) for e in ours) and len(ours) == len(parsed.events):
                stale.append(message)
            else:
                foreign.append(message)
        return mine, foreign, stale

    def _delivered(
        self,
        mine: list[tuple[dict[str, Any], list[S3Event]]],
        key: str,
        latency: float,
        findings: Findings,
    ) -> str:
        events = [event for _, batch in mine for event in batch]
        findings.details["delivered_via"] = sorted({e.via for e in events})
        findings.details["duplicates"] = len(events) - 1
        findings.observe("delivery_latency_seconds", round(latency, 3))
        for event in events:
            if key in event.decoded_keys():
                continue
            why = diagnose_key(event.raw_key, key) or "it decodes to a different key"
            decoded = unquote_plus(event.raw_key)
            findings.add(
                Status.DOWN,
                f"encoding failure: the event for canary {key!r} (via {event.via}) carries "
                f"key {event.raw_key!r}, which decodes as S3 encodes keys to {decoded!r}: "
                f"{why}; a worker would look up a key that does not exist",
            )
            return ""
        degraded_after = self.params.degraded_after
        if degraded_after is not None and latency > degraded_after:
            findings.add(
                Status.DEGRADED,
                f"event delivered in {latency:.2f}s, slower than {degraded_after:g}s",
            )
        return f"event delivered in {latency:.2f}s via {events[0].via}"

    # -- end-to-end marker -----------------------------------------------------------------

    async def _watch_marker(self, key: str, nonce: str, started: float, findings: Findings) -> str:
        """Wait for the worker's marker; adds what went wrong to ``findings`` and returns the
        reason when all is well."""
        e2e = self.params.end_to_end
        assert e2e is not None
        s3 = await self._s3()
        bucket = e2e.marker_bucket or self.params.bucket
        marker = _render_marker(e2e.marker_key_template, key, nonce)
        findings.details["marker"] = {"bucket": bucket, "key": marker}
        deadline = started + e2e.limit
        wait = 0.2
        forbidden: ProbeError | None = None
        while True:
            try:
                await s3.head_object(Bucket=bucket, Key=marker)
            except ProbeError as err:
                if err.kind is ErrorKind.AUTH:
                    where = f"marker {marker!r}"
                    findings.add_error(err, reason=describe_failure(err.kind, where, action="read"))
                    return ""
                # A 403 is final only if it lasts: S3 answers 403 for a missing key when the
                # reader lacks s3:ListBucket.
                forbidden = err if err.kind is ErrorKind.PERMISSION else None
            else:
                latency = time.monotonic() - started
                if e2e.delete_marker:
                    self._canaries.defer(s3, bucket, marker)
                findings.observe("end_to_end_latency_seconds", round(latency, 3))
                return f"worker processed the canary in {latency:.2f}s"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(wait, remaining))
            wait = min(wait * 1.5, 5.0)
        waited = time.monotonic() - started
        if forbidden is not None:
            findings.add_error(
                forbidden,
                reason=f"prober may not read marker {marker!r} in {bucket} (its own "
                "permissions: s3:GetObject, and s3:ListBucket so a missing key answers 404)",
            )
            return ""
        wrong = await self._find_wrong_marker(s3, bucket, key, nonce, marker)
        if wrong is not None:
            description, wrong_key, wrong_marker = wrong
            findings.add(
                Status.DOWN,
                f"encoding failure: the worker processed canary {key!r} as {wrong_key!r} "
                f"({description}); its marker is {wrong_marker!r}, expected {marker!r}",
            )
            return ""
        findings.add(
            Status.DOWN,
            f"no downstream marker {marker!r} in {bucket} within {waited:.1f}s: the worker "
            f"did not process canary {key!r} (its key has a space and a non-ASCII "
            "character: a worker that decodes event keys with unquote instead of "
            "unquote_plus looks up a key that does not exist)",
        )
        return ""

    async def _find_wrong_marker(
        self, s3: Any, bucket: str, key: str, nonce: str, marker: str
    ) -> tuple[str, str, str] | None:
        """A marker the worker wrote under a wrongly decoded key: (how, that key, marker)."""
        e2e = self.params.end_to_end
        assert e2e is not None
        for description, wrong_key in wrong_marker_keys(key):
            wrong_marker = _render_marker(e2e.marker_key_template, wrong_key, nonce)
            if wrong_marker == marker:
                continue
            try:
                await s3.head_object(Bucket=bucket, Key=wrong_marker)
            except ProbeError:
                continue
            if e2e.delete_marker:
                self._canaries.defer(s3, bucket, wrong_marker)
            return description, wrong_key, wrong_marker
        return None

    # -- keys and cleanup ------------------------------------------------------------------

    def _render_key(self, nonce: str) -> str:
        return self.params.key_template.format(
            prefix=self.params.prefix,
            check=self._check_slug,
            nonce=nonce,
            epoch=int(time.time()),
        )

    def _canary_regex(self) -> re.Pattern[str]:
        parts: list[str] = []
        for literal, name, _, _ in string.Formatter().parse(self.params.key_template):
            parts.append(re.escape(literal))
            if name == "prefix":
                parts.append(re.escape(self.params.prefix))
            elif name == "check":
                parts.append(re.escape(self._check_slug))
            elif name == "nonce":
                parts.append(_NONCE_PATTERN)
            elif name == "epoch":
                parts.append(r"\d+")
        return re.compile("".join(parts))

    def _static_prefix(self) -> str:
        """The canary keys' common literal start (what a sweep may list)."""
        out = ""
        for literal, name, _, _ in string.Formatter().parse(self.params.key_template):
            out += literal
            if name == "prefix":
                out += self.params.prefix
            elif name == "check":
                out += self._check_slug
            elif name is not None:
                break
        return out

    def _is_canary(self, event: S3Event) -> bool:
        return any(self._canary_re.fullmatch(k) for k in (*event.decoded_keys(), event.raw_key))


def _mentions(event: S3Event, nonce: str) -> bool:
    return nonce in event.raw_key or any(nonce in k for k in event.decoded_keys())


def _render_marker(template: str, key: str, nonce: str) -> str:
    return template.format(key=key, nonce=nonce, basename=key.rsplit("/", 1)[-1])


async def _release(sqs: Any, queue_url: str, messages: list[dict[str, Any]]) -> None:
    """Make others' messages visible again at once."""
    if not messages:
        return
    entries = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
        for i, m in enumerate(messages)
    ]
    with contextlib.suppress(ProbeError):  # they reappear after receive_visibility anyway
        await sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)


async def _delete(sqs: Any, queue_url: str, items: list[Any]) -> None:
    messages = [item[0] if isinstance(item, tuple) else item for item in items]
    if not messages:
        return
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
    with contextlib.suppress(ProbeError):  # stale canary events are deleted on a later run
        await sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)


#: Queue errors that waiting will not fix (others are retried until the limit).
_FINAL_QUEUE_ERRORS = frozenset(
    {ErrorKind.NOT_FOUND, ErrorKind.AUTH, ErrorKind.PERMISSION, ErrorKind.REJECTED}
)


def _queue_name(queue_url: str) -> str:
    return queue_url.rstrip("/").rsplit("/", 1)[-1]
