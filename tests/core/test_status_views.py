"""/status views: the brief list a large status page paints from, and rows by name."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.support import DaemonProcess, write_daemon_config

NAMES = ["team/a", "team b/100%", "ünï/c?d#e", "plain"]


def test_brief_view_and_rows_by_name(tmp_path: Path) -> None:
    checks = [
        {
            "name": n,
            "probe": "test_static",
            "interval": "1s",
            "params": {
                "status": "down" if n == "plain" else "up",
                "observations": {"x_seconds": 1.5},
            },
        }
        for n in NAMES
    ]
    config = write_daemon_config(tmp_path / "c.yaml", checks)
    with DaemonProcess(config) as daemon:
        daemon.wait_for(
            # Every configured check listed (the daemon answers before its config is applied:
            # an empty list is not "every check run") and none pending.
            lambda: (
                (rows := daemon.get_json("/status")["checks"])
                and len(rows) == len(NAMES)
                and all(r["status"] != "pending" for r in rows)
            ),
            what="every check run",
        )
        full = daemon.get_json("/status")
        brief = daemon.get_json("/status?view=brief")
        assert (
            brief["summary"]
            == full["summary"]
            == {"up": 3, "degraded": 0, "down": 1, "unknown": 0, "pending": 0}
        )
        row = {r["check"]: r for r in brief["checks"]}["plain"]
        # The brief row has what a list row shows, and none of the heavy parts.
        assert row["status"] == "down" and row["reason"] and row["since"] and row["last_run"]
        assert not {"observations", "history", "details"} & set(row)
        assert {"observations", "history"} <= set(full["checks"][0])

        query = "&".join("check=" + urllib.parse.quote(n, safe="") for n in NAMES[1:3])
        some = daemon.get_json(f"/status?{query}&check=no-such-check")
        assert [r["check"] for r in some["checks"]] == NAMES[1:3]
        assert some["checks"][0]["observations"] == {"x_seconds": 1.5}
        assert some["checks"][0]["history"], "recent runs of a named row"
        assert some["summary"] == full["summary"], "the summary still covers every check"

        status, body = daemon.get("/status?view=everything")
        assert status == 400 and "view must be full or brief" in body
        status, body = daemon.get("/status?" + "&".join(["check=x"] * 501))
        assert status == 400 and "at most 500" in body
