"""The demo's S3 part (replication and event delivery) brings both of its checks up, through
the real CLI with the checks exactly as ``config/demo.yaml`` writes them."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.cli.demo import default_demo_config
from alivemcp.testbed import demo_s3
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import check_json

DEMO_S3_CHECKS = ("s3-replication-lag", "s3-event-delivery")


async def test_demo_s3_checks_are_up(moto: MotoServer, tmp_path: Path) -> None:
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    await demo_s3.start(stack)
    try:
        demo = yaml.safe_load(default_demo_config().read_text(encoding="utf-8"))
        checks = [c for c in demo["checks"] if c["name"] in DEMO_S3_CHECKS]
        assert [c["name"] for c in checks] == list(DEMO_S3_CHECKS)
        path = tmp_path / "demo-s3.yaml"
        path.write_text(yaml.safe_dump({"checks": checks}, allow_unicode=True))
        code, rows = check_json(path, env=stack.env)
    finally:
        await stack.close()
    assert rows["s3-replication-lag"]["status"] == "up", rows["s3-replication-lag"]
    assert rows["s3-event-delivery"]["status"] == "up", rows["s3-event-delivery"]
    assert "end_to_end_latency_seconds" in rows["s3-event-delivery"]["observations"]
    assert code == 0
