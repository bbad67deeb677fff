"""The demo's Flink part, checked with its check from config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

from alivemcp.testbed import demo_flink, demo_kinesis
from alivemcp.testbed.moto import MotoServer
from tests.support import run_demo_check

CHECK = "flink-tool-analytics"


async def test_demo_application_is_running_and_fed(moto: MotoServer, tmp_path: Path) -> None:
    code, row = await run_demo_check(moto, tmp_path, demo_flink.start, CHECK)
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
