"""The demo's Firehose part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.testbed import demo_firehose
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import REPO, check_json

CHECK = "firehose-tool-events"


async def test_demo_stream_is_up_with_its_metrics(moto: MotoServer, tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] == CHECK]
    doc.pop("alerting", None)
    path = tmp_path / "demo-firehose.yaml"
    path.write_text(yaml.safe_dump(doc))
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    try:
        await demo_firehose.start(stack)
        code, rows = check_json(path, env=stack.env)
    finally:
        await stack.close()
    row = rows[CHECK]
    assert code == 0, row
    assert row["status"] == "up"
    # One-shot run against a 60 s buffer: the canary is put and left pending for later runs.
    assert "canary_pending" in row["details"]
