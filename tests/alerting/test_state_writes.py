"""Writing the state file: a save cancelled while its thread writes (a delivery worker
stopped mid-persist at shutdown) must not break the next save, nor overwrite it with the
older state afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.state import STATE_FILE, StateStore


def parts(next_id: int, checks: int = 0) -> dict[str, str]:
    entries = {f"check-{i}": {"note": "x" * 200} for i in range(checks)}
    return {
        "next_id": str(next_id),
        "checks": json.dumps(entries),
        "queues": "{}",
        "receivers": "{}",
    }


async def test_a_cancelled_save_neither_breaks_nor_overwrites_the_next(tmp_path: Path) -> None:
    store = StateStore(tmp_path, AlertingMetrics(CollectorRegistry()))
    big = parts(1, checks=20_000)  # a few MB: its thread is still writing when cancelled
    errors = []
    for round_ in range(20):
        cancelled = asyncio.ensure_future(store.save(big))
        await asyncio.sleep(0.001)  # why: not a wait for an event: the cancel lands mid-save
        cancelled.cancel()
        try:
            await store.save(parts(round_ + 2))
        except OSError as exc:
            errors.append(exc)
        saved = json.loads((tmp_path / STATE_FILE).read_text())
        assert saved["next_id"] == round_ + 2 and saved["checks"] == {}
    assert errors == []
