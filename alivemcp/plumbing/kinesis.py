"""Kinesis Data Streams plumbing: the shard map, hash keys, and reading records back.

Kinesis routes a record to the shard whose hash-key range holds the MD5 of its partition key
(as a 128-bit integer), or its ``ExplicitHashKey`` when one is given: writing one record with
each open shard's starting hash key exercises every shard's write path. After a reshard
(split or merge) the parents are closed (their ``SequenceNumberRange`` has an end) and keep
their records until retention; only open shards take writes.

The calls go through the shared :class:`~alivemcp.plumbing.aws.AwsClient` (``client`` below),
so every error is a :class:`~alivemcp.errors.ProbeError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "Shard",
    "StreamTail",
    "list_shards",
    "open_shards",
    "partition_key_hash",
    "read_record_at",
    "shard_for_hash",
]

#: Records one GetRecords call may return while reading back one record (it is the first).
_READ_LIMIT = 10


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard of a stream, as ListShards describes it."""

    shard_id: str
    starting_hash_key: int
    ending_hash_key: int
    parent: str | None = None
    adjacent_parent: str | None = None
    is_open: bool = True

    @property
    def parents(self) -> tuple[str, ...]:
        """The shards this one came from (one after a split, two after a merge)."""
        return tuple(p for p in (self.parent, self.adjacent_parent) if p)

    def holds(self, hash_key: int) -> bool:
        return self.starting_hash_key <= hash_key <= self.ending_hash_key


def partition_key_hash(partition_key: str) -> int:
    """The hash key Kinesis routes ``partition_key`` by: its MD5 as a 128-bit integer."""
    return int.from_bytes(hashlib.md5(partition_key.encode("utf-8")).digest(), "big")


def shard_for_hash(shards: Sequence[Shard], hash_key: int) -> Shard | None:
    """The open shard whose range holds ``hash_key``."""
    return next((s for s in shards if s.is_open and s.holds(hash_key)), None)


def _shard(item: dict[str, Any]) -> Shard:
    hash_range = item.get("HashKeyRange") or {}
    sequence_range = item.get("SequenceNumberRange") or {}
    return Shard(
        shard_id=str(item["ShardId"]),
        starting_hash_key=int(hash_range.get("StartingHashKey", 0)),
        ending_hash_key=int(hash_range.get("EndingHashKey", 0)),
        parent=item.get("ParentShardId"),
        adjacent_parent=item.get("AdjacentParentShardId"),
        is_open="EndingSequenceNumber" not in sequence_range,
    )


async def list_shards(client: Any, stream: str, max_pages: int = 100) -> list[Shard]:
    """Every shard ListShards reports (open and closed), in its order."""
    shards: list[Shard] = []
    # A call with NextToken must not name the stream (ListShards refuses both at once).
    kwargs: dict[str, Any] = {"StreamName": stream}
    for _ in range(max_pages):
        resp = await client.list_shards(**kwargs)
        shards += [_shard(item) for item in resp.get("Shards") or []]
        token = resp.get("NextToken")
        if not token:
            break
        kwargs = {"NextToken": token}
    return shards


def open_shards(shards: Sequence[Shard]) -> list[Shard]:
    """The shards that take writes."""
    return [s for s in shards if s.is_open]


async def read_record_at(
    client: Any,
    stream: str,
    shard_id: str,
    sequence_number: str,
    *,
    within: float,
    poll: float = 0.2,
) -> dict[str, Any] | None:
    """The record at ``sequence_number`` in the shard (GetShardIterator AT_SEQUENCE_NUMBER,
    then GetRecords), or None when it is not returned within ``within`` seconds: GetRecords
    may answer empty while the record is already stored, so the iterator is followed."""
    deadline = time.monotonic() + within
    resp = await client.get_shard_iterator(
        StreamName=stream,
        ShardId=shard_id,
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        StartingSequenceNumber=sequence_number,
    )
    iterator = resp.get("ShardIterator")
    while iterator:
        page = await client.get_records(ShardIterator=iterator, Limit=_READ_LIMIT)
        for record in page.get("Records") or []:
            if record.get("SequenceNumber") == sequence_number:
                return dict(record)
        if page.get("Records") or time.monotonic() >= deadline:
            # Records after ours came back without ours: it is not there.
            return None
        iterator = page.get("NextShardIterator")
        await asyncio.sleep(poll)
    return None


class StreamTail:
    """Reads what arrives in a stream from a moment on, across all its shards: one
    AT_TIMESTAMP iterator per shard, followed on every :meth:`poll`."""

    def __init__(self, client: Any, stream: str, since: datetime, max_shards: int) -> None:
        self._client = client
        self._stream = stream
        self._since = since
        self._max_shards = max_shards
        self._iterators: dict[str, str | None] = {}

    async def poll(self) -> list[bytes]:
        """The data of records that arrived since the last poll (shards found on the first)."""
        if not self._iterators:
            shards = (await list_shards(self._client, self._stream))[: self._max_shards]
            for shard in shards:
                resp = await self._client.get_shard_iterator(
                    StreamName=self._stream,
                    ShardId=shard.shard_id,
                    ShardIteratorType="AT_TIMESTAMP",
                    Timestamp=self._since,
                )
                self._iterators[shard.shard_id] = resp.get("ShardIterator")
        found: list[bytes] = []
        for shard_id, iterator in list(self._iterators.items()):
            if not iterator:
                continue
            page = await self._client.get_records(ShardIterator=iterator)
            found += [bytes(r.get("Data") or b"") for r in page.get("Records") or []]
            self._iterators[shard_id] = page.get("NextShardIterator")
        return found
