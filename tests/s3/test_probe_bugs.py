"""A bug in a probe is the prober's failure, never the target's: it propagates to the runner,
which reports ``unknown`` (before, ``except Exception`` around the canary write read it as the
bucket being ``down``)."""

from __future__ import annotations

from typing import Any

import pytest

from alivemcp.plumbing.s3 import S3Canaries
from alivemcp.testbed.moto import MotoServer
from tests.support import run_check
from tests.support.s3_events import make_bucket, make_queue, notify_queue_directly
from tests.support.s3_replication import replication_stand_in


def _break_canary_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    async def buggy_write(self: S3Canaries, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug while writing the canary")

    monkeypatch.setattr(S3Canaries, "write", buggy_write)


async def test_replication_probe_bug_is_unknown_not_down(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _break_canary_writes(monkeypatch)
    with replication_stand_in(moto) as stand_in:
        result = await run_check("s3_replication_lag", stand_in.params())
    assert result.status == "unknown", result.reason
    assert "RuntimeError: bug while writing the canary" in result.reason


async def test_event_delivery_probe_bug_is_unknown_not_down(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _break_canary_writes(monkeypatch)
    make_bucket(moto)
    queue_url = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue_url)
    params = {"bucket": "mcp-uploads", "queue_url": queue_url, "aws": moto.aws_params(), "limit": 2}
    result = await run_check("s3_event_delivery", params)
    assert result.status == "unknown", result.reason
    assert "RuntimeError: bug while writing the canary" in result.reason
