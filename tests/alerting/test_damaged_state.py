"""A damaged alert state file never stops the daemon, and never stops paging.

Each case writes a damaged ``alerting-state.json`` into the data directory of a real daemon
process (`alivemcp run`) and checks that the daemon starts, a failing check pages the
PagerDuty stand-in, and the damage is visible: a file that cannot be trusted is moved aside
and counted by reason; a damaged entry is dropped alone (logged with its check, counted) while
the sound entries next to it are restored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tests.support
from alivemcp.alerting.state import MAX_STATE_BYTES, STATE_FILE
from tests.support import DaemonProcess
from tests.support.alerting_daemon import file_check, log_events, per_key, set_state, write_config
from tests.support.alerting_engine import check, running
from tests.support.alerting_receivers import Answer, StandIn


@pytest.fixture(scope="module")
def saved_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real state file, written by the alert manager itself: check ``other`` fires and was
    notified, and its trigger is still queued for ``pd`` (PagerDuty answered 500)."""

    async def generate(data_dir: Path) -> None:
        with StandIn("pagerduty") as down:
            down.script.extend([Answer(500, "{}")] * 1000)
            doc = {
                "group_wait": 0,
                "group_interval": 0,
                "receivers": [down.receiver("pd")],
                "default_receivers": ["pd"],
            }
            async with running(doc, [check("other")], data_dir) as h:
                h.feed("other", "down", "down")
                await down.await_for(lambda: down.requests, what="a failed attempt")

    data_dir = tmp_path_factory.mktemp("generated")
    # Its own thread and loop: this fixture must not disturb the tests' event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, generate(data_dir)).result(timeout=60)
    state: dict[str, Any] = json.loads((data_dir / STATE_FILE).read_text())
    assert state["checks"]["other"]["state"]["alerts"]["target"]["notified"] is True
    assert [n["check"] for n in state["queues"]["pd"]] == ["other"]
    return state


def daemon_config(tmp: Path, pd: StandIn, checks: list[str], down: set[str]) -> Path:
    specs = [file_check(tmp, name, "down" if name in down else "up") for name in checks]
    return write_config(
        tmp,
        specs,
        {
            "group_wait": 0,
            "group_interval": 0,
            # No storm grouping: each check's own trigger is what the tests look for. A generous
            # timeout: on a busy machine a 1 s one could time out an accepted event and repeat it.
            "receivers": [pd.receiver("pd", group_threshold=1000, timeout=10)],
            "default_receivers": ["pd"],
        },
    )


def metric(d: DaemonProcess, name: str, **labels: str) -> float:
    _, text = d.get("/metrics")
    wanted = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{wanted} not exported")


def assert_new_state_is_sound(data: Path) -> None:
    """After the start the daemon writes a fresh state file it can read back."""
    path = data / STATE_FILE
    assert path.is_file() and not path.is_symlink()
    assert json.loads(path.read_text())["version"] == 1


# -- file-level damage: moved aside, alerting starts clean --------------------------------------

Writer = Callable[[Path, dict[str, Any]], None]


def write_bytes(content: bytes) -> Writer:
    def write(path: Path, _: dict[str, Any]) -> None:
        path.write_bytes(content)

    return write


def write_json(change: Callable[[dict[str, Any]], Any]) -> Writer:
    def write(path: Path, good: dict[str, Any]) -> None:
        doc = copy.deepcopy(good)
        replaced = change(doc)
        path.write_text(json.dumps(doc if replaced is None else replaced))

    return write


