"""The demo's Kinesis part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

import boto3
import yaml

from alivemcp.testbed import demo_kinesis
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import REPO, check_json

CHECK = "kinesis-tool-stream"


async def test_demo_stream_is_up_through_its_consumer(moto: MotoServer, tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] == CHECK]
    doc.pop("alerting", None)
    path = tmp_path / "demo-kinesis.yaml"
    path.write_text(yaml.safe_dump(doc))
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    try:
        await demo_kinesis.start(stack)
        code, rows = check_json(path, env=stack.env)
    finally:
        await stack.close()
    row = rows[CHECK]
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
