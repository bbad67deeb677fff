"""A reload keeps what did not change: the running check's objects, its info, its status entry
and its alerting entry stay the same objects, and only the checks that changed (a label, a
param, a secret, an override) are made anew. Every other part of the engine follows a check by
its info, so a kept object is one the reload did not rebuild (nor leave behind as a hole in the
heap)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from alivemcp.app.daemon import Daemon
from alivemcp.config import load_config
from alivemcp.hygiene.logging import configure_logging


def write(
    path: Path,
    *,
    label: str = "x",
    delay: float = 0.0,
    token: str = "t1",
    failures: int = 2,
    override: int | None = None,
    reverse: bool = False,
) -> None:
    alert = {"alert": {"failures_to_fire": override}} if override else {}
    doc = {
        "data_dir": str(path.parent / "data"),
        "server": {"listen": "127.0.0.1:0"},
        "alerting": {"policy": {"failures_to_fire": failures}},
        "checks": [
            {"name": "same", "probe": "test_noop", "interval": 60},
            {"name": "labelled", "probe": "test_noop", "interval": 60, "labels": {"v": label}},
            {"name": "param", "probe": "test_static", "interval": 60, "params": {"delay": delay}},
            # A secret header: only its digest tells a changed value from the old one.
            {
                "name": "secret",
                "probe": "mcp_endpoint",
                "interval": 60,
                "timeout": 1,
                "params": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Token": token}},
            },
            {"name": "override", "probe": "test_noop", "interval": 60, **alert},
        ],
    }
    if reverse:
        doc["checks"].reverse()  # type: ignore[attr-defined]
    path.write_text(yaml.safe_dump(doc))


def snapshot(daemon: Daemon) -> dict[str, tuple[Any, Any, Any, Any]]:
    """Per check: its config object, its info, its status entry's info, its alerting entry."""
    infos = dict(zip((c.name for c in daemon._loaded.checks), daemon._applied_infos, strict=True))
    states = {s.info.name: s for s in daemon.store.states()}
    catalog = daemon.alerts._catalog.checks
    return {
        c.name: (c, infos[c.name], states[c.name].info, catalog[c.name])
        for c in daemon._loaded.checks
    }


def kept(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> set[str]:
    """The checks whose four objects are all the very ones they were."""
    return {
        name
        for name, objects in after.items()
        if all(a is b for a, b in zip(objects, before[name], strict=True))
    }


async def test_a_reload_keeps_the_objects_of_checks_that_did_not_change(tmp_path: Path) -> None:
    configure_logging("warning", "json")
    path = tmp_path / "c.yaml"
    write(path)
    daemon = Daemon(load_config(path), path)
    await daemon._start()
    try:
        for _ in range(100):  # every check's first run (their start window is 2 s)
            if all(s.last is not None for s in daemon.store.states()):
                break
            await asyncio.sleep(0.1)
        names = {"same", "labelled", "param", "secret", "override"}
        first = snapshot(daemon)
        for name, (_, info, state_info, entry) in first.items():
            assert state_info is info and entry.info is info, name  # one info per check

        # The same file: everything is kept.
        assert await daemon.reload()
        second = snapshot(daemon)
        assert kept(first, second) == names

        # A label, a param, a secret's value and an override changed: those four are new.
        write(path, label="y", delay=0.01, token="t2", override=5)
        assert await daemon.reload()
        third = snapshot(daemon)
        assert kept(second, third) == {"same"}
        assert third["labelled"][1].labels == {"v": "y"}
        assert third["labelled"][3].match_labels["v"] == "y"
        assert third["override"][3].policy.failures_to_fire == 5
        # The kept probe instance of the unchanged check runs on: it was never replaced.
        assert daemon.scheduler.checks["same"].handle.info is third["same"][1]

        # The alerting policy changed, the checks did not: the checks and their infos are
        # kept, every alerting entry is made anew with the new policy.
        write(path, label="y", delay=0.01, token="t2", override=5, failures=4)
        assert await daemon.reload()
        fourth = snapshot(daemon)
        for name in names:
            assert fourth[name][0] is third[name][0] and fourth[name][1] is third[name][1]
            assert fourth[name][3] is not third[name][3]
        assert fourth["same"][3].policy.failures_to_fire == 4
        assert fourth["override"][3].policy.failures_to_fire == 5

        # The same checks in another order: found by name, every one kept.
        write(path, label="y", delay=0.01, token="t2", override=5, failures=4, reverse=True)
        assert await daemon.reload()
        fifth = snapshot(daemon)
        assert kept(fourth, fifth) == names
        assert daemon._loaded.checks[0].name == "override"

        # What /metrics shows follows: the new label, not the old one.
        body, _ = await daemon.metrics.render(None)
        assert b'check="labelled",probe="test_noop",v="y"' in body
        assert b'v="x"' not in body
    finally:
        await daemon.shutdown()  # its alerting, history and server tasks end with it
