"""``alivemcp report``: the SLA report of a period, per check, from the history database.

What the figures mean (the same rules as the API and the status page):

- **Period**: ``[since, until)``. ``--since``/``--until`` take a duration meaning "that long
  before now" (``30d``, ``12h``), a date (``2026-11-01``: midnight UTC, so
  ``--since 2026-11-01 --until 2026-12-01`` is the month of November), an ISO-8601 datetime
  (``2026-11-01T09:30:00+01:00``; without an offset it is UTC) or unix seconds. ``until``
  defaults to now. All times shown are UTC.
- **Uptime** (``up_ratio``) is the share of *decided* runs (up, degraded, down) that were up;
  ``available_ratio`` counts degraded runs as available too. ``unknown`` runs (the prober
  itself could not decide) are excluded from both and counted apart; both ratios are empty
  when there was no decided run.
- **Run counts and uptime** come from whole buckets of the finest resolution whose
  retention (``history.retention``) still covers ``since``: minutes, else hours, else days.
  The counted range is ``counted_from``-``counted_until``, the period widened to the edges of
  the buckets it touches (equal to the period when both ends fall on bucket edges, as dates
  do with day buckets).
- **Incident**: a stretch of degraded or down runs, from the first such run's start to the
  start of the next up run (``unknown`` runs neither open nor close one). An incident still
  open is counted up to now.
- **Downtime** (``downtime_seconds``): the time of every incident clipped to the period, so
  an incident that began last month counts only its part in this one. Degraded stretches
  count too (an incident's ``worst_status`` says whether it went down).
- ``incidents``: incidents overlapping the period. **MTTR** (``mttr_seconds``): the mean
  whole duration of the ``incidents_resolved`` incidents that ended within the period.
- **Longest incident**: the overlapping incident of longest whole duration (the part outside
  the period included), with its start, worst status and first reason.
- **Open incident**: one not ended by the end of the period (for a period ending now: open
  now), with its start, worst status so far and latest reason.

The database is opened read-only: a report can run while the daemon writes (it sees every
batch committed so far, i.e. results older than about a second).

Exit codes of :func:`main`: 0 written, 1 the history cannot be read, 2 a usage or config error.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from alivemcp import durations
from alivemcp.config import ConfigError, load_config
from alivemcp.history import queries, schema
from alivemcp.history.config import Retention

__all__ = [
    "COLUMNS",
    "FORMATS",
    "Period",
    "ReportError",
    "add_arguments",
    "build_report",
    "format_duration",
    "main",
    "parse_instant",
    "plan_period",
    "to_csv",
    "to_json",
    "to_markdown",
]

FORMATS = ("markdown", "csv", "json")
EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE = 0, 1, 2

#: The fields of every per-check row, in order: CSV columns and JSON keys. Times are unix
#: seconds, durations seconds, ratios 0..1; empty (null) when there is nothing to say.
COLUMNS = (
    "check",
    "probe",
    "period_start",
    "period_end",
    "counted_from",
    "counted_until",
    "up_ratio",
    "available_ratio",
    "runs_up",
    "runs_degraded",
    "runs_down",
    "runs_unknown",
    "incidents",
    "incidents_resolved",
    "downtime_seconds",
    "mttr_seconds",
    "longest_incident_started_at",
    "longest_incident_ended_at",
    "longest_incident_duration_seconds",
    "longest_incident_worst_status",
    "longest_incident_first_reason",
    "open_incident_started_at",
    "open_incident_worst_status",
    "open_incident_last_reason",
)

#: Bucket tables from finest to coarsest, with the retention field that bounds each.
_TABLES = ("minute", "hour", "day")


class ReportError(Exception):
    """Something the user can fix; the message says what (and names the path or value)."""


# -- the period ---------------------------------------------------------------------------------


def parse_instant(text: str, now: float, option: str = "--since") -> float:
    """Unix time of a ``--since``/``--until`` value (:func:`alivemcp.durations.parse_instant`,
    the rule the API's ``since`` follows too)."""
    try:
        return durations.parse_instant(text, now)
    except ValueError as exc:
        raise ReportError(f"{option} {exc}") from None


@dataclass(frozen=True, slots=True)
class Period:
    """The period asked for and the buckets that answer it."""

    since: float
    until: float
    #: "minute", "hour" or "day": the table run counts are read from.
    table: str
    counted_from: int
    counted_until: int
    #: Caveats a reader must see (history older than retention, widened bucket range).
    notes: tuple[str, ...] = ()

    @property
    def resolution_seconds(self) -> int:
        return schema.RESOLUTIONS[self.table]


def plan_period(since: float, until: float, retention: Retention, now: float) -> Period:
    """Choose the finest table whose retention covers ``since``; say what that implies."""
    if since >= until:
        raise ReportError(f"--since ({_when(since)}) must be before --until ({_when(until)})")
    table = next((t for t in _TABLES if since >= now - getattr(retention, t)), "day")
    width = schema.RESOLUTIONS[table]
    counted_from = int(since) // width * width
    counted_until = math.ceil(until / width) * width
    notes = []
    if since < now - retention.day:
        notes.append(
            f"history before {_when(now - retention.day)} is past its retention "
            f"(history.retention.day, {format_duration(retention.day)}): run counts "
            "cover less than the period"
        )
    if since < now - retention.incidents:
        notes.append(
            f"incidents ended before {_when(now - retention.incidents)} are past their "
            f"retention (history.retention.incidents, "
            f"{format_duration(retention.incidents)})"
        )
    if counted_from != since or counted_until != until:
        notes.append(
            f"run counts and uptime use whole {table} buckets: {_when(counted_from)} "
            f"to {_when(counted_until)}; incidents and downtime are exact to the period"
        )
    return Period(since, until, table, counted_from, counted_until, tuple(notes))


# -- the rows -----------------------------------------------------------------------------------


def build_report(
    db_path: str | Path,
    since: float,
    until: float,
    names: Iterable[str] | None = None,
    *,
    retention: Retention | None = None,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """One row per check (keys :data:`COLUMNS`), worst uptime first.

    Without ``names``: every check with runs or incidents in the period. With ``names``: those
    checks, even when they have nothing in the period; a name with no history is an error.
    """
    now = time.time() if now is None else now
    period = plan_period(since, until, retention or Retention(), now)
    return collect_rows(Path(db_path), period, names, now)


def collect_rows(
    db_path: Path, period: Period, names: Iterable[str] | None, now: float
) -> list[dict[str, Any]]:
    """:func:`build_report` for a period already planned (the CLI shows its notes too)."""
    db = _open(db_path)
    try:
        known = queries.known_checks(db)
        if names is None:
            wanted = sorted(known)
        else:
            wanted = list(dict.fromkeys(names))
            missing = [n for n in wanted if n not in known]
            if missing:
                raise ReportError(
                    f"no history for check(s) {', '.join(map(repr, missing))} in {db_path}"
                )
        by_check = _incidents_by_check(db, period)
        totals = _bucket_totals(
            db, period, None if names is None else [known[name][0] for name in wanted]
        )
        rows = []
        for name in wanted:
            cid, probe = known[name]
            counts = totals.get(cid, (0, 0, 0, 0))
            found = by_check.get(cid, [])
            if names is None and not any(counts) and not found:
                continue  # nothing in this period (e.g. removed from the config before it)
            rows.append(_row(name, probe, period, counts, found, now))
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"cannot read the history database {db_path}: {exc}") from None
    finally:
        db.close()
    rows.sort(key=_worst_first)
    return rows


def _open(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise ReportError(f"no history database at {path}")
    try:
        db = schema.connect(path, readonly=True)
        version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise ReportError(f"cannot read the history database {path}: {exc}") from None
    if version != schema.SCHEMA_VERSION:
        db.close()
        raise ReportError(
            f"{path} is not a history database this alivemcp reads (schema "
            f"version {version}, expected {schema.SCHEMA_VERSION})"
        )
    return db


def _bucket_totals(
    db: sqlite3.Connection, period: Period, ids: Sequence[int] | None
) -> dict[int, queries.Counts]:
    """check id → run counts of the counted range, summed by SQLite (50,000 checks x 31 days
    in about a second; decoding latency summaries in Python would take several)."""
    sql = (
        f"SELECT check_id, SUM(up), SUM(degraded), SUM(down), SUM(unknown) "
        f"FROM {period.table} WHERE bucket >= ? AND bucket < ? "
    )
    span = (period.counted_from, period.counted_until)
    if ids is None:  # every check: one pass over the table in key order
        found = db.execute(sql + "GROUP BY check_id", span).fetchall()
    else:
        found = [
            db.execute(sql + "AND check_id = ? GROUP BY check_id", (*span, cid)).fetchone()
            for cid in ids
        ]
    return {row[0]: tuple(row[1:5]) for row in found if row is not None}


_Incident = tuple[float, float | None, str, str, str]  # started, ended, worst, first, last


def _incidents_by_check(db: sqlite3.Connection, period: Period) -> dict[int, list[_Incident]]:
    """Incidents with time inside the period, oldest first, per check id (one query)."""
    out: dict[int, list[_Incident]] = {}
    for cid, *incident in db.execute(
        "SELECT check_id, started_at, ended_at, worst, first_reason, last_reason FROM incidents "
        "WHERE started_at < ? AND COALESCE(ended_at, 9e18) > ? ORDER BY started_at",
        (period.until, period.since),
    ):
        out.setdefault(cid, []).append(tuple(incident))
    return out


def _row(
    name: str,
    probe: str,
    period: Period,
    counts: queries.Counts,
    found: Sequence[_Incident],
    now: float,
) -> dict[str, Any]:
    up, degraded, down, unknown = counts
    up_ratio, available_ratio = queries.ratios(up, degraded, down)
    # An open incident lasts until now; the period's share of it ends with the period.
    downtime = sum(
        max(0.0, min(now if ended is None else ended, period.until) - max(started, period.since))
        for started, ended, *_ in found
    )
    resolved = [
        ended - started
        for started, ended, *_ in found
        if ended is not None and period.since <= ended < period.until
    ]
    longest = max(found, key=lambda i: (i[1] if i[1] is not None else now) - i[0], default=None)
    still_open = next((i for i in reversed(found) if i[1] is None or i[1] >= period.until), None)
    row: dict[str, Any] = {
        "check": name,
        "probe": probe,
        "period_start": round(period.since, 3),
        "period_end": round(period.until, 3),
        "counted_from": period.counted_from,
        "counted_until": period.counted_until,
        "up_ratio": up_ratio,
        "available_ratio": available_ratio,
        "runs_up": up,
        "runs_degraded": degraded,
        "runs_down": down,
        "runs_unknown": unknown,
        "incidents": len(found),
        "incidents_resolved": len(resolved),
        "downtime_seconds": round(downtime, 3),
        "mttr_seconds": round(sum(resolved) / len(resolved), 3) if resolved else None,
        "longest_incident_started_at": None,
        "longest_incident_ended_at": None,
        "longest_incident_duration_seconds": None,
        "longest_incident_worst_status": None,
        "longest_incident_first_reason": None,
        "open_incident_started_at": None,
        "open_incident_worst_status": None,
        "open_incident_last_reason": None,
    }
    if longest is not None:
        started, ended, worst, first, _ = longest
        row.update(
            {
                "longest_incident_started_at": started,
                "longest_incident_ended_at": ended,
                "longest_incident_duration_seconds": round(
                    (ended if ended is not None else now) - started, 3
                ),
                "longest_incident_worst_status": worst,
                "longest_incident_first_reason": first,
            }
        )
    if still_open is not None:
        started, _, worst, _, last = still_open
        row.update(
            {
                "open_incident_started_at": started,
                "open_incident_worst_status": worst,
                "open_incident_last_reason": last,
            }
        )
    return row


def _worst_first(row: dict[str, Any]) -> tuple[Any, ...]:
    # Checks without a decided run go last: there is no uptime to rank them by.
    up, available = row["up_ratio"], row["available_ratio"]
    return (up is None, up or 0.0, available or 0.0, -row["downtime_seconds"], row["check"])


# -- formats ------------------------------------------------------------------------------------


def to_json(rows: Sequence[dict[str, Any]], period: Period, now: float) -> str:
    doc = {
        "generated_at": now,
        "period": {
            "since": round(period.since, 3),
            "until": round(period.until, 3),
            "counted_from": period.counted_from,
            "counted_until": period.counted_until,
            "resolution_seconds": period.resolution_seconds,
        },
        "notes": list(period.notes),
        "checks": [{key: row[key] for key in COLUMNS} for row in rows],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)  # None is written as an empty field
    return buffer.getvalue()


def to_markdown(rows: Sequence[dict[str, Any]], period: Period, now: float) -> str:
    """A report that reads well rendered (wiki) and as plain text (Slack, e-mail): a title,
    one summary line, a table worst uptime first, open and longest incidents, what it means."""
    lines = [
        f"## Uptime report: {_when(period.since)} to {_when(period.until)} UTC",
        "",
        _summary(rows),
        "",
    ]
    if rows:
        lines += _table(
            ["Check", "Up", "Available", "Incidents", "Downtime", "MTTR", "Longest incident"],
            "lrrrrrl",
            [
                [
                    _md(r["check"]),
                    format_ratio(r["up_ratio"]),
                    format_ratio(r["available_ratio"]),
                    str(r["incidents"]),
                    format_duration(r["downtime_seconds"]),
                    format_duration(r["mttr_seconds"]),
                    _longest_cell(r),
                ]
                for r in rows
            ],
        )
        lines.append("")
    still_open = [r for r in rows if r["open_incident_started_at"] is not None]
    if still_open:
        lines.append("**Open now**" if period.until >= now else "**Open at the end of the period**")
        lines += [
            f"- {_md(r['check'])}: {r['open_incident_worst_status']} since "
            f"{_when(r['open_incident_started_at'])} UTC: "
            f"{_md(_clip(r['open_incident_last_reason']))}"
            for r in still_open
        ]
        lines.append("")
    longest = sorted(
        (r for r in rows if r["longest_incident_started_at"] is not None),
        key=lambda r: -r["longest_incident_duration_seconds"],
    )[:5]
    if longest:
        lines.append("**Longest incidents**")
        lines += [
            f"- {_md(r['check'])}: {format_duration(r['longest_incident_duration_seconds'])}"
            f" {r['longest_incident_worst_status']} from "
            f"{_when(r['longest_incident_started_at'])} UTC: "
            f"{_md(_clip(r['longest_incident_first_reason']))}"
            for r in longest
        ]
        lines.append("")
    unknown = sum(r["runs_unknown"] for r in rows)
    lines.append(
        "_Up: share of decided runs that were up; Available: up or degraded. Runs the prober "
        f"could not decide (unknown: {unknown:,} here) are excluded. Downtime: time of "
        "incidents (stretches of degraded or down runs) within the period. MTTR: mean duration "
        "of the incidents that ended in the period._"
    )
    lines += [f"_Note: {_md(note)}._" for note in period.notes]
    lines.append(f"_Generated by alivemcp at {_when(now)} UTC._")
    return "\n".join(lines) + "\n"


def _summary(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "**No check has history in this period.**"
    incidents = sum(r["incidents"] for r in rows)
    affected = sum(1 for r in rows if r["incidents"])
    downtime = sum(r["downtime_seconds"] for r in rows)
    parts = [f"{len(rows)} check{'s' if len(rows) != 1 else ''}"]
    if incidents:
        parts.append(
            f"{incidents} incident{'s' if incidents != 1 else ''} on {affected} "
            f"check{'s' if affected != 1 else ''}"
        )
        parts.append(f"{format_duration(downtime)} downtime in all")
    else:
        parts.append("no incidents")
    worst = rows[0]
    if worst["up_ratio"] is not None:
        parts.append(f"lowest uptime {format_ratio(worst['up_ratio'])} ({_md(worst['check'])})")
    still_open = sum(1 for r in rows if r["open_incident_started_at"] is not None)
    if still_open:
        parts.append(f"{still_open} open at the end")
    return "**" + " · ".join(parts) + "**"


def _longest_cell(row: dict[str, Any]) -> str:
    if row["longest_incident_started_at"] is None:
        return "none"
    return (
        f"{format_duration(row['longest_incident_duration_seconds'])} "
        f"{row['longest_incident_worst_status']}, "
        f"{_when(row['longest_incident_started_at'])}"
    )


def _table(header: list[str], align: str, body: list[list[str]]) -> list[str]:
    """A pipe table padded to column width, so it lines up as plain text too."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *body, strict=True)]
    widths = [max(w, 3) for w in widths]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if a == "r" else c.ljust(w)
                for c, w, a in zip(cells, widths, align, strict=True)
            )
            + " |"
        )

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1))
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return [line(header), rule, *(line(row) for row in body)]


def format_ratio(ratio: float | None) -> str:
    """``0.998712`` → ``99.871%``: truncated, never rounded up, so 100% means no failure."""
    if ratio is None:
        return "n/a"
    if ratio >= 1.0:
        return "100%"
    return f"{math.floor(ratio * 100_000 + 1e-7) / 1000:.3f}%"


def format_duration(seconds: float | None) -> str:
    """Two units, the smaller zero-padded: ``45s``, ``12m 05s``, ``1h 02m``, ``3d 04h``."""
    if seconds is None:
        return "n/a"
    total = round(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _clip(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~])")


def _md(text: str) -> str:
    """Text as literal markdown inside a table cell or list item (one line, escaped)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


# -- command line -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``alivemcp report`` (also used by ``python -m alivemcp.cli.report``)."""
    parser.add_argument("--config", "-c", required=True, type=Path, help="YAML config file")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="read the history in this directory instead of the config's "
        "data_dir (a copy of it, or `alivemcp demo --data-dir`)",
    )
    parser.add_argument(
        "--since",
        default="30d",
        help="start of the period: a duration before now (30d), a date "
        "(2026-11-01, midnight UTC), an ISO datetime or unix seconds "
        "(default 30d)",
    )
    parser.add_argument(
        "--until", default=None, help="end of the period (excluded), same forms (default now)"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="markdown",
        dest="fmt",
        help="markdown (wiki, Slack), csv or json (default markdown)",
    )
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="NAME",
        dest="names",
        help="report only this check (repeatable; default every check with history in the period)",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=None,
        help="write to this file instead of standard output",
    )


def run_from_args(args: argparse.Namespace) -> int:
    return main(
        args.config,
        args.since,
        args.until,
        args.fmt,
        args.output,
        names=args.names or None,
        data_dir=args.data_dir,
    )


def main(
    config_path: str | Path,
    since: str,
    until: str | None = None,
    fmt: str = "markdown",
    out: TextIO | str | Path | None = None,
    *,
    names: Sequence[str] | None = None,
    now: float | None = None,
    data_dir: str | Path | None = None,
) -> int:
    """Load the config (for data_dir and retention), build the report, write it to ``out``
    (a stream, a file path, or standard output when None). ``data_dir`` replaces the
    config's."""
    now = time.time() if now is None else now
    if fmt not in FORMATS:
        print(f"alivemcp report: --format must be one of {', '.join(FORMATS)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # Secrets are not needed for a report (it runs from cron or CI without them), but the
        # settings it reads must not hang on an unset variable.
        loaded = load_config(config_path, allow_missing_env=True)
        needed = ("history.",) if data_dir is not None else ("data_dir:", "history.")
        for line in loaded.unchecked:
            if line.startswith(needed):
                raise ConfigError([line], str(config_path))
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USAGE
    config = loaded.config
    directory = Path(config.data_dir if data_dir is None else data_dir)
    db_path = directory / schema.FILE_NAME
    try:
        start = parse_instant(since, now, "--since")
        end = now if until is None else parse_instant(until, now, "--until")
        period = plan_period(start, end, config.history.retention, now)
    except ReportError as exc:
        print(f"alivemcp report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rows = collect_rows(db_path, period, names, now)
    except ReportError as exc:
        hint = ""  # none for a --data-dir: the command line named the directory
        if data_dir is None and not config.history.enabled:
            hint = " (history.enabled is false in this config)"
        elif data_dir is None and not directory.is_absolute():
            hint = f" (data_dir {config.data_dir!r} is relative to the current directory)"
        print(f"alivemcp report: {exc}{hint}", file=sys.stderr)
        return EXIT_UNREADABLE
    if fmt == "csv":
        text = to_csv(rows)
    elif fmt == "json":
        text = to_json(rows, period, now)
    else:
        text = to_markdown(rows, period, now)
    if out is None:
        sys.stdout.write(text)
    elif isinstance(out, str | Path):
        Path(out).write_text(text, encoding="utf-8", newline="")
    else:
        out.write(text)
    return EXIT_OK


def _cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="alivemcp report",
        description="The SLA report of a period, per check, from the history database.",
    )
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(_cli())
