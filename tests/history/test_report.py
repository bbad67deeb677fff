"""``alivemcp report`` on real history files: written by the real HistoryWriter from a known
schedule (exact figures), and by a real daemon run (figures equal the runs it reported)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from alivemcp.cli import report
from alivemcp.cli.report import ReportError, build_report, parse_instant, plan_period
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.history.config import Retention
from alivemcp.history.schema import FILE_NAME
from alivemcp.history.writer import HistoryWriter
from alivemcp.probe import Status
from tests.support import REPO, DaemonProcess, subprocess_env, write_daemon_config

MIN, HOUR, DAY = 60, 3600, 86400
NOW = time.time()
#: Midnight UTC five days ago: inside the default hour retention (7d), past the minute one.
D0 = int(NOW) // DAY * DAY - 5 * DAY
PERIOD = (float(D0), float(D0 + 2 * DAY))
GAMMA = "edge|case *name*"


def alpha(t: int) -> tuple[Status, str]:
    """An incident across the period's start, a 1h02m outage, a 5 min degradation, three
    undecided runs, and an incident across the period's end."""
    if D0 - 30 * MIN <= t < D0 + 15 * MIN:
        return Status.DOWN, "connection refused"
    if D0 + 3 * HOUR <= t < D0 + 4 * HOUR + 2 * MIN:
        return Status.DOWN, "HTTP 503"
    if D0 + 10 * HOUR <= t < D0 + 10 * HOUR + 5 * MIN:
        return Status.DEGRADED, "slow: 2.1 s"
    if D0 + 20 * HOUR <= t < D0 + 20 * HOUR + 3 * MIN:
        return Status.UNKNOWN, "prober out of sockets"
    if D0 + 2 * DAY - 10 * MIN <= t < D0 + 2 * DAY + 20 * MIN:
        return Status.DOWN, "timeout"
    return Status.UP, "ok"


def gamma(t: int) -> tuple[Status, str]:
    """Down for the period's last hour and never back."""
    return (Status.DOWN, "DNS failure") if t >= D0 + 2 * DAY - HOUR else (Status.UP, "ok")


