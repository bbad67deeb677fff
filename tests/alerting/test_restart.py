"""State survives restarts (engine level): no re-page of open incidents, resolves still
delivered, notifications queued during a receiver outage delivered after a restart."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from alivemcp.alerting.state import STATE_FILE
from tests.support.alerting_daemon import per_key
from tests.support.alerting_engine import check, fast, running
from tests.support.alerting_receivers import Answer, StandIn


def pd_config(pd: StandIn) -> dict:
    return {**fast(), "receivers": [pd.receiver("pd")], "default_receivers": ["pd"]}


async def test_restart_neither_repages_nor_forgets_to_resolve(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        async with running(pd_config(pd), [check("api"), check("db")], tmp_path) as h:
            h.feed("api", "down", "down")
            h.feed("db", "down")  # one failure: not firing yet, streak persisted
            await h.delivered()
        assert per_key(pd.events()) == {"alivemcp/api": ["trigger"]}
        state = json.loads((tmp_path / STATE_FILE).read_text())
        assert state["checks"]["api"]["state"]["alerts"]["target"]["notified"] is True
        assert pd.routing_key not in json.dumps(state)

        async with running(pd_config(pd), [check("api"), check("db")], tmp_path) as h:
            h.feed("api", "down", "down", "down")
            h.feed("db", "down")  # the streak survived: this is the second failure
            await h.delivered()
            assert per_key(pd.events()) == {"alivemcp/api": ["trigger"], "alivemcp/db": ["trigger"]}
            h.feed("api", "up", "up")
            await h.delivered()
        assert per_key(pd.events()) == {
            "alivemcp/api": ["trigger", "resolve"],
            "alivemcp/db": ["trigger"],
        }


async def test_queued_during_outage_delivered_after_restart(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        pd.script.extend([Answer(500, "{}")] * 10_000)
        async with running(pd_config(pd), [check("a"), check("b")], tmp_path) as h:
            h.feed("a", "down", "down")
            h.feed("b", "down", "down")
            await pd.await_for(lambda: len(pd.requests) >= 2, what="attempts")
            # stop() gives up after its grace; the queue is persisted, not lost
        saved = json.loads((tmp_path / STATE_FILE).read_text())
        assert [n["check"] for n in saved["queues"]["pd"]] == ["a", "b"]
        assert pd.accepted == []
        pd.script.clear()
        async with running(pd_config(pd), [check("a"), check("b")], tmp_path) as h:
            await h.delivered()
            h.feed("a", "down")
            await h.delivered()
        assert per_key(pd.events()) == {"alivemcp/a": ["trigger"], "alivemcp/b": ["trigger"]}


async def test_removed_check_is_resolved_and_corrupt_state_is_survived(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        async with running(pd_config(pd), [check("old"), check("keep")], tmp_path) as h:
            h.feed("old", "down", "down")
            h.feed("keep", "down", "down")
            await h.delivered()
        # Restarted with "old" gone from the config: its incident is closed, not left open.
        async with running(pd_config(pd), [check("keep")], tmp_path) as h:
            await h.delivered()
            # A reload that removes "keep" does the same.
            h.manager.reconfigure(h.manager.config, [])
            await h.delivered()
        assert per_key(pd.events()) == {
            "alivemcp/old": ["trigger", "resolve"],
            "alivemcp/keep": ["trigger", "resolve"],
        }
        (tmp_path / STATE_FILE).write_text("{not json")
        async with running(pd_config(pd), [check("x")], tmp_path) as h:
            h.feed("x", "down", "down")
            await h.delivered()
        assert [p for p in os.listdir(tmp_path) if p.startswith(f"{STATE_FILE}.corrupt-")]
        assert per_key(pd.events())["alivemcp/x"] == ["trigger"]


async def test_reload_adds_and_removes_receivers(tmp_path: Path) -> None:
    from alivemcp.alerting.config import AlertingConfig

    with StandIn("webhook") as one, StandIn("webhook") as two:
        doc = {
            **fast(failures_to_fire=1),
            "receivers": [one.receiver("one")],
            "default_receivers": ["one"],
        }
        async with running(doc, [check("c")], tmp_path) as h:
            h.feed("c", "down")
            await h.delivered()
            new = {**doc, "receivers": [two.receiver("two")], "default_receivers": ["two"]}
            h.manager.reconfigure(AlertingConfig.model_validate(new), [check("c")])
            h.feed("c", "up", "up")
            await h.delivered()
            h.feed("c", "down")
            await h.delivered()
            # Disabling a firing check's alerts by reload closes its incident.
            h.manager.reconfigure(
                AlertingConfig.model_validate(new), [check("c", alert={"enabled": False})]
            )
            await h.delivered()
            await asyncio.sleep(0)
            assert 'receiver="one"' not in h.metrics()
        assert [n["event"] for n in one.events()] == ["firing"]
        assert [n["event"] for n in two.events()] == ["resolved", "firing", "resolved"]
        assert two.events()[-1]["reason"] == "alerting disabled for this check"


async def test_unwritable_data_dir_still_pages_and_says_so_once(tmp_path: Path) -> None:
    import structlog

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data directory should be")
    with StandIn("pagerduty") as pd, structlog.testing.capture_logs() as logs:
        async with running(pd_config(pd), [check("a")], blocked / "data") as h:
            h.feed("a", "down", "down")
            await h.delivered()
            # The flusher keeps failing quietly: what it does every second, done here (each
            # attempt writes again, the state being unsaved).
            for _ in range(3):
                await h.manager.persist()
    assert per_key(pd.events()) == {"alivemcp/a": ["trigger"]}
    errors = [e for e in logs if e["event"].startswith("cannot persist alert state")]
    assert len(errors) == 1, errors


async def test_stop_returns_while_a_worker_waits_to_group(tmp_path: Path) -> None:
    """drain() wakes a worker waiting out group_wait and stop() cancels it right after: the
    worker must not survive (a swallowed cancellation hung shutdown forever)."""
    from prometheus_client import CollectorRegistry

    from alivemcp.alerting.config import AlertingConfig
    from alivemcp.alerting.manager import AlertManager
    from tests.support.alerting_engine import result

    config = AlertingConfig.model_validate(
        {
            "group_wait": 30,
            "policy": {"failures_to_fire": 1},
            "receivers": [{"name": "log", "type": "log"}],
            "default_receivers": ["log"],
        }
    )
    infos = [check(f"c{i}") for i in range(200)]
    for _ in range(5):
        manager = AlertManager(config, infos, tmp_path, CollectorRegistry())
        await manager.start()
        for info, _ in infos:
            manager.observe(result(info, "down"))
        # The worker, woken by the first notification, runs into its group wait on the
        # loop's next turn.
        await asyncio.sleep(0)
        async with asyncio.timeout(10):
            await manager.stop(grace=0.0)
        await asyncio.sleep(0)
        left = [
            t
            for t in asyncio.all_tasks()
            if t.get_name().startswith("alivemcp-alerting") and not t.done()
        ]
        assert left == []


async def test_no_receivers_no_state_file(tmp_path: Path) -> None:
    async with running(fast(failures_to_fire=1), [check("a")], tmp_path / "data") as h:
        h.feed("a", "down")
        await h.manager.persist()
        assert h.manager.firing_alerts()[0]["check"] == "a"
    assert not (tmp_path / "data").exists()


async def test_pagerduty_storm_group_survives_restart(tmp_path: Path) -> None:
    with StandIn("pagerduty") as pd:
        doc = {
            **fast(failures_to_fire=1, successes_to_resolve=1),
            "receivers": [pd.receiver("pd", group_threshold=5)],
            "default_receivers": ["pd"],
        }
        names = [f"p{i}" for i in range(20)]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for n in names:
                h.feed(n, "down", step=0.001)
            await h.delivered()
        assert len(pd.accepted) == 1
        group_key = pd.accepted[0].body["dedup_key"]
        async with running(doc, [check(n) for n in names], tmp_path) as h:
            for n in names[:-1]:
                h.feed(n, "up", step=0.001)
            await h.delivered()
            assert len(pd.accepted) == 1  # members resolve silently
            h.feed(names[-1], "up")
            await h.delivered()
        assert per_key(pd.events()) == {group_key: ["trigger", "resolve"]}


async def test_a_stepped_reload_changes_nothing_until_its_step_that_applies_it(
    tmp_path: Path,
) -> None:
    # The daemon runs a reload's alerting part in steps with the loop let run in between: a
    # result decided meanwhile must see the old config whole, never half of each.
    with StandIn("pagerduty") as pd:
        async with running(pd_config(pd), [check("old"), check("keep")], tmp_path) as h:
            h.feed("old", "down", "down")
            await h.delivered()
            new = [check(f"new{i}") for i in range(50)] + [check("keep")]
            steps = h.manager.reconfiguring(h.manager.config, new)
            for _ in range(len(new)):  # every catalog entry made, none applied yet
                next(steps)
            assert h.manager.check_names() == ["old", "keep"]
            assert per_key(pd.events()) == {"alivemcp/old": ["trigger"]}
            for _ in steps:
                pass
            await h.delivered()
            assert sorted(h.manager.check_names()) == sorted(c.name for c, _ in new)
        assert per_key(pd.events()) == {"alivemcp/old": ["trigger", "resolve"]}
