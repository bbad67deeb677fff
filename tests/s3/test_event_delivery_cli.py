"""``alivemcp check --json`` reports the event-delivery verdicts (the real CLI in a subprocess;
moto delivers the events, worker threads of this process play the consumers)."""

from __future__ import annotations

from pathlib import Path

import yaml

from alivemcp.testbed.moto import MotoServer
from tests.support import check_json
from tests.support.s3_events import (
    classic_plus_bug,
    make_bucket,
    make_queue,
    notify_queue_directly,
    notify_via_eventbridge,
    worker,
)


async def test_cli_reports_delivery_silence_and_the_plus_bug(
    moto: MotoServer, tmp_path: Path
) -> None:
    for bucket in ("cli-direct", "cli-bridge", "cli-silent", "cli-e2e"):
        make_bucket(moto, bucket)
    direct_q = make_queue(moto, "cli-direct-q")
    bridge_q = make_queue(moto, "cli-bridge-q")
    silent_q = make_queue(moto, "cli-silent-q")
    work_q = make_queue(moto, "cli-work-q")
    notify_queue_directly(moto, direct_q, bucket="cli-direct")
    notify_via_eventbridge(moto, bridge_q, bucket="cli-bridge")
    notify_queue_directly(moto, silent_q, bucket="cli-silent", prefix="elsewhere/")
    notify_queue_directly(moto, work_q, bucket="cli-e2e")
    aws = moto.aws_params()

    def check(name: str, **params: object) -> dict[str, object]:
        return {
            "name": name,
            "probe": "s3_event_delivery",
            "interval": "1m",
            "timeout": "20s",
            "params": {"aws": aws, "limit": 5, **params},
        }

    config = {
        "checks": [
            check("direct", bucket="cli-direct", queue_url=direct_q),
            check("bridge", bucket="cli-bridge", queue_url=bridge_q),
            check("silent", bucket="cli-silent", queue_url=silent_q, limit=2),
            check(
                "e2e",
                bucket="cli-e2e",
                end_to_end={"marker_key_template": "processed/{key}.done", "limit": 3},
            ),
        ]
    }
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    with worker(moto, work_q, classic_plus_bug, mode="index"):
        code, rows = check_json(path)

    assert code == 1
    assert rows["direct"]["status"] == "up", rows["direct"]
    assert rows["direct"]["observations"]["delivery_latency_seconds"] >= 0
    assert rows["bridge"]["status"] == "up", rows["bridge"]
    assert rows["silent"]["status"] == "down", rows["silent"]
    assert "no ObjectCreated event" in rows["silent"]["reason"]
    assert rows["e2e"]["status"] == "down", rows["e2e"]
    assert "encoding failure" in rows["e2e"]["reason"]