def write_history(path: Path, runs: list[tuple[str, Status, float, str]]) -> None:
    """Through the real writer thread, into a real SQLite file."""
    writer = HistoryWriter(path, Retention())
    writer.start()
    for name, status, started, reason in runs:
        writer.observe(
            CheckResult(
                check=CheckInfo(name, "test_static"),
                status=status,
                reason=reason,
                duration_seconds=0.05,
                started_at=started,
                finished_at=started + 0.05,
            )
        )
    marker = writer.marker()
    deadline = time.monotonic() + 60
    while not writer.reached(marker):
        assert time.monotonic() < deadline, "history writer did not finish"
        time.sleep(0.01)
    writer.stop(10)
    assert writer.stats.ok and writer.stats.dropped_results == 0
    assert writer.stats.committed_results == len(runs)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs every minute from an hour before the period to an hour after it."""
    path = tmp_path_factory.mktemp("report") / FILE_NAME
    runs: list[tuple[str, Status, float, str]] = []
    for t in range(D0 - HOUR, D0 + 2 * DAY + HOUR, MIN):
        for name, status, reason in (
            ("api/alpha", *alpha(t)),
            ("beta", Status.UP, "ok"),
            (GAMMA, *gamma(t)),
        ):
            runs.append((name, status, float(t), reason))
    for t in range(D0 - 2 * DAY, D0 - DAY, 10 * MIN):  # only before the period
        runs.append(("old", Status.UP, float(t), "ok"))
    write_history(path, runs)
    return path


# The period is two whole UTC days: hour buckets (the default retention covers it) and day
# buckets (a one-day hour retention does not) must give the same, exact figures.
@pytest.mark.parametrize("retention", [Retention(), Retention(hour=DAY)], ids=["hour", "day"])
def test_figures_match_the_schedule_exactly(history: Path, retention: Retention) -> None:
    rows = build_report(history, *PERIOD, retention=retention, now=NOW)
    assert [r["check"] for r in rows] == ["api/alpha", GAMMA, "beta"]  # worst uptime first
    a, g, b = rows

    # 2880 runs in the two days: 15 + 62 + 10 down, 5 degraded, 3 unknown (excluded).
    assert (a["runs_up"], a["runs_degraded"], a["runs_down"], a["runs_unknown"]) == (2785, 5, 87, 3)
    assert a["up_ratio"] == 2785 / 2877 and a["available_ratio"] == 2790 / 2877
    assert (a["counted_from"], a["counted_until"]) == (D0, D0 + 2 * DAY)
    assert a["incidents"] == 4 and a["incidents_resolved"] == 3
    # Clipped to the period: 15 min of the first (45 min) incident, 10 of the last (30 min).
    assert a["downtime_seconds"] == 900 + 3720 + 300 + 600
    assert a["mttr_seconds"] == (2700 + 3720 + 300) / 3  # incidents that ended in the period
    assert (
        a["longest_incident_started_at"],
        a["longest_incident_ended_at"],
        a["longest_incident_duration_seconds"],
        a["longest_incident_worst_status"],
        a["longest_incident_first_reason"],
    ) == (D0 + 3 * HOUR, D0 + 4 * HOUR + 2 * MIN, 3720, "down", "HTTP 503")
    # Still down at the period's end (it recovered 20 minutes later).
    assert (
        a["open_incident_started_at"],
        a["open_incident_worst_status"],
        a["open_incident_last_reason"],
    ) == (D0 + 2 * DAY - 10 * MIN, "down", "timeout")

    assert (g["runs_up"], g["runs_down"], g["up_ratio"]) == (2820, 60, 2820 / 2880)
    assert g["downtime_seconds"] == 3600 and g["incidents"] == 1
    assert g["mttr_seconds"] is None and g["incidents_resolved"] == 0
    # Open now: its whole duration runs to now, its downtime only to the period's end.
    assert g["longest_incident_duration_seconds"] == round(NOW - (D0 + 2 * DAY - HOUR), 3)
    assert g["longest_incident_ended_at"] is None
    assert g["open_incident_last_reason"] == "DNS failure"

    assert (b["runs_up"], b["up_ratio"], b["available_ratio"]) == (2880, 1.0, 1.0)
    assert (b["incidents"], b["downtime_seconds"], b["mttr_seconds"]) == (0, 0, None)
    assert b["longest_incident_started_at"] is None and b["open_incident_started_at"] is None


def test_partial_hours_are_counted_whole_and_incidents_exactly(history: Path) -> None:
    since, until = D0 + 2 * HOUR + 30 * MIN, D0 + 5 * HOUR
    period = plan_period(since, until, Retention(), NOW)
    assert (period.table, period.counted_from, period.counted_until) == (
        "hour",
        D0 + 2 * HOUR,
        D0 + 5 * HOUR,
    )
    assert any("whole hour buckets" in note for note in period.notes)
    (a,) = build_report(history, since, until, ["api/alpha"], now=NOW)
    assert (a["runs_up"], a["runs_down"]) == (180 - 62, 62)
    assert (a["incidents"], a["downtime_seconds"], a["mttr_seconds"]) == (1, 3720, 3720)
    assert a["open_incident_started_at"] is None


def test_checks_named_or_not(history: Path) -> None:
    # Not named: a check with nothing in the period is left out.
    assert "old" not in {r["check"] for r in build_report(history, *PERIOD, now=NOW)}
    # Named: shown with empty figures, ranked after every check with an uptime.
    rows = build_report(history, *PERIOD, ["old", "beta"], now=NOW)
    assert [r["check"] for r in rows] == ["beta", "old"]
    assert (rows[1]["up_ratio"], rows[1]["runs_up"], rows[1]["incidents"]) == (None, 0, 0)
    with pytest.raises(ReportError, match=r"no history for check.*'nope'"):
        build_report(history, *PERIOD, ["nope"], now=NOW)


def test_resolution_is_the_finest_whose_retention_covers_since() -> None:
    r = Retention()  # minute 2h, hour 7d, day 90d
    now = 1_800_000_000.0
    assert plan_period(now - HOUR, now, r, now).table == "minute"
    assert plan_period(now - 3 * HOUR, now, r, now).table == "hour"
    assert plan_period(now - 30 * DAY, now, r, now).table == "day"
    too_old = plan_period(now - 120 * DAY, now, r, now)
    assert too_old.table == "day"
    assert any("history.retention.day" in n for n in too_old.notes)
    assert any("history.retention.incidents" in n for n in too_old.notes)
    with pytest.raises(ReportError, match=r"--since \(.*\) must be before --until"):
        plan_period(now, now, r, now)


def test_since_and_until_forms() -> None:
    now = 1_800_000_000.0
    assert parse_instant("30d", now) == now - 30 * DAY
    assert parse_instant("12h", now) == now - 12 * HOUR
    assert parse_instant("2026-11-01", now) == 1_793_491_200  # midnight UTC
    assert parse_instant("2026-11-01T09:30:00Z", now) == 1_793_491_200 + 9.5 * HOUR
    assert parse_instant("2026-11-01T09:30:00", now) == 1_793_491_200 + 9.5 * HOUR  # UTC
    assert parse_instant("2026-11-01T09:30:00+01:00", now) == 1_793_491_200 + 8.5 * HOUR
    assert parse_instant("1793491200", now) == 1_793_491_200
    with pytest.raises(ReportError, match="needs a unit"):
        parse_instant("30", now)
    with pytest.raises(ReportError, match="--until 'last tuesday' is not a duration"):
        parse_instant("last tuesday", now, "--until")
    with pytest.raises(ReportError, match="longest duration"):
        parse_instant("400d", now)


def test_human_figures() -> None:
    assert [report.format_duration(s) for s in (0, 45, 725, 3720, 3779, 2 * DAY + 4 * HOUR)] == [
        "0s",
        "45s",
        "12m 05s",
        "1h 02m",
        "1h 02m",
        "2d 04h",
    ]
    # Truncated, never rounded up: 100% only when nothing failed.
    assert [report.format_ratio(x) for x in (1.0, 0.999999, 2785 / 2877, None)] == [
        "100%",
        "99.999%",
        "96.802%",
        "n/a",
    ]


def _config(tmp_path: Path, history: Path) -> Path:
    return write_daemon_config(tmp_path / "c.yaml", [], data_dir=str(history.parent))


def _run(config: Path, *args: Any, **kwargs: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = report.main(config, *args, out=out, now=NOW, **kwargs)
    return code, out.getvalue()


def test_markdown(history: Path, tmp_path: Path) -> None:
    code, text = _run(_config(tmp_path, history), str(PERIOD[0]), str(PERIOD[1]), "markdown")
    assert code == 0
    day = time.strftime("%Y-%m-%d", time.gmtime(D0))
    lines = text.splitlines()
    assert lines[0].startswith(f"## Uptime report: {day} 00:00 to ")
    assert lines[2] == (
        "**3 checks · 5 incidents on 2 checks · 2h 32m downtime in all · lowest "
        "uptime 96.802% (api/alpha) · 2 open at the end**"
    )
    table = [line for line in lines if line.startswith("|")]
    assert [c.strip() for c in table[0].split("|")[1:-1]] == [
        "Check",
        "Up",
        "Available",
        "Incidents",
        "Downtime",
        "MTTR",
        "Longest incident",
    ]
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    assert cells == [
        "api/alpha",
        "96.802%",
        "96.976%",
        "4",
        "1h 32m",
        "37m 20s",
        f"1h 02m down, {day} 03:00",
    ]
    # The name with a pipe and stars is escaped: one cell, literal text.
    cells = [c.strip() for c in table[3].replace("\\|", "\0").split("|")[1:-1]]
    assert cells[0] == "edge\0case \\*name\\*" and cells[1] == "97.916%"
    assert len({len(line) for line in table}) == 1  # columns line up as plain text
    assert f"- api/alpha: 1h 02m down from {day} 03:00 UTC: HTTP 503" in lines
    assert "unknown: 3 here" in text
    assert "**Open at the end of the period**" in lines

    # A period ending now lists what is open now: only gamma (alpha recovered after the end).
    code, text = _run(_config(tmp_path, history), str(PERIOD[0]))
    lines = text.splitlines()
    opened = lines.index("**Open now**")
    last_day = time.strftime("%Y-%m-%d", time.gmtime(D0 + DAY))
    assert lines[opened + 1 : opened + 3] == [
        rf"- edge\|case \*name\*: down since {last_day} 23:00 UTC: DNS failure",
        "",
    ]


def test_csv_and_json_share_stable_fields(history: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, history)
    out = tmp_path / "report.csv"
    assert report.main(config, str(PERIOD[0]), str(PERIOD[1]), "csv", out, now=NOW) == 0
    header = out.read_text().splitlines()[0]
    assert header == (
        "check,probe,period_start,period_end,counted_from,counted_until,up_ratio,"
        "available_ratio,runs_up,runs_degraded,runs_down,runs_unknown,incidents,"
        "incidents_resolved,downtime_seconds,mttr_seconds,longest_incident_started_at,"
        "longest_incident_ended_at,longest_incident_duration_seconds,"
        "longest_incident_worst_status,"
        "longest_incident_first_reason,open_incident_started_at,open_incident_worst_status,"
        "open_incident_last_reason"
    )
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert rows[0]["check"] == "api/alpha" and rows[1]["check"] == GAMMA
    assert float(rows[0]["downtime_seconds"]) == 5520
    assert float(rows[0]["up_ratio"]) == 2785 / 2877  # raw, full precision
    assert rows[2]["mttr_seconds"] == ""  # beta had no incident

    code, text = _run(config, str(PERIOD[0]), str(PERIOD[1]), "json")
    doc = json.loads(text)
    assert code == 0 and list(doc["checks"][0]) == header.split(",")
    assert doc["period"] == {
        "since": PERIOD[0],
        "until": PERIOD[1],
        "counted_from": D0,
        "counted_until": D0 + 2 * DAY,
        "resolution_seconds": HOUR,
    }
    assert doc["checks"][0]["downtime_seconds"] == 5520
    assert [c["check"] for c in doc["checks"]] == [r["check"] for r in rows]


def test_usage_errors_are_clear(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, history)
    assert _run(config, "2026-12-01", "2026-11-01")[0] == 2
    assert capsys.readouterr().err.strip() == (
        "alivemcp report: --since (2026-12-01 00:00) must be before --until (2026-11-01 00:00)"
    )
    assert _run(config, "yesterday")[0] == 2
    assert "--since 'yesterday' is not a duration" in capsys.readouterr().err

    empty = write_daemon_config(tmp_path / "empty.yaml", [])  # data_dir without history
    assert _run(empty, "30d")[0] == 1
    assert (
        capsys.readouterr().err.strip()
        == f"alivemcp report: no history database at {tmp_path / 'data' / FILE_NAME}"
    )

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / FILE_NAME).write_bytes(b"not a database" * 100)
    assert _run(write_daemon_config(bad / "c.yaml", [], data_dir=str(bad)), "30d")[0] == 1
    err = capsys.readouterr().err
    assert f"cannot read the history database {bad / FILE_NAME}" in err


def test_report_without_the_configs_secrets(
    history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from cron or CI without the daemon's secrets: only data_dir and history matter."""
    monkeypatch.delenv("REPORT_TEST_TOKEN", raising=False)
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [{"name": "x", "probe": "test_static", "params": {"reason": "${REPORT_TEST_TOKEN}"}}],
        data_dir=str(history.parent),
    )
    code, text = _run(config, str(PERIOD[0]), str(PERIOD[1]), "json")
    assert code == 0 and len(json.loads(text)["checks"]) == 3


