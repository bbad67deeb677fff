"""The JSON history API on the real daemon: shapes, names with '/', '%', spaces and unicode in
paths, incidents from a check flipped through a file, errors as JSON (400/404/503), and a
history database that cannot be opened answering 503 while the daemon keeps probing."""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.probe import Status
from alivemcp.web.api import ChecksEncoder, checks_document, parse_since
from tests.support import DaemonProcess, write_daemon_config

#: Names a path must carry intact: slashes (multi-target checks), a literal '%', spaces,
#: unicode, a name ending in a view's name, and characters XML and URLs care about.
ODD_NAMES = [
    "mcp/https://api.example.test/mcp?x=1",
    "100% up/with spaces",
    "café ✓/日本",
    "x/uptime",
    "a%2Fb",
    "q<&>\"'#",
]
WINDOW_KEYS = {"up_ratio", "available_ratio"}
UPTIME_KEYS = {"check", "window", "up_ratio", "available_ratio", "runs", "latency_seconds"}
INCIDENT_KEYS = {
    "check",
    "started_at",
    "ended_at",
    "duration_seconds",
    "worst_status",
    "first_reason",
    "last_reason",
}


def fetch(
    d: DaemonProcess, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(d.base_url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def fetch_json(d: DaemonProcess, path: str) -> tuple[int, Any]:
    status, headers, body = fetch(d, path)
    assert headers["Content-Type"].startswith("application/json"), (path, headers)
    assert headers["Cache-Control"] == "no-store"
    return status, json.loads(body)


def quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def set_state(path: Path, status: str, reason: str = "") -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{status}\n{reason}\n" if reason else f"{status}\n")
    tmp.replace(path)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, Path]]:
    tmp = tmp_path_factory.mktemp("api")
    flip = tmp / "flip.state"
    set_state(flip, "up")
    checks: list[dict[str, Any]] = [
        {
            "name": "flip",
            "probe": "test_file",
            "interval": 0.3,
            "timeout": 0.25,
            "params": {"path": str(flip)},
        },
        {
            "name": "broken",
            "probe": "test_static",
            "interval": 0.5,
            "params": {"status": "down", "reason": "connection refused"},
        },
        {
            "name": "slow",
            "probe": "test_sleepy",
            "interval": 600,
            "timeout": 590,
            "labels": {"team": "core"},
            "params": {"seconds": 500, "markers": str(tmp / "m")},
        },
        *({"name": name, "probe": "test_static", "interval": 0.5} for name in ODD_NAMES),
    ]
    # The pending check is still running at the end: stop without waiting for it.
    config = write_daemon_config(tmp / "c.yaml", checks, scheduler={"shutdown_grace": 0.5})
    with DaemonProcess(config) as d:
        d.wait_for(
            lambda: all(d.status_of(n).get("last_run") for n in ODD_NAMES),
            what="every odd-named check ran",
        )
        yield d, flip


def test_checks_lists_every_check_with_status_since_and_live_uptime(daemon: Any) -> None:
    d, _ = daemon
    d.wait_for(
        lambda: (
            fetch_json(d, "/api/v1/checks")[1]["checks"][1]["uptime"]["24h"]["up_ratio"] is not None
        ),
        what="broken's first run in history",
    )
    status, doc = fetch_json(d, "/api/v1/checks")
    assert status == 200
    assert set(doc) == {"generated_at", "checks"}
    assert abs(doc["generated_at"] - time.time()) < 30
    rows = {row["check"]: row for row in doc["checks"]}
    assert [row["check"] for row in doc["checks"]] == ["flip", "broken", "slow", *ODD_NAMES]
    for row in doc["checks"]:
        assert set(row) == {"check", "probe", "labels", "status", "since", "uptime"}
        assert set(row["uptime"]) == {"24h", "7d", "30d"}
        assert all(set(v) == WINDOW_KEYS for v in row["uptime"].values())
    assert rows["broken"]["status"] == "down" and rows["broken"]["probe"] == "test_static"
    assert rows["broken"]["uptime"]["30d"] == {"up_ratio": 0.0, "available_ratio": 0.0}
    assert rows["café ✓/日本"]["uptime"]["7d"] == {"up_ratio": 1.0, "available_ratio": 1.0}
    # A check whose first run has not finished: pending, no decided runs, null ratios.
    assert rows["slow"]["status"] == "pending" and rows["slow"]["since"] is None
    assert rows["slow"]["labels"] == {"team": "core"}
    assert rows["slow"]["uptime"]["24h"] == {"up_ratio": None, "available_ratio": None}
    assert isinstance(rows["broken"]["since"], float)


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_names_round_trip_in_paths(daemon: Any, name: str) -> None:
    d, _ = daemon
    for view in ("uptime", "history", "incidents"):
        status, doc = fetch_json(d, f"/api/v1/checks/{quoted(name)}/{view}")
        assert status == 200, (view, doc)
        assert doc["check"] == name
    status, doc = fetch_json(d, f"/api/v1/checks/{quoted(name)}/uptime?window=1h")
    assert doc["runs"]["up"] >= 1 and doc["up_ratio"] == 1.0
    # Lower-case escapes are the same bytes.
    lower = quoted(name).replace("%2F", "%2f")
    assert fetch_json(d, f"/api/v1/checks/{lower}/uptime")[1]["check"] == name


