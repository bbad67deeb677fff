"""The demo's Flink part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.testbed import demo_flink, demo_kinesis
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import REPO, check_json

CHECK = "flink-tool-analytics"


async def test_demo_application_is_running_and_fed(moto: MotoServer, tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] == CHECK]
    doc.pop("alerting", None)
    path = tmp_path / "demo-flink.yaml"
    path.write_text(yaml.safe_dump(doc))
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    try:
        await demo_flink.start(stack)
        code, rows = check_json(path, env=stack.env)
    finally:
        await stack.close()
    row = rows[CHECK]
    assert code == 0, row
    assert row["status"] == "up", row
    # RUNNING (moto alone leaves it STARTING), 4 parallelism at 2 per KPU plus orchestration.
    assert row["details"]["status"] == "RUNNING"
    assert row["observations"]["kpus"] == 3
    # The input fed before the first run: not idle, reading the demo's Kinesis stream.
    assert row["observations"]["input_records"] > 0
    assert row["observations"]["idle_seconds"] < 120
    assert f"stream {demo_kinesis.STREAM} (IncomingRecords)" in row["reason"]
    assert row["observations"]["restarts_in_window"] == 0
