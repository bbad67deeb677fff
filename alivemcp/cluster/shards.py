"""Which shard a check belongs to: Kafka's own partitioning of the check name.

Kafka's producers place a keyed record in ``murmur2(key) & 0x7fffffff mod partitions``;
aiokafka's default partitioner computes the same. A check's shard is therefore the partition
its results land in, in every topic with ``shards`` partitions.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka.partitioner import murmur2

__all__ = ["ShardMap", "shard_of"]


def shard_of(name: str, shards: int) -> int:
    """The shard (= partition) of the check ``name`` among ``shards``."""
    return (int(murmur2(name.encode("utf-8"))) & 0x7FFFFFFF) % shards


class ShardMap:
    """Check name → shard, computed once per name (murmur2 in Python costs ~2 µs a name, and
    the metrics render and every reload ask for every check)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._of: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        shard = self._of.get(name)
        if shard is None:
            shard = self._of[name] = shard_of(name, self.shards)
        return shard

    def retain(self, names: Iterable[str]) -> None:
        """Forget names no longer configured (after a reload)."""
        keep = set(names)
        for name in [n for n in self._of if n not in keep]:
            del self._of[name]

    def names_in(self, names: Iterable[str], shards: frozenset[int]) -> list[str]:
        return [name for name in names if self(name) in shards]