def test_unencoded_slashes_in_a_name_also_work(daemon: Any) -> None:
    """What someone types into curl: the view is the last segment, the rest is the name."""
    d, _ = daemon
    assert fetch_json(d, "/api/v1/checks/x/uptime/uptime")[1]["check"] == "x/uptime"
    path = "/api/v1/checks/" + urllib.parse.quote("100% up/with spaces") + "/history"
    status, doc = fetch_json(d, path)
    assert status == 200 and doc["check"] == "100% up/with spaces"
    # '%2F' in the name itself: its '%' must be escaped, and then it is kept literally.
    assert fetch_json(d, "/api/v1/checks/a%252Fb/uptime")[1]["check"] == "a%2Fb"


def test_uptime_document_shape_and_counts(daemon: Any) -> None:
    d, _ = daemon
    status, doc = fetch_json(d, "/api/v1/checks/broken/uptime?window=90d")
    assert status == 200
    assert set(doc) == UPTIME_KEYS
    assert doc["window"] == "90d"
    assert set(doc["runs"]) == {"up", "degraded", "down", "unknown"}
    assert doc["runs"]["down"] >= 1 and doc["runs"]["up"] == 0
    assert doc["up_ratio"] == 0.0 and doc["available_ratio"] == 0.0
    assert set(doc["latency_seconds"]) == {"p50", "p95", "p99"}
    assert 0 < doc["latency_seconds"]["p50"] <= doc["latency_seconds"]["p99"] < 1
    # Default window is 24h; no decided runs yet gives null ratios, not 0 or 1.
    assert fetch_json(d, "/api/v1/checks/broken/uptime")[1]["window"] == "24h"
    pending = fetch_json(d, "/api/v1/checks/slow/uptime")[1]
    assert pending["up_ratio"] is None and pending["runs"] == dict.fromkeys(pending["runs"], 0)


def test_history_series_has_every_bucket_of_the_window(daemon: Any) -> None:
    d, _ = daemon
    status, doc = fetch_json(d, "/api/v1/checks/broken/history?window=1h")
    now = time.time()
    assert status == 200
    assert set(doc) == {"check", "window", "resolution_seconds", "buckets"}
    assert doc["resolution_seconds"] == 60
    starts = [b["start"] for b in doc["buckets"]]
    assert len(starts) == 61 and all(b - a == 60 for a, b in itertools.pairwise(starts))
    assert now - 120 < starts[-1] <= now
    ran = [b for b in doc["buckets"] if b["worst_status"] is not None]
    assert ran and all(b["worst_status"] == "down" and b["up_ratio"] == 0.0 for b in ran)
    assert all(
        b["worst_status"] is None and b["up_ratio"] is None
        for b in doc["buckets"]
        if sum(b["runs"].values()) == 0
    )
    daily = fetch_json(d, "/api/v1/checks/broken/history?window=30d")[1]
    assert daily["resolution_seconds"] == 86400 and len(daily["buckets"]) == 31
    assert fetch_json(d, "/api/v1/checks/broken/history")[1]["resolution_seconds"] == 3600


