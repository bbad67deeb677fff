"""What the cluster node tells the parts of a replica, and what they promise in return."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ShardListener"]


class ShardListener(Protocol):
    """A part of the replica that acts on shards gained and lost.

    The node calls ``on_assigned`` of every listener in order (alert state first, probing
    last: a shard's alert state is read before its checks run) and ``on_revoked`` in the
    reverse order (probing stops first, alert state is written last). Both are awaited before
    the node tells Kafka it is done, so a revoked shard is no longer probed, and its state is
    on the broker, before another replica is given it.

    ``on_revoked`` is also called when the replica fences itself (it lost contact with the
    group coordinator for longer than it may keep a shard) and ``on_assigned`` when it gets
    its shards back; both must be idempotent and must not raise (log and count instead).
    """

    #: Short name for logs and metrics.
    name: str

    async def on_assigned(self, shards: frozenset[int]) -> None: ...

    async def on_revoked(self, shards: frozenset[int]) -> None: ...