# -- end to end: a real daemon writes, the report reads -----------------------------------------


def test_report_of_a_real_daemon_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("up\n")
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [
            {
                "name": "svc/flaky",
                "probe": "test_file",
                "interval": 1,
                "params": {"path": str(state)},
            },
        ],
    )
    with DaemonProcess(config) as daemon:

        def runs() -> list[list[Any]]:
            return list(daemon.status_of("svc/flaky").get("history", []))

        daemon.wait_for(lambda: len(runs()) >= 3, what="three up runs")
        state.write_text("down\nconnection refused\n")
        daemon.wait_for(lambda: [r[2] for r in runs()].count("down") >= 3, what="3 down runs")
        state.write_text("up\n")
        daemon.wait_for(lambda: runs()[-1][2] == "up", what="up again")
        seen = runs()
        assert len(seen) < 20  # every run so far is in /status (it keeps the last 20)

        # While the daemon writes: the read-only report through the module's own entry point.
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "alivemcp.cli.report",
                "--config",
                str(config),
                "--since",
                "1h",
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            cwd=REPO,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        (live,) = json.loads(proc.stdout)["checks"]
        assert live["check"] == "svc/flaky" and live["incidents"] == 1
        last_seen = runs()
        assert len(last_seen) < 20
    out = io.StringIO()
    assert report.main(config, "1h", None, "json", out) == 0
    doc = json.loads(out.getvalue())
    assert doc["period"]["resolution_seconds"] == 60
    (row,) = doc["checks"]

    statuses = [r[2] for r in seen]
    first_down = statuses.index("down")
    recovered = first_down + statuses[first_down:].index("up")
    # Exactly the runs the daemon reported (one more up run may start before it stops).
    assert row["runs_down"] == statuses.count("down") == recovered - first_down
    ups = [r[2] for r in last_seen].count("up")
    assert ups <= row["runs_up"] <= ups + 1
    assert row["runs_degraded"] == row["runs_unknown"] == 0
    assert row["up_ratio"] == row["runs_up"] / (row["runs_up"] + row["runs_down"])
    assert (row["incidents"], row["incidents_resolved"]) == (1, 1)
    assert row["longest_incident_started_at"] == pytest.approx(seen[first_down][0], abs=1e-3)
    assert row["longest_incident_ended_at"] == pytest.approx(seen[recovered][0], abs=1e-3)
    duration = seen[recovered][0] - seen[first_down][0]
    assert (
        row["downtime_seconds"]
        == row["mttr_seconds"]
        == row["longest_incident_duration_seconds"]
        == pytest.approx(duration, abs=2e-3)
    )
    assert (row["longest_incident_worst_status"], row["longest_incident_first_reason"]) == (
        "down",
        "connection refused",
    )
    assert row["open_incident_started_at"] is None

    text = io.StringIO()
    assert report.main(config, "1h", None, "markdown", text) == 0
    assert "**1 check · 1 incident on 1 check · " in text.getvalue()
    assert "| svc/flaky " in text.getvalue()


@pytest.mark.parametrize(
    "text",
    [
        "30d",
        "90m",
        " 12h ",
        "250ms",
        "2026-11-01",
        "2026-11-01T09:30:00",
        "2026-11-01T09:30:00+01:00",
        "1793491200",
        "1793491200.5",
        "30",
        "0",
        "-5",
        "400d",
        "yesterday",
        "",
        "2026-13-01",
        "nan",
        "inf",
    ],
)
def test_the_api_and_the_report_read_a_moment_by_one_rule(text: str) -> None:
    """``since`` in the history API and ``--since``/``--until`` here are one parser: the same
    text is the same moment, or refused by both."""
    from alivemcp.web.api import parse_since

    now = 1_800_000_000.0
    try:
        expected: float | None = parse_instant(text, now)
    except ReportError:
        expected = None
    try:
        got: float | None = parse_since(text, now)
    except Exception as exc:  # the API's 400, naming its parameter
        assert str(exc).startswith("since: "), exc
        got = None
    assert got == expected, text