def test_incidents_of_a_flipped_check_newest_first(daemon: Any) -> None:
    d, flip = daemon
    begun = time.time()
    for reason in ("first outage", "second outage"):
        set_state(flip, "down", reason)
        d.wait_for(lambda: d.status_of("flip").get("status") == "down", what="flip down")
        set_state(flip, "up")
        d.wait_for(lambda: d.status_of("flip").get("status") == "up", what="flip up")
    status, doc = fetch_json(d, "/api/v1/checks/flip/incidents")
    assert status == 200 and set(doc) == {"check", "incidents"} and doc["check"] == "flip"
    found = doc["incidents"]
    assert [i["first_reason"] for i in found] == ["second outage", "first outage"]
    for incident in found:
        assert set(incident) == INCIDENT_KEYS
        assert incident["worst_status"] == "down" and incident["ended_at"] is not None
        assert begun <= incident["started_at"] < incident["ended_at"]
        assert incident["duration_seconds"] == pytest.approx(
            incident["ended_at"] - incident["started_at"], abs=0.002
        )
    newest = found[0]
    # limit, and since as a duration, unix seconds and ISO-8601 (with and without offset).
    assert fetch_json(d, "/api/v1/checks/flip/incidents?limit=1")[1]["incidents"] == [newest]
    after_first = found[1]["ended_at"] + 0.001
    iso = datetime.fromtimestamp(after_first, UTC).isoformat()
    for since in (
        f"{after_first}",
        urllib.parse.quote(iso),
        iso.replace("+00:00", "Z"),
        iso.replace("+00:00", ""),
    ):
        got = fetch_json(d, f"/api/v1/checks/flip/incidents?since={since}")[1]["incidents"]
        assert got == [newest], since
    assert len(fetch_json(d, "/api/v1/checks/flip/incidents?since=1h")[1]["incidents"]) == 2
    future = int(time.time()) + 3600
    assert fetch_json(d, f"/api/v1/checks/flip/incidents?since={future}")[1]["incidents"] == []


