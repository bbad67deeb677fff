"""Consumer liveness for ``kinesis_canary``: did the user's consumer process every canary?

The consumer, on processing a canary, writes a marker holding its id: an S3 object, a DynamoDB
item, or a record in an output stream. :class:`ConsumerWatch` waits up to the SLA for every
shard's marker, blames each shard without one with what the pattern suggests, deletes the
markers it saw, and deletes those that came after the SLA at the end of the next run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing import canary, plumbing_of
from alivemcp.plumbing.aws import AwsSettings
from alivemcp.plumbing.kinesis import StreamTail
from alivemcp.probe import CheckContext, Status
from probes.kinesis_canary.params import (
    ConsumerParams,
    OutputStreamMarker,
    S3Marker,
    describe_marker,
)
from probes.kinesis_canary.run import Put, Run, shard_list

__all__ = ["MAX_LEFTOVER_MARKERS", "ConsumerWatch"]

#: Marker ids remembered for a late clean-up; older ones are left to a lifecycle rule / TTL.
MAX_LEFTOVER_MARKERS = 1000
#: How far before the first put the output-stream reader starts (clock skew with Kinesis).
_TAIL_SKEW = timedelta(seconds=5)


class ConsumerWatch:
    """The consumer's markers of one check's canaries, across its runs."""

    def __init__(
        self, context: CheckContext, settings: AwsSettings, consumer: ConsumerParams
    ) -> None:
        self._context = context
        #: The identity that reads the marker store.
        self._settings = settings
        self._consumer = consumer
        #: Canary ids whose marker had not come when their run ended.
        self._leftover_markers: list[str] = []

    async def start_tail(self) -> StreamTail | None:
        """For an output-stream marker, the reader of that stream, started before the puts."""
        marker = self._consumer.marker
        if not isinstance(marker, OutputStreamMarker):
            return None
        client = await plumbing_of(self._context).aws.client("kinesis", self._settings)
        return StreamTail(
            client,
            marker.stream_name,
            datetime.now(UTC) - _TAIL_SKEW,
            marker.max_shards,
        )

    async def await_markers(
        self, run: Run, written: Sequence[Put], tail: StreamTail | None
    ) -> None:
        consumer = self._consumer
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
                reason=f"cannot read the consumer's markers ({describe_marker(consumer.marker)})",
            )
            return
        self._blame_consumer(run, written, list(waiting.values()), consumer.sla)

    def _blame_consumer(
        self, run: Run, written: Sequence[Put], missing: Sequence[Put], sla: float
    ) -> None:
        """One finding per shard without a marker, with what the pattern suggests."""
        stream = run.stream
        marker = describe_marker(self._consumer.marker)
        if len(missing) == len(written) and len(written) > 1:
            shards = shard_list([put.shard.shard_id for put in missing])
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
        marker = self._consumer.marker
        aws = plumbing_of(self._context).aws
        if isinstance(marker, OutputStreamMarker):
            assert tail is not None
            arrived = await tail.poll()
            return {i for i in ids if any(i.encode() in data for data in arrived)}
        if isinstance(marker, S3Marker):
            s3 = await aws.client("s3", self._settings)

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
            dynamodb = await aws.client("dynamodb", self._settings)

            async def item_has(canary_id: str) -> bool:
                key = {marker.key_attribute: {"S": marker.key_template.format(id=canary_id)}}
                resp = await dynamodb.get_item(TableName=marker.table, Key=key, ConsistentRead=True)
                return bool(resp.get("Item"))

            found = await asyncio.gather(*(item_has(i) for i in ids))
        return {i for i, present in zip(ids, found, strict=True) if present}

    async def _delete_markers(self, ids: Sequence[str]) -> None:
        """Delete the markers of ``ids``; failures are left to a lifecycle rule or TTL."""
        marker = self._consumer.marker
        if isinstance(marker, OutputStreamMarker) or not marker.delete:
            return
        aws = plumbing_of(self._context).aws
        if isinstance(marker, S3Marker):
            s3 = await aws.client("s3", self._settings)
            calls = [
                s3.delete_object(Bucket=marker.bucket, Key=marker.key_template.format(id=i))
                for i in ids
            ]
        else:
            dynamodb = await aws.client("dynamodb", self._settings)
            calls = [
                dynamodb.delete_item(
                    TableName=marker.table,
                    Key={marker.key_attribute: {"S": marker.key_template.format(id=i)}},
                )
                for i in ids
            ]
        await canary.run_to_completion(_quietly(calls))

    async def clean_leftovers(self, run: Run) -> None:
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
        self._leftover_markers = missing[-MAX_LEFTOVER_MARKERS:]


async def _quietly(calls: Sequence[Any]) -> None:
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException) and not isinstance(result, ProbeError):
            raise result
