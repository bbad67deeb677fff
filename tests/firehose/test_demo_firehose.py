"""The demo's Firehose part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

from alivemcp.testbed import demo_firehose
from alivemcp.testbed.moto import MotoServer
from tests.support import run_demo_check

CHECK = "firehose-tool-events"


async def test_demo_stream_is_up_with_its_metrics(moto: MotoServer, tmp_path: Path) -> None:
    code, row = await run_demo_check(moto, tmp_path, demo_firehose.start, CHECK)
    assert code == 0, row
    assert row["status"] == "up"
    # One-shot run against a 60 s buffer: the canary is put and left pending for later runs.
    assert "canary_pending" in row["details"]