def truncated(path: Path, good: dict[str, Any]) -> None:
    text = json.dumps(good)
    path.write_text(text[: len(text) // 2])


def sparse_too_large(path: Path, _: dict[str, Any]) -> None:
    with open(path, "wb") as fh:  # sparse: no disk space used, only the size is huge
        fh.truncate(MAX_STATE_BYTES + 1)


def directory(path: Path, _: dict[str, Any]) -> None:
    path.mkdir()
    (path / "inside").write_text("a directory where the state file should be")


def fifo(path: Path, _: dict[str, Any]) -> None:
    os.mkfifo(path)  # opening it for reading would block the start forever


def unreadable(path: Path, good: dict[str, Any]) -> None:
    path.write_text(json.dumps(good))
    path.chmod(0)


FILE_CASES: dict[str, tuple[Writer, str]] = {
    "non_utf8_bytes": (
        write_bytes(
            b'{"version": 1, "next_id": 1, "checks": {"\xff\xfe": {}}, '
            b'"queues": {}, "receivers": {}}'
        ),
        "not_utf8",
    ),
    "truncated_json": (truncated, "not_json"),
    "empty_file": (write_bytes(b""), "not_json"),
    "nested_too_deep": (write_bytes(b"[" * 200_000 + b"]" * 200_000), "not_json"),
    "json_array": (write_json(lambda doc: [doc]), "bad_shape"),
    "wrong_version": (write_json(lambda doc: doc.update(version=2)), "bad_shape"),
    "version_true": (write_json(lambda doc: doc.update(version=True)), "bad_shape"),
    "next_id_string": (write_json(lambda doc: doc.update(next_id="7")), "bad_shape"),
    "checks_a_list": (write_json(lambda doc: doc.update(checks=[])), "bad_shape"),
    "missing_queues": (write_json(lambda doc: doc.pop("queues") and None), "bad_shape"),
    "too_large_sparse": (sparse_too_large, "too_large"),
    "a_directory": (directory, "not_a_file"),
    "a_fifo": (fifo, "not_a_file"),
    "permission_denied": (unreadable, "unreadable"),
}


def without_file_permission_override() -> list[str]:
    """The daemon command, minus root's power to read any file (a file mode 000 must be
    unreadable to it, as it is to any other user)."""
    if os.geteuid() != 0:
        return tests.support.ALIVEMCP
    caps = "-dac_override,-dac_read_search"
    return [
        "setpriv",
        f"--bounding-set={caps}",
        f"--inh-caps={caps}",
        sys.executable,
        "-m",
        "alivemcp",
    ]


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_untrusted_file_is_set_aside_and_alerting_starts_clean(
    case: str,
    tmp_path: Path,
    pd: StandIn,
    saved_state: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write, reason = FILE_CASES[case]
    data = tmp_path / "data"
    data.mkdir()
    write(data / STATE_FILE, saved_state)
    original_mode = os.lstat(data / STATE_FILE).st_mode
    if case == "permission_denied":
        monkeypatch.setattr(tests.support, "ALIVEMCP", without_file_permission_override())
    config = daemon_config(tmp_path, pd, ["api", "other"], down={"api"})
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.get("/healthz")[0] == 200, what="healthy")
        pd.wait_for(lambda: "alivemcp/api" in per_key(pd.events()), what="api paged")
        assert metric(d, "alivemcp_alert_state_discarded_total", reason=reason) == 1.0
        others = [
            r
            for r in ("unreadable", "not_a_file", "too_large", "not_utf8", "not_json", "bad_shape")
            if r != reason
        ]
        assert all(
            metric(d, "alivemcp_alert_state_discarded_total", reason=r) == 0.0 for r in others
        )
        d.wait_for(lambda: (data / STATE_FILE).exists(), what="a fresh state file")
        assert d.stop() == 0
        errors = log_events(
            d,
            "alert state file cannot be trusted; moved aside, alerting "
            "starts clean (open incidents may be paged again, queued "
            "notifications are lost)",
        )
    assert [e["reason"] for e in errors] == [reason]
    aside = [p for p in data.iterdir() if p.name.startswith(f"{STATE_FILE}.corrupt-")]
    assert len(aside) == 1 and errors[0]["path"] == str(aside[0])
    assert os.lstat(aside[0]).st_mode == original_mode  # the damaged copy, kept for a look
    assert_new_state_is_sound(data)
    # Nothing of the old state was restored: "other" (notified, queued) is unknown now.
    assert "alivemcp/other" not in per_key(pd.events())


# -- entry-level damage: only the damaged entry goes ---------------------------------------------

FIFTY_MB = "x" * (50 * 1024 * 1024)


def damaged_checks(good: dict[str, Any]) -> dict[str, Any]:
    """One check per row, each with a damaged saved entry."""
    base = copy.deepcopy(good["checks"]["other"])

    def entry(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        doc = copy.deepcopy(base)
        change(doc)
        return doc

    def state(**values: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc["state"].update(values)

    def target(**values: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc["state"]["alerts"]["target"].update(values)

    # Every row's check is quiet apart from the damage, so a fresh start must page it.
    quiet = dict(
        fail_streak=0, ok_streak=0, known_streak=0, last_status="up", last_up=True, alerts={}
    )
    rows: dict[str, Any] = {
        "streak_string": entry(state(**{**quiet, "fail_streak": "3"})),
        "streak_negative": entry(state(**{**quiet, "fail_streak": -1})),
        "streak_1e308": entry(state(**{**quiet, "fail_streak": 1e308})),
        "streak_2_pow_64": entry(state(**{**quiet, "fail_streak": 2**64})),
        "streak_bool": entry(state(**{**quiet, "fail_streak": True})),
        "since_nan": entry(state(**{**quiet, "fail_streak": 1, "fail_since": float("nan")})),
        # Year 33658: rendering it as a date would fail every send to this receiver forever.
        "since_far_future": entry(state(**{**quiet, "fail_streak": 1, "fail_since": 1e12})),
        "status_unknown_word": entry(state(**{**quiet, "last_status": "sideways"})),
        "changes_not_a_list": entry(state(**{**quiet, "changes": "many"})),
        "missing_field": entry(lambda doc: doc["state"].pop("ok_streak")),
        "null_entry": None,
        "null_state": {"state": None},
        "alert_kind_unknown": entry(
            lambda doc: doc["state"]["alerts"].update(exploded=doc["state"]["alerts"].pop("target"))
        ),
        "alert_notified_string": entry(target(notified="yes")),
        "alert_severity_unknown": entry(target(severity="apocalyptic")),
        "label_not_text": entry(lambda doc: doc.update(labels={"team": 5})),
        "reason_50_mb": entry(state(**{**quiet, "last_reason": FIFTY_MB})),
    }
    return rows


def damaged_queue(good: dict[str, Any]) -> list[Any]:
    sound = good["queues"]["pd"][0]

    def changed(**values: Any) -> dict[str, Any]:
        return {**sound, **values}

    missing = dict(sound)
    del missing["severity"]
    return [
        "a notification that is a string",
        missing,
        changed(kind="meteor"),
        changed(id=-5),
        changed(observations={"latency": "fast"}),
        # A resolve under another check's dedup key would close the wrong incident.
        changed(event="resolved", dedup_key="alivemcp/api"),
        sound,  # the one sound notification is still delivered
    ]


RECEIVER_DAMAGE: dict[str, Any] = {
    "member_of_a_list": {"groups": {}, "member_of": ["alivemcp/other"]},
    # "other" claims a group that does not list it: its resolve could never be sent.
    "groups_disagree": {
        "groups": {"alivemcp/group/1": ["alivemcp/x", "alivemcp/y"]},
        "member_of": {
            "alivemcp/other": "alivemcp/group/1",
            "alivemcp/x": "alivemcp/group/1",
            "alivemcp/y": "alivemcp/group/1",
        },
    },
}


@pytest.mark.parametrize("receiver_damage", sorted(RECEIVER_DAMAGE))
def test_damaged_entries_are_dropped_alone(
    receiver_damage: str, tmp_path: Path, pd: StandIn, saved_state: dict[str, Any]
) -> None:
    rows = damaged_checks(saved_state)
    doc = copy.deepcopy(saved_state)
    doc["checks"].update(rows)
    doc["queues"]["pd"] = damaged_queue(saved_state)
    doc["queues"]["gone"] = {"not": "a list"}
    doc["receivers"]["pd"] = RECEIVER_DAMAGE[receiver_damage]
    data = tmp_path / "data"
    data.mkdir()
    text = json.dumps(doc)
    assert len(text) > 50 * 1024 * 1024
    (data / STATE_FILE).write_text(text)

    config = daemon_config(tmp_path, pd, ["other", *rows], down=set(rows))
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.get("/healthz")[0] == 200, what="healthy")
        # Every damaged check pages as a fresh one would.
        pd.wait_for(
            lambda: all(f"alivemcp/{name}" in per_key(pd.events()) for name in rows),
            timeout=60,
            what="every damaged check paged",
        )
        # "other" was restored: its queued trigger is delivered, and because the restored
        # state knows it was notified, its recovery resolves it.
        pd.wait_for(
            lambda: per_key(pd.events()).get("alivemcp/other") == ["trigger", "resolve"],
            what="other triggered from the queue, then resolved",
        )
        assert metric(d, "alivemcp_alert_state_entries_dropped_total", section="checks") == len(
            rows
        )
        assert metric(d, "alivemcp_alert_state_entries_dropped_total", section="notifications") == 7
        assert metric(d, "alivemcp_alert_state_entries_dropped_total", section="receivers") == 1
        assert all(
            metric(d, "alivemcp_alert_state_discarded_total", reason=r) == 0.0
            for r in ("not_json", "bad_shape", "too_large")
        )
        assert d.stop() == 0
        dropped = log_events(
            d, "dropped a damaged entry of the saved alert state; the rest is kept"
        )
        exceptions = [line for line in d.logs().splitlines() if "Traceback" in line]
    assert sorted(e["check"] for e in dropped if e["section"] == "checks") == sorted(rows)
    assert [e["receiver"] for e in dropped if e["section"] == "receivers"] == ["pd"]
    assert FIFTY_MB[:100] not in json.dumps(dropped)  # where and why, never the value
    assert exceptions == []
    events = per_key(pd.events())
    assert all(events[f"alivemcp/{name}"] == ["trigger"] for name in rows), events
    assert "resolve" not in events.get("alivemcp/api", [])
    assert_new_state_is_sound(data)
    assert not [p for p in data.iterdir() if ".corrupt-" in p.name]


def test_wrong_typed_streak_keeps_paging_after_a_recovery(
    tmp_path: Path, pd: StandIn, saved_state: dict[str, Any]
) -> None:
    """The reported case: ``fail_streak: "3"`` kept the daemon up but that check never paged
    again. Dropped, the check pages, recovers, and pages again on the next failure."""
    doc = copy.deepcopy(saved_state)
    doc["checks"]["api"] = copy.deepcopy(doc["checks"]["other"])
    doc["checks"]["api"]["state"]["fail_streak"] = "3"
    data = tmp_path / "data"
    data.mkdir()
    (data / STATE_FILE).write_text(json.dumps(doc))
    config = daemon_config(tmp_path, pd, ["api", "other"], down={"api", "other"})
    api = tmp_path / "api.state"
    with DaemonProcess(config) as d:
        pd.wait_for(
            lambda: per_key(pd.events()).get("alivemcp/api") == ["trigger"], what="first page"
        )
        set_state(api, "up")
        pd.wait_for(
            lambda: per_key(pd.events()).get("alivemcp/api") == ["trigger", "resolve"],
            what="resolve",
        )
        set_state(api, "down")
        pd.wait_for(
            lambda: per_key(pd.events()).get("alivemcp/api") == ["trigger", "resolve", "trigger"],
            what="second page",
        )
        assert d.stop() == 0
