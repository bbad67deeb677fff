"""The demo's Kinesis part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

import boto3

from alivemcp.testbed import demo_kinesis
from alivemcp.testbed.moto import MotoServer
from tests.support import run_demo_check

CHECK = "kinesis-tool-stream"


async def test_demo_stream_is_up_through_its_consumer(moto: MotoServer, tmp_path: Path) -> None:
    code, row = await run_demo_check(moto, tmp_path, demo_kinesis.start, CHECK)
    assert code == 0, row
    assert row["status"] == "up", row
    # Both shards written and read back, and the demo consumer marked both canaries.
    assert row["observations"]["open_shards"] == 2
    assert row["observations"]["consumer_missing_shards"] == 0
    assert "consumer markers in" in row["reason"]
    # The probe deletes the markers it saw: the consumer wrote them where the check looks.
    s3 = boto3.client("s3", **moto.boto3_kwargs())
    listed = s3.list_objects_v2(Bucket=demo_kinesis.MARKER_BUCKET)
    assert listed.get("KeyCount", 0) == 0, listed.get("Contents")