@pytest.mark.parametrize(
    ("path", "parameter", "words"),
    [
        ("/api/v1/checks/flip/uptime?window=2d", "window", "1h, 24h, 7d, 30d, 90d"),
        ("/api/v1/checks/flip/history?window=", "window", "got ''"),
        ("/api/v1/checks/flip/uptime?windw=7d", "windw", "takes: window"),
        ("/api/v1/checks/flip/uptime?window=1h&window=7d", "window", "give it once"),
        ("/api/v1/checks/flip/incidents?since=yesterday", "since", "ISO-8601"),
        ("/api/v1/checks/flip/incidents?since=-5", "since", "non-negative"),
        ("/api/v1/checks/flip/incidents?since=400d", "since", "365d"),
        ("/api/v1/checks/flip/incidents?limit=0", "limit", "1 to 1000"),
        ("/api/v1/checks/flip/incidents?limit=1001", "limit", "1 to 1000"),
        ("/api/v1/checks/flip/incidents?limit=ten", "limit", "1 to 1000"),
        ("/api/v1/checks?window=1h", "window", "no parameters"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(
    daemon: Any, path: str, parameter: str, words: str
) -> None:
    d, _ = daemon
    status, doc = fetch_json(d, path)
    assert status == 400, doc
    assert doc["parameter"] == parameter
    assert words in doc["error"], doc


def test_window_error_lists_the_allowed_values(daemon: Any) -> None:
    d, _ = daemon
    doc = fetch_json(d, "/api/v1/checks/flip/uptime?window=1d")[1]
    assert doc["allowed"] == ["1h", "24h", "7d", "30d", "90d"]


def test_unknown_names_and_paths_are_json_404(daemon: Any) -> None:
    d, _ = daemon
    for view in ("uptime", "history", "incidents"):
        status, doc = fetch_json(d, f"/api/v1/checks/{quoted('no/such check')}/{view}")
        assert status == 404 and doc == {"error": "no check named 'no/such check'"}
    for path in ("/api/v1/nothing", "/api/v1/checks/", "/api/v1/checks/flip/latency"):
        status, doc = fetch_json(d, path)
        assert status == 404 and "/api/v1/checks" in doc["error"], path


def test_history_disabled_answers_503_and_null_uptime(tmp_path: Path) -> None:
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [{"name": "a/b", "probe": "test_static", "interval": 0.5}],
        history={"enabled": False},
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.status_of("a/b").get("status") == "up", what="first run")
        doc = fetch_json(d, "/api/v1/checks")[1]
        assert doc["checks"][0]["uptime"] is None and doc["checks"][0]["status"] == "up"
        for view in ("uptime", "history", "incidents"):
            status, err = fetch_json(d, f"/api/v1/checks/a%2Fb/{view}")
            assert status == 503 and "history.enabled: false" in err["error"]
        assert d.get("/healthz")[0] == 200
        assert not (tmp_path / "data" / "history.sqlite").exists()


def test_unreadable_history_is_503_then_recovers(tmp_path: Path) -> None:
    """A directory where the database file should be: the writer cannot open it, so reads
    cannot be answered (503, Retry-After); the daemon keeps probing; once the obstacle goes,
    the same endpoints answer 200 with the runs kept in memory meanwhile."""
    data = tmp_path / "data"
    (data / "history.sqlite").mkdir(parents=True)
    config = write_daemon_config(
        tmp_path / "c.yaml", [{"name": "a", "probe": "test_static", "interval": 0.3}]
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.status_of("a").get("status") == "up", what="first run")
        status, headers, body = fetch(d, "/api/v1/checks/a/uptime?window=1h")
        assert status == 503, body
        assert headers["Retry-After"] == "5"
        assert "history cannot be read right now" in json.loads(body)["error"]
        assert fetch_json(d, "/api/v1/checks")[0] == 200  # the list still answers
        assert d.get("/healthz")[0] == 200
        (data / "history.sqlite").rmdir()
        doc = d.wait_for(
            lambda: (r := fetch_json(d, "/api/v1/checks/a/uptime?window=1h"))[0] == 200 and r[1],
            timeout=30,
            what="history readable again",
        )
        assert doc["runs"]["up"] >= 2 and doc["up_ratio"] == 1.0


def test_parse_since_forms() -> None:
    now = 1_800_000_000.0
    assert parse_since("30d", now) == now - 30 * 86400
    assert parse_since("90m", now) == now - 5400
    assert parse_since("1767225600", now) == 1767225600.0
    assert parse_since("2026-01-01T00:00:00Z", now) == 1767225600.0
    assert parse_since("2026-01-01T01:00:00+01:00", now) == 1767225600.0
    assert parse_since("2026-01-01", now) == 1767225600.0


def test_fast_encoder_writes_the_reference_document(tmp_path: Path) -> None:
    """The /api/v1/checks encoder (cached heads, shared uptime fragments) equals the plain
    document, for checks with and without history, labels that need escaping, a reload that
    changes a check's labels, and history off."""
    infos = [
        CheckInfo(f'c{i}/\u00e9 "q"', "test_static", {"team": f"t{i % 2}", "x": "<&>"})
        for i in range(6)
    ]
    store = StatusStore()
    store.set_checks(infos)
    history = HistoryStore(tmp_path, HistoryConfig())
    history.set_checks(infos)
    history.start()
    try:
        now = time.time()
        for i, info in enumerate(infos[:4]):
            status = [Status.UP, Status.DOWN, Status.DEGRADED, Status.UNKNOWN][i]
            result = CheckResult(info, status, "r", 0.01, now - 1, now)
            store.record(result)
            history.consume(result)
        deadline = time.monotonic() + 10
        while history.live_uptime('c1/\u00e9 "q"', "24h") == (None, None):
            assert time.monotonic() < deadline, "history never wrote the batch"
            time.sleep(0.05)
        encoder = ChecksEncoder()
        for hist in (history, None, history):
            at = time.time()
            assert json.loads(encoder.encode(store, hist, at)) == checks_document(store, hist, at)
        changed = CheckInfo(infos[0].name, "test_static", {"team": "new"})
        store.set_checks([changed, *infos[1:]])
        at = time.time()
        doc = json.loads(encoder.encode(store, history, at))
        assert doc == checks_document(store, history, at)
        assert doc["checks"][0]["labels"] == {"team": "new"}
        store.set_checks([])
        assert json.loads(encoder.encode(store, history, at)) == {"generated_at": at, "checks": []}
    finally:
        history.writer.stop(5)
