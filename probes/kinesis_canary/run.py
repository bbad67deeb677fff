"""What one run of ``kinesis_canary`` did: a canary per shard, and what became of each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from alivemcp.plumbing.kinesis import Shard
from alivemcp.verdict import Findings

__all__ = ["Put", "Run", "put_json", "shard_list"]


@dataclass
class Put:
    """One canary record: where it was aimed, where it landed, and what became of it."""

    shard: Shard
    canary_id: str
    data: bytes
    landed: str | None = None
    sequence_number: str | None = None
    put_at: float = 0.0
    readback_seconds: float | None = None
    marker_seconds: float | None = None


@dataclass
class Run:
    stream: str
    findings: Findings
    shards: list[Shard] = field(default_factory=list)
    puts: list[Put] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)


def shard_list(shard_ids: Sequence[str], shown: int = 5) -> str:
    listed = ", ".join(shard_ids[:shown])
    return listed + (f" +{len(shard_ids) - shown} more" if len(shard_ids) > shown else "")


def put_json(put: Put) -> dict[str, Any]:
    out: dict[str, Any] = {
        "shard": put.shard.shard_id,
        "canary_id": put.canary_id,
        "written": put.sequence_number is not None,
    }
    if put.landed and put.landed != put.shard.shard_id:
        out["landed_on"] = put.landed
    if put.readback_seconds is not None:
        out["readback_seconds"] = round(put.readback_seconds, 3)
    if put.marker_seconds is not None:
        out["consumer_latency_seconds"] = round(put.marker_seconds, 3)
    return out
