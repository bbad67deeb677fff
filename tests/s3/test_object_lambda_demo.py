"""The demo's access point and Object Lambda part, checked with the checks in config/demo.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.testbed import demo_s3_access
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack
from tests.support import REPO, check_json

CHECKS = ("s3-access-point-tenant-a", "s3-object-lambda-pii-clean", "s3-object-lambda-pii-leaky")


def demo_checks_config(tmp_path: Path, names: tuple[str, ...]) -> Path:
    """config/demo.yaml reduced to the named checks (the other parts are not started here)."""
    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] in names]
    assert [c["name"] for c in doc["checks"]] == list(names)
    doc.pop("alerting", None)
    doc.pop("discovery", None)  # the demo's registry is its own part (demo_registry)
    path = tmp_path / "demo-part.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_demo_part_serves_its_checks(moto: MotoServer, tmp_path: Path) -> None:
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    try:
        await demo_s3_access.start(stack)
        code, rows = check_json(demo_checks_config(tmp_path, CHECKS), env=stack.env)
    finally:
        await stack.close()
    assert code == 1  # the leaky Object Lambda is down on purpose
    assert rows["s3-access-point-tenant-a"]["status"] == "up", rows["s3-access-point-tenant-a"]
    assert rows["s3-object-lambda-pii-clean"]["status"] == "up", rows["s3-object-lambda-pii-clean"]
    assert rows["s3-object-lambda-pii-leaky"]["status"] == "down"
    assert "FAILED OPEN" in rows["s3-object-lambda-pii-leaky"]["reason"]
