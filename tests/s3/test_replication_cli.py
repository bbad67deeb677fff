"""``alivemcp check --json`` reports each replication verdict (the real CLI in a subprocess;
the replicator stand-ins run in threads of this process)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import yaml

from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.s3_replicator import deny_head_object
from tests.support import check_json
from tests.support.s3_replication import replication_stand_in, s3_client


async def test_cli_reports_up_degraded_down_failed_and_forbidden(
    moto: MotoServer, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        healthy = stack.enter_context(
            replication_stand_in(moto, source="cli-src-up", destination="cli-dst-up", delay=0.2)
        )
        late = stack.enter_context(
            replication_stand_in(moto, source="cli-src-late", destination="cli-dst-late", delay=2.0)
        )
        stopped = stack.enter_context(
            replication_stand_in(
                moto, source="cli-src-stop", destination="cli-dst-stop", mode="stopped"
            )
        )
        failed = stack.enter_context(
            replication_stand_in(
                moto, source="cli-src-fail", destination="cli-dst-fail", mode="fail", delay=0.2
            )
        )
        forbidden = stack.enter_context(
            replication_stand_in(moto, source="cli-src-403", destination="cli-dst-403")
        )
        deny_head_object(s3_client(moto), forbidden.destination)
        checks = [
            ("up", healthy.params()),
            ("late", late.params(sla=1, grace=5)),
            ("stopped", stopped.params(sla=1, grace=1)),
            ("failed", failed.params(sla=10, grace=5)),
            ("forbidden", forbidden.params()),
        ]
        config = {
            "checks": [
                {
                    "name": name,
                    "probe": "s3_replication_lag",
                    "interval": "2m",
                    "timeout": "40s",
                    "params": params,
                }
                for name, params in checks
            ]
        }
        path = tmp_path / "replication.yaml"
        path.write_text(yaml.safe_dump(config))
        code, rows = check_json(path)

    assert code == 1
    assert rows["up"]["status"] == "up", rows["up"]
    assert rows["up"]["observations"]["replication_lag_seconds"] > 0
    assert rows["late"]["status"] == "degraded", rows["late"]
    assert rows["stopped"]["status"] == "down", rows["stopped"]
    assert "replication failure" in rows["stopped"]["reason"]
    assert rows["failed"]["status"] == "down", rows["failed"]
    assert "FAILED" in rows["failed"]["reason"]
    assert rows["forbidden"]["status"] == "down", rows["forbidden"]
    assert "permission problem" in rows["forbidden"]["reason"]
    assert forbidden.destination in rows["forbidden"]["reason"]
