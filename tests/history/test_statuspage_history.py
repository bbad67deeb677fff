"""The status page's history in real headless Chromium: uptime columns, bars, incidents, badges.

Most tests run the page (the exact bytes the daemon serves, with its CSP) against a local
stand-in server that answers ``/status`` (its brief view and rows by name too, or, standing in
for an older daemon, always the full document) and the history API in their documented shapes
(docs/http-api.md), so they can pin every bar's colour and every request the page makes. The
last tests run the real daemon: a check flips down, and its bar, uptime and incident follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import pytest
import yaml
from aiohttp import web

from alivemcp.web.statuspage import PAGE_HEADERS, PAGE_HTML
from tests.support import DaemonProcess
from tests.support.aiohttp_server import serve_app
from tests.support.chromium_cdp import (
    Browser,
    csp_watching,
)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / ".cache" / "ship"
DAY = 86400
HOUR = 3600
PAGE = "window.alivemcpStatusPage"
CHECK_ROWS = "document.querySelectorAll('#spacer .row.check')"
STATUSES = ("up", "degraded", "down", "unknown")
# Names a path segment must carry intact: "/", spaces, "%", "?", "#", "&", Unicode, markup.
SLASHED = "payments api/eu west 1"
PERCENT = "100% ok/ünïcødé ✓"
QUERYISH = "search?q=1#frag&x=y"
MARKUP = "<b>mcp</b>/evil"
SPECIAL = (SLASHED, PERCENT, QUERYISH, MARKUP)
EN_DASH = "\u2013"  # the page writes ranges and "no figure" with it
NO_RATIO = EN_DASH
XSS_REASON = '<img src=x onerror="window.__xss = 1"> initialize returned HTML'
#: Runs before the page's own script: records what the Content-Security-Policy blocked.


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def bucket_status(name: str, index: int) -> str | None:
    """The worst status of one bucket of a check's synthetic history (None: no runs)."""
    k = _seed(name) + index
    if k % 13 == 0:
        return None
    if k % 7 == 0:
        return "down"
    if k % 11 == 0:
        return "degraded"
    if k % 17 == 0:
        return "unknown"
    return "up"


def series_doc(name: str, window: str, now: float) -> dict[str, Any]:
    """queries.series shape: every bucket of the window, oldest first, empty ones included."""
    width, length = (DAY, 30 * DAY) if window == "30d" else (HOUR, DAY)
    start = int(now) // width * width - length
    buckets = []
    for i, bucket in enumerate(range(start, int(now) // width * width + 1, width)):
        worst = bucket_status(name, i)
        runs = dict.fromkeys(STATUSES, 0)
        if worst is not None:
            runs["up"] = width // 60 - 3
            if worst != "up":
                runs[worst] = 3
        decided = runs["up"] + runs["degraded"] + runs["down"]
        buckets.append(
            {
                "start": bucket,
                "runs": runs,
                "up_ratio": runs["up"] / decided if decided else None,
                "available_ratio": (runs["up"] + runs["degraded"]) / decided if decided else None,
                "worst_status": worst,
                "latency_seconds": {"p50": 0.1, "p95": 0.2, "p99": 0.3}
                if worst
                else {"p50": None, "p95": None, "p99": None},
            }
        )
    return {"check": name, "window": window, "resolution_seconds": width, "buckets": buckets}


def uptime_of(index: int) -> dict[str, dict[str, float | None]]:
    """Per-check uptime of /api/v1/checks; the first three pin the page's number format."""
    if index == 0:
        day: tuple[float | None, float | None] = (1.0, 1.0)  # "100%"
    elif index == 1:
        day = (0.99995, 1.0)  # "99.99%", never "100.00%"
    elif index == 2:
        day = (None, None)  # no decided runs: a dash
    else:
        day = (0.9 + (index % 100) / 1000, 0.95 + (index % 50) / 1000)
    return {
        "24h": {"up_ratio": day[0], "available_ratio": day[1]},
        "7d": {"up_ratio": 0.97, "available_ratio": 0.98},
        "30d": {"up_ratio": 0.935, "available_ratio": 0.99},
    }


def status_doc(n: int, now: float, *, runs_per_check: int = 20) -> dict[str, Any]:
    """A /status document of the daemon's shape: the special names first, all down."""
    checks: list[dict[str, Any]] = []
    names = list(SPECIAL) + [f"fleet/endpoint-{i:05d}" for i in range(n - len(SPECIAL))]
    for i, name in enumerate(names):
        status = "down" if name in SPECIAL else ("degraded" if i % 61 == 5 else "up")
        history = [
            [now - (runs_per_check - k) * 60, 0.05 + (k % 7) / 100, "up"]
            for k in range(runs_per_check)
        ]
        checks.append(
            {
                "check": name,
                "probe": "mcp_endpoint",
                "labels": {"region": ("eu-west-1", "us-east-1")[i % 2], "team": "search"},
                "status": status,
                "reason": "ok" if status == "up" else "HTTP 503 from initialize",
                "since": now - 600 - i,
                "last_run": now - 5,
                "duration_seconds": 0.12,
                "observations": {"total_seconds": 0.12, "tools": 12},
                "history": history,
            }
        )
    summary = dict.fromkeys((*STATUSES, "pending"), 0)
    for c in checks:
        summary[c["status"]] += 1
    return {"generated_at": now, "summary": summary, "checks": checks}


def incidents_of(name: str, now: float) -> list[dict[str, Any]]:
    """Newest first: one ongoing (its reason is hostile markup), two that ended."""
    if name != SLASHED:
        return []
    raw = [
        (now - 3 * HOUR, None, "down", XSS_REASON, XSS_REASON),
        (
            now - 2 * DAY,
            now - 2 * DAY + 1800,
            "degraded",
            "initialize took 2.4s",
            "initialize took 3.1s",
        ),
        (
            now - 20 * DAY,
            now - 20 * DAY + 5400,
            "down",
            "connect failed: connection refused",
            "connect failed: connection refused",
        ),
    ]
    return [
        {
            "check": name,
            "started_at": s,
            "ended_at": e,
            "duration_seconds": round((e if e is not None else now) - s, 3),
            "worst_status": w,
            "first_reason": f,
            "last_reason": last,
        }
        for s, e, w, f, last in raw
    ]


@dataclass
class StandIn:
    """What the stand-in daemon answers and what the page asked it."""

    n: int
    history_enabled: bool = True
    #: Serve ``/status?view=brief`` and ``/status?check=NAME`` as the daemon does; False: a
    #: daemon older than those views, which ignores the parameters and sends every full row.
    views: bool = True
    rows_fail: bool = False  # /status?check= answers 503
    url: str = ""
    status_body: bytes = b""
    brief_body: bytes = b""
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> full row
    summary: dict[str, int] = field(default_factory=dict)
    full_requests: int = 0
    brief_requests: int = 0
    row_requests: list[list[str]] = field(default_factory=list)  # names of each ?check=
    list_body: bytes = b""
    names: list[str] = field(default_factory=list)
    status_requests: int = 0
    list_requests: int = 0
    history_requests: list[tuple[str, str]] = field(default_factory=list)  # (name, window)
    incident_requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    raw_segments: list[str] = field(default_factory=list)

    def build(self) -> None:
        now = time.time()
        doc = status_doc(self.n, now)
        self.names = [c["check"] for c in doc["checks"]]
        self.status_body = json.dumps(doc).encode()
        self.rows = {c["check"]: c for c in doc["checks"]}
        self.summary = doc["summary"]
        heavy = ("observations", "history", "labeled_observations", "details")
        self.brief_body = json.dumps(
            {
                **doc,
                "checks": [{k: v for k, v in c.items() if k not in heavy} for c in doc["checks"]],
            }
        ).encode()
        self.list_body = json.dumps(
            {
                "generated_at": now,
                "checks": [
                    {
                        "check": c["check"],
                        "probe": c["probe"],
                        "labels": c["labels"],
                        "status": c["status"],
                        "since": c["since"],
                        "uptime": uptime_of(i) if self.history_enabled else None,
                    }
                    for i, c in enumerate(doc["checks"])
                ],
            }
        ).encode()


@contextlib.asynccontextmanager
async def serve(standin: StandIn) -> AsyncIterator[StandIn]:
    standin.build()
    known = set(standin.names)

    async def page(_: web.Request) -> web.Response:
        return web.Response(
            body=PAGE_HTML, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
        )

    async def status(request: web.Request) -> web.Response:
        standin.status_requests += 1
        names = request.query.getall("check", [])
        if names:
            standin.row_requests.append(names)
        if standin.views:
            if names:
                if len(names) > 500:
                    return web.json_response(
                        {"error": "at most 500 check= per request"}, status=400
                    )
                if standin.rows_fail:
                    return web.json_response({"error": "busy"}, status=503)
                return web.json_response(
                    {
                        "generated_at": time.time(),
                        "summary": standin.summary,
                        "checks": [standin.rows[n] for n in names if n in standin.rows],
                    }
                )
            if request.query.get("view") == "brief":
                standin.brief_requests += 1
                return web.Response(body=standin.brief_body, content_type="application/json")
        standin.full_requests += 1
        return web.Response(body=standin.status_body, content_type="application/json")

    async def check_list(_: web.Request) -> web.Response:
        standin.list_requests += 1
        return web.Response(body=standin.list_body, content_type="application/json")

    async def per_check(request: web.Request) -> web.Response:
        # The name is one URL-encoded path segment: read it from the raw path, as sent.
        raw = request.raw_path.split("?", 1)[0]
        segments = raw[len("/api/v1/checks/") :].split("/")
        if len(segments) != 2:
            return web.json_response({"error": f"bad path {raw}"}, status=404)
        standin.raw_segments.append(segments[0])
        name, what = unquote(segments[0]), segments[1]
        if name not in known:
            return web.json_response({"error": f"no check named {name!r}"}, status=404)
        if not standin.history_enabled:
            return web.json_response({"error": "history is disabled"}, status=503)
        query = parse_qs(request.query_string)
        if what == "history":
            window = query.get("window", ["24h"])[0]
            standin.history_requests.append((name, window))
            if window not in ("24h", "30d"):
                return web.json_response(
                    {"error": "window must be one of 1h, 24h, 7d, 30d, 90d"}, status=400
                )
            return web.json_response(series_doc(name, window, time.time()))
        if what == "incidents":
            standin.incident_requests.append((name, query))
            return web.json_response({"check": name, "incidents": incidents_of(name, time.time())})
        return web.json_response({"error": f"no such resource {what}"}, status=404)

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/status", status)
    app.router.add_get("/api/v1/checks", check_list)
    app.router.add_route("GET", r"/api/v1/checks/{rest:.+}", per_check)
    async with serve_app(app) as served:
        standin.url = f"{served.url}/"
        yield standin


@pytest.fixture
async def standin() -> AsyncIterator[StandIn]:
    async with serve(StandIn(n=400)) as s:
        yield s


@pytest.fixture
async def standin_no_history() -> AsyncIterator[StandIn]:
    async with serve(StandIn(n=400, history_enabled=False)) as s:
        yield s


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with csp_watching() as b:
        yield b


def pct(ratio: float | None) -> str:
    """The page's uptime format: floored to 0.01 %, "100%" only when every run was up."""
    if ratio is None:
        return NO_RATIO
    if ratio >= 1:
        return "100%"
    return f"{math.floor(ratio * 10000) / 100:.2f}%"


def row_of(name: str) -> str:
    """A JavaScript expression: the row element of the named check."""
    return f"[...{CHECK_ROWS}].find(r => r.dataset.check === {json.dumps(name)})"


async def row_bars(browser: Browser, name: str) -> list[str]:
    """The class of each bar in the named row, oldest first."""
    return await browser.evaluate(
        f"[...{row_of(name)}.querySelectorAll('.strip-cell svg.strip rect')]"
        ".map(r => r.getAttribute('class'))"
    )


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


#: Every rendered row's sparkline shows its 20 recent runs.
SPARKS_DRAWN = (
    f"[...{CHECK_ROWS}].every(r => (r.querySelector('svg.spark polyline')"
    "?.getAttribute('points') || '').split(' ').length === 20)"
)
#: The checks whose rows are on screen (not the ones just above or below), top to bottom.
ON_SCREEN = f"""(() => {{
    const v = document.getElementById('viewport'), items = {PAGE}.items;
    return items.slice(Math.floor(v.scrollTop / 34), Math.ceil((v.scrollTop + v.clientHeight) / 34))
        .filter(i => i.check).map(i => i.check.check); }})()"""


def asked_by_name(standin: StandIn, since: int = 0) -> set[str]:
    return {n for names in standin.row_requests[since:] for n in names}


def expected_bars(name: str, window: str) -> list[str]:
    count = 31 if window == "30d" else 25
    return [f"s-{s}" if (s := bucket_status(name, i)) else "nodata" for i in range(count)]


async def test_rows_show_uptime_and_bars_of_the_checks_on_screen(
    standin: StandIn, browser: Browser
) -> None:
    await browser.goto(standin.url + "#group=&refresh=1")
    await browser.wait_for(f"{PAGE}.refreshes >= 1 && {PAGE}.uptimeRefreshes >= 1")
    on_screen = await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)")
    assert set(on_screen[:4]) == set(SPECIAL)  # down, so first
    await browser.wait_for(
        f"[...{CHECK_ROWS}].every(r => r.querySelectorAll('svg.strip rect').length === 31)"
    )

    # Each bar is coloured by its day's worst status; a day without runs is "no data".
    for name in (*SPECIAL, on_screen[10]):
        assert await row_bars(browser, name) == expected_bars(name, "30d"), name
    colours = await browser.evaluate(
        "Object.fromEntries(['s-up', 's-down', 's-degraded', 's-unknown', 'nodata'].map(c => {"
        " const r = document.querySelector('#spacer svg.strip rect.' + c);"
        " return [c, r ? getComputedStyle(r).fill : null]; }))"
    )
    assert colours["s-up"] == "rgb(26, 127, 55)" and colours["s-down"] == "rgb(207, 34, 46)"
    assert colours["s-degraded"] == "rgb(191, 135, 0)"
    assert colours["nodata"] == "rgb(208, 215, 222)"

    # The tooltip says which UTC day and its uptime; today is marked as still running.
    titles = await browser.evaluate(
        f"[...{row_of(SLASHED)}.querySelectorAll('svg.strip rect')]"
        ".map(r => r.querySelector('title').textContent)"
    )
    series = series_doc(SLASHED, "30d", time.time())["buckets"]
    for title, bucket in zip(titles, series, strict=True):
        day = time.strftime("%Y-%m-%d", time.gmtime(bucket["start"]))
        assert title.startswith(day + " (UTC day)"), title
        if bucket["worst_status"] is None:
            assert title.endswith("no runs")
        else:
            assert f"uptime {pct(bucket['up_ratio'])}" in title
            assert f"{sum(bucket['runs'].values())} runs: {bucket['runs']['up']} up" in title
    assert titles[-1].split("\n")[0].endswith(", so far")

    # Uptime columns from /api/v1/checks, in the page's format.
    cells = await browser.evaluate(
        f"Object.fromEntries([...{CHECK_ROWS}].map(r => [r.dataset.check,"
        " [r.querySelector('.up24').textContent, r.querySelector('.up30').textContent]]))"
    )
    for i, name in enumerate(standin.names[: len(on_screen)]):
        if name in cells:
            up = uptime_of(i)
            assert cells[name] == [pct(up["24h"]["up_ratio"]), pct(up["30d"]["up_ratio"])]
    assert cells[standin.names[0]][0] == "100%"
    assert cells[standin.names[1]][0] == "99.99%"
    assert cells[standin.names[2]][0] == NO_RATIO

    # Names reach the API as one URL-encoded path segment, intact.
    requested = {name for name, _ in standin.history_requests}
    assert set(SPECIAL) <= requested
    assert all("/" not in seg and " " not in seg for seg in standin.raw_segments)
    assert quote(SLASHED, safe="") in standin.raw_segments

    # Only rows in the DOM were asked for, once each: not 400 requests for 400 checks.
    rendered = await browser.evaluate(f"{CHECK_ROWS}.length")
    assert len(standin.history_requests) == len(requested) <= rendered < 100

    # The status refreshes every second; the uptime list and bars are not refetched with it.
    seen = await browser.evaluate(f"{PAGE}.refreshes")
    await browser.wait_for(f"{PAGE}.refreshes >= {seen + 3}")
    assert standin.list_requests == 1
    assert len(standin.history_requests) == len(requested)

    # Scrolling fetches bars for the rows that come into view, and only those.
    before = len(standin.history_requests)
    await browser.evaluate(
        "(() => { const v = document.getElementById('viewport'); v.scrollTop = 200 * 34;"
        " v.dispatchEvent(new Event('scroll')); })()"
    )
    await browser.wait_for(f"{row_of(standin.names[205])} !== undefined")
    await browser.wait_for(
        f"[...{CHECK_ROWS}].every(r => r.querySelectorAll('svg.strip rect').length === 31)"
    )
    new = standin.history_requests[before:]
    assert new and len(new) <= await browser.evaluate(f"{CHECK_ROWS}.length")
    positions = [standin.names.index(n) for n, _ in new]
    assert min(positions) > 100  # the rows scrolled past at the top were not fetched again
    await browser.screenshot(SCREENSHOTS / "statuspage-history.png")
    assert browser.exceptions == []
    assert await browser.evaluate("window.__csp") == []


async def test_hourly_toggle_and_incident_timeline_of_an_opened_check(
    standin: StandIn, browser: Browser
) -> None:
    await browser.goto(standin.url + "#group=")
    await browser.wait_for(f"{PAGE}.uptimeRefreshes >= 1")
    await browser.type_text("#filter", "payments")
    await browser.wait_for(
        f"{CHECK_ROWS}.length === 1 && {CHECK_ROWS}[0].dataset.check === {json.dumps(SLASHED)}"
    )
    await browser.wait_for(f"{CHECK_ROWS}[0].querySelectorAll('svg.strip rect').length === 31")

    # The toggle switches every strip to hourly bars over 24 hours, and the link keeps it.
    await browser.click("#bars button[data-bars='24h']")
    await browser.wait_for(f"{CHECK_ROWS}[0].querySelectorAll('svg.strip rect').length === 25")
    assert await row_bars(browser, SLASHED) == expected_bars(SLASHED, "24h")
    assert (SLASHED, "24h") in standin.history_requests
    assert "bars=24h" in await browser.evaluate("location.hash")
    assert await browser.evaluate("document.getElementById('bars-title').textContent") == (
        "last 24 hours"
    )
    hour_title = await browser.evaluate(
        f"{CHECK_ROWS}[0].querySelector('svg.strip rect title').textContent"
    )
    start = series_doc(SLASHED, "24h", time.time())["buckets"][0]["start"]
    assert hour_title.startswith(time.strftime("%Y-%m-%d %H:00", time.gmtime(start)) + EN_DASH)

    # Back to days: the answer fetched earlier is reused, not fetched again.
    thirty = standin.history_requests.count((SLASHED, "30d"))
    await browser.click("#bars button[data-bars='30d']")
    await browser.wait_for(f"{CHECK_ROWS}[0].querySelectorAll('svg.strip rect').length === 31")
    assert standin.history_requests.count((SLASHED, "30d")) == thirty

    # Opening the check shows its uptime and its incidents, newest first, on a timeline.
    await browser.click("#spacer .row.check .name")
    await browser.wait_for("document.querySelectorAll('#detail .incidents li').length === 3")
    name, query = standin.incident_requests[-1]
    assert name == SLASHED and query["limit"] == ["100"]
    assert abs(float(query["since"][0]) - (time.time() - 30 * DAY)) < 120
    uptime = await browser.evaluate(
        "[...document.querySelectorAll('#detail table.uptime tr')]"
        ".map(tr => [tr.dataset.window, tr.children[1].textContent, tr.children[2].textContent])"
    )
    up = uptime_of(0)
    assert uptime == [
        [w, f"{pct(up[w]['up_ratio'])} up", f"{pct(up[w]['available_ratio'])} up or degraded"]
        for w in ("24h", "7d", "30d")
    ]
    assert (
        await browser.evaluate(
            "document.querySelectorAll('#detail .detail-strip svg.strip rect').length"
        )
        == 31
    )
    items = await browser.evaluate(
        "[...document.querySelectorAll('#detail .incidents li')].map(li =>"
        " [li.querySelector('.state').textContent, li.querySelector('.first-reason').textContent,"
        " li.textContent.includes('(ongoing)')])"
    )
    assert items == [
        ["down", XSS_REASON, True],
        ["degraded", "initialize took 2.4s", False],
        ["down", "connect failed: connection refused", False],
    ]
    assert "last: initialize took 3.1s" in await browser.evaluate(
        "document.getElementById('detail').textContent"
    )
    # On the timeline: the ongoing one reaches the right edge, the oldest sits near the left.
    spans = await browser.evaluate(
        "[...document.querySelectorAll('#detail svg.timeline rect.incident')].map(r =>"
        " [r.getAttribute('class'), +r.getAttribute('x'), +r.getAttribute('width')])"
    )
    assert [s[0] for s in spans] == ["incident s-down", "incident s-degraded", "incident s-down"]
    assert abs(spans[0][1] + spans[0][2] - 440) < 1
    assert abs(spans[2][1] - 440 * 10 / 30) < 2
    # A reason the target controls is text: no element made from it, no script run.
    assert await browser.evaluate("document.querySelectorAll('#detail img').length") == 0
    assert await browser.evaluate("window.__xss === undefined")

    # Hourly bars in the open check: incidents of the last 24 hours only.
    await browser.click("#bars button[data-bars='24h']")
    await browser.wait_for(
        "document.querySelectorAll('#detail .detail-strip svg.strip rect').length === 25"
    )
    await wait_until(
        lambda: (
            abs(float(standin.incident_requests[-1][1]["since"][0]) - (time.time() - DAY)) < 120
        ),
        "incidents of the last day",
    )
    # Only the incident open during those 24 hours is listed, even if more came back.
    await browser.wait_for("document.querySelectorAll('#detail .incidents li').length === 1")
    assert await browser.evaluate(
        "document.querySelector('#detail .incidents li').textContent.includes('(ongoing)')"
    )
    await browser.screenshot(SCREENSHOTS / "statuspage-incidents.png")
    assert browser.exceptions == []
    assert await browser.evaluate("window.__csp") == []


async def test_page_without_history_says_so_and_stops_asking(
    standin_no_history: StandIn, browser: Browser
) -> None:
    standin = standin_no_history
    await browser.goto(standin.url + "#group=&history_refresh=60")
    await browser.wait_for(f"{PAGE}.uptimeRefreshes >= 1")
    await browser.wait_for(
        "document.getElementById('history-note').textContent === 'history: history is off'"
    )
    assert await browser.evaluate(
        f"[...{CHECK_ROWS}].every(r => r.querySelector('.up24').textContent === '')"
    )
    # At most one round of bar requests went out before the list said history is off.
    await browser.evaluate("new Promise(r => setTimeout(r, 1500))")
    asked = len(standin.history_requests)
    assert asked <= await browser.evaluate(f"{CHECK_ROWS}.length")
    await browser.evaluate(
        "(() => { const v = document.getElementById('viewport'); v.scrollTop = 300 * 34;"
        " v.dispatchEvent(new Event('scroll')); })()"
    )
    await browser.evaluate("new Promise(r => setTimeout(r, 1000))")
    assert len(standin.history_requests) == asked
    # The rows and the detail still work; the detail says why there is no history.
    await browser.type_text("#filter", "payments")
    await browser.wait_for(f"{CHECK_ROWS}.length === 1")
    await browser.click("#spacer .row.check .name")
    await browser.wait_for("!document.getElementById('detail').hidden")
    await browser.wait_for(
        "document.getElementById('detail').textContent.includes('history is off')"
    )
    assert browser.exceptions == []


async def test_list_is_brief_and_rows_in_the_dom_come_by_name_on_screen_first(
    standin: StandIn, browser: Browser
) -> None:
    await browser.goto(standin.url + "#group=&refresh=1")
    await browser.wait_for(f"{PAGE}.refreshes >= 1")
    await browser.wait_for(SPARKS_DRAWN)
    # The list polled is the brief view; the full document is never asked for.
    assert standin.brief_requests >= 1 and standin.full_requests == 0
    on_screen = await browser.evaluate(ON_SCREEN)
    rendered = await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)")
    assert 20 < len(on_screen) < len(rendered) < 100
    # Two requests: the rows on screen, and the rows just around them (drawn, out of view).
    first_two = sorted(sorted(names) for names in standin.row_requests[:2])
    assert first_two == sorted([sorted(on_screen), sorted(set(rendered) - set(on_screen))])
    # Rows in the DOM only, not 400; names with "/", "%", "?", "#", "&", Unicode arrive intact.
    assert asked_by_name(standin) == set(rendered)
    assert set(SPECIAL) <= set(on_screen)

    # Each refresh asks again for the rows in the DOM: their sparklines follow the runs.
    target = on_screen[6]
    standin.rows[target]["history"][-1][2] = "down"
    await browser.wait_for(f"{row_of(target)}.querySelector('svg.spark circle.s-down') !== null")

    # Scrolling draws the rows that come into view from their own rows, asked by name; rows
    # never drawn are never asked for.
    before = await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)")
    await browser.evaluate(
        "(() => { const v = document.getElementById('viewport'); v.scrollTop = 200 * 34;"
        " v.dispatchEvent(new Event('scroll')); })()"
    )
    await browser.wait_for(f"{row_of(standin.names[205])} !== undefined")
    await browser.wait_for(SPARKS_DRAWN)
    after = await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)")
    assert set(after) <= asked_by_name(standin) <= set(before) | set(after)

    # The opened check's row is asked by name even when it is nowhere in the DOM.
    far = standin.names[350]
    await browser.goto(standin.url + f"?again=1#group=&check={quote(far, safe='')}")
    await browser.wait_for(
        "document.getElementById('detail').textContent.includes('latency, last 20 runs')"
    )
    detail = await browser.evaluate("document.getElementById('detail').textContent")
    assert far in detail and "total_seconds" in detail
    assert await browser.evaluate(f"{row_of(far)} === undefined")
    assert any(far in names for names in standin.row_requests)
    assert standin.full_requests == 0
    assert browser.exceptions == []
    assert await browser.evaluate("window.__csp") == []


async def test_rows_by_name_failing_leave_the_list_and_say_so(
    standin: StandIn, browser: Browser
) -> None:
    standin.rows_fail = True
    await browser.goto(standin.url + f"#group=&refresh=1&check={quote(SLASHED, safe='')}")
    await browser.wait_for(
        "document.getElementById('detail').textContent.includes('Recent runs unavailable: busy')"
    )
    # The list still shows every row's state and reason; only the sparklines are missing.
    assert (
        await browser.evaluate(f"{row_of(SLASHED)}.querySelector('.reason').textContent")
        == "HTTP 503 from initialize"
    )
    assert (
        await browser.evaluate("document.querySelectorAll('#spacer svg.spark polyline').length")
        == 0
    )
    # Failed rows are asked again on the next refresh, not on every frame drawn meanwhile.
    seen, asked = await browser.evaluate(f"{PAGE}.refreshes"), len(standin.row_requests)
    await browser.wait_for(f"{PAGE}.refreshes >= {seen + 2}")
    refreshes = await browser.evaluate(f"{PAGE}.refreshes")
    assert len(standin.row_requests) - asked <= 2 * (refreshes - seen + 1)
    # The server recovers: the rows fill in by themselves.
    standin.rows_fail = False
    await browser.wait_for(SPARKS_DRAWN)
    await browser.wait_for(
        "document.getElementById('detail').textContent.includes('total_seconds')"
    )
    assert browser.exceptions == []


async def test_a_daemon_without_the_views_is_used_as_it_answers(browser: Browser) -> None:
    """A daemon older than ``view=brief`` and ``check=`` ignores them and sends full rows:
    the page draws from those and asks nothing by name (which would fetch it all again)."""
    async with serve(StandIn(n=400, views=False)) as standin:
        await browser.goto(standin.url + f"#group=&refresh=1&check={quote(SLASHED, safe='')}")
        await browser.wait_for(f"{PAGE}.refreshes >= 2")
        await browser.wait_for(SPARKS_DRAWN)
        await browser.wait_for(
            "document.getElementById('detail').textContent.includes('latency, last 20 runs')"
        )
        assert "total_seconds" in await browser.evaluate(
            "document.getElementById('detail').textContent"
        )
        assert standin.row_requests == []
        assert standin.brief_requests == 0 and standin.full_requests >= 2
        assert browser.exceptions == []


FIRST_PAINT_FIGURES = f"""(() => {{
    const s = {PAGE}, entries = performance.getEntriesByType('resource');
    const url = e => new URL(e.name);
    const list = entries.find(e => url(e).pathname === '/status'
                                   && !url(e).searchParams.has('check'));
    const rows = entries.filter(e => url(e).searchParams.has('check'));
    return {{first_paint_ms: s.firstPaintMs, list_response_end_ms: list.responseEnd,
             list_parsed_ms: s.firstStatusMs, list_bytes: list.decodedBodySize,
             sparklines_ms: s.firstRowsMs === null ? s.firstPaintMs : s.firstRowsMs,
             rows_requests: rows.length, build_rows_ms: s.renderMs,
             checks: s.checks.length}};
}})()"""


async def first_paint(browser: Browser, standin: StandIn, tag: str) -> dict[str, Any]:
    """Load the page afresh and return its figures once rows and sparklines are drawn."""
    full, brief, asked = standin.full_requests, standin.brief_requests, len(standin.row_requests)
    # From a blank page, so the last run's page (its heap) is gone before this one loads.
    await browser.goto("about:blank")
    await browser.goto(f"{standin.url}?run={tag}#group=")
    await browser.wait_for(f"{PAGE}.firstPaintMs !== null", timeout=60)
    await browser.wait_for(SPARKS_DRAWN, timeout=60)
    # The 24h/30d uptime list comes after the first paint; let it land before the next run.
    await browser.wait_for(f"{PAGE}.uptimeRefreshes >= 1", timeout=60)
    figures: dict[str, Any] = await browser.evaluate(FIRST_PAINT_FIGURES)
    rendered = set(await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)"))
    assert figures["checks"] == 50_000
    assert figures["first_paint_ms"] >= figures["list_response_end_ms"]
    if standin.views:
        assert standin.full_requests == full, "the full document was fetched"
        assert figures["list_bytes"] == len(standin.brief_body)
        assert asked_by_name(standin, asked) <= rendered
    else:
        assert standin.brief_requests == brief
        assert figures["list_bytes"] == len(standin.status_body)
        assert len(standin.row_requests) == asked
    return figures


async def test_first_paint_with_50000_checks(browser: Browser) -> None:
    """Figures for the issue: how long until rows show at 50,000 checks, from the brief list
    (and rows by name) and, side by side in the same run, from the full document an older
    daemon sends. No bound on the time here: the figures are printed for the docs."""
    runs = 3
    async with serve(StandIn(n=50_000)) as standin:
        load_before = os.getloadavg()
        paths: dict[str, list[dict[str, Any]]] = {"full": [], "brief": []}
        for run in range(runs):
            for path in ("full", "brief"):
                standin.views = path == "brief"
                paths[path].append(await first_paint(browser, standin, f"{path}-{run}"))
        load_after = os.getloadavg()

        # The last page (brief) goes on to draw bars: for the rows in the DOM only.
        await browser.wait_for(
            f"[...{CHECK_ROWS}].every(r => r.querySelectorAll('svg.strip rect').length === 31)",
            timeout=60,
        )
        rendered = await browser.evaluate(f"{CHECK_ROWS}.length")
        bars = await browser.evaluate(
            "performance.getEntriesByType('resource')"
            ".filter(e => new URL(e.name).pathname.endsWith('/history')).length"
        )
        assert 0 < bars <= rendered
        assert browser.exceptions == []

        keys = (
            "first_paint_ms",
            "list_response_end_ms",
            "list_parsed_ms",
            "sparklines_ms",
            "list_bytes",
            "rows_requests",
            "build_rows_ms",
        )
        lines = [
            f"status page at 50,000 checks, median of {runs} runs; load average "
            f"{load_before[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} CPUs)",
            f"{'':22} {'full /status':>14} {'view=brief':>14}",
        ]
        for key in keys:
            full, brief = (statistics.median(f[key] for f in paths[p]) for p in ("full", "brief"))
            lines.append(f"{key:22} {full:14,.0f} {brief:14,.0f}")
        lines.append(
            "first_paint_ms each run: full "
            + ", ".join(f"{f['first_paint_ms']:.0f}" for f in paths["full"])
            + "; brief "
            + ", ".join(f"{f['first_paint_ms']:.0f}" for f in paths["brief"])
        )
        print("\n" + "\n".join(lines))


async def test_page_and_badges_from_the_real_daemon(tmp_path: Path, browser: Browser) -> None:
    state_file = tmp_path / "flip.txt"
    state_file.write_text("up\nall good\n")
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp_path / "data"),
                "defaults": {"interval": 1},
                "checks": [
                    {
                        "name": "fleet",
                        "probe": "test_static",
                        "targets": [f"endpoint {i}" for i in range(30)],
                    },
                    {"name": SLASHED, "probe": "test_file", "params": {"path": str(state_file)}},
                ],
            }
        )
    )
    with DaemonProcess(config) as daemon:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, what="readyz")
        await browser.goto(daemon.base_url + "/#group=&history_refresh=1&refresh=1")
        await browser.type_text("#filter", "payments")
        row = f"{CHECK_ROWS}[0]"
        await browser.wait_for(
            f"{CHECK_ROWS}.length === 1 && {row}.dataset.check === {json.dumps(SLASHED)}"
        )
        # Today's bar (the last) is up, and the 24h uptime is 100%.
        await browser.wait_for(
            f"{row}.querySelector('svg.strip rect:last-of-type')?.getAttribute('class') === 's-up'"
        )
        await browser.wait_for(f"{row}.querySelector('.up24').textContent === '100%'")
        assert await browser.evaluate(f"{row}.querySelectorAll('svg.strip rect').length") == 31

        # The target goes down: today's bar turns red, uptime drops, an incident opens.
        state_file.write_text("down\nHTTP 503 from initialize\n")
        await browser.wait_for(
            f"{row}.querySelector('svg.strip rect:last-of-type').getAttribute('class') === 's-down'"
        )
        await browser.wait_for(
            f"{row}.querySelector('.up24').textContent.endsWith('%') &&"
            f" {row}.querySelector('.up24').textContent !== '100%'"
        )
        await browser.click("#spacer .row.check .name")
        await browser.wait_for(
            "[...document.querySelectorAll('#detail .incidents li')].some(li =>"
            " li.textContent.includes('(ongoing)') &&"
            " li.querySelector('.first-reason').textContent === 'HTTP 503 from initialize')"
        )
        assert (
            await browser.evaluate(
                "document.querySelectorAll('#detail svg.timeline rect.incident').length"
            )
            == 1
        )
        # Its recent runs come from the daemon's row asked by name (a "/" and spaces in it).
        await browser.wait_for(
            "/latency, last [1-9][0-9]* runs/.test(document.getElementById('detail').textContent)"
        )
        assert await browser.evaluate(f"{PAGE}.byName.get({json.dumps(SLASHED)})._brief")

        # It recovers: the incident ends (no longer ongoing), once.
        state_file.write_text("up\nall good\n")
        await browser.wait_for(
            "document.querySelectorAll('#detail .incidents li').length === 1 &&"
            " !document.querySelector('#detail .incidents li').textContent.includes('(ongoing)')"
        )

        await browser.screenshot(SCREENSHOTS / "statuspage-history-daemon.png")

        # Each badge renders in the browser with a real size.
        badges = [
            f"badge/{quote(SLASHED, safe='')}/{kind}.svg"
            for kind in ("status", "uptime-24h", "uptime-7d", "uptime-30d", "latency")
        ]
        sizes = await browser.evaluate(f"""Promise.all({json.dumps(badges)}.map(src =>
            new Promise(done => {{
                const img = new Image();
                img.onload = () => {{
                    const box = img.getBoundingClientRect();
                    done([src, Math.min(img.naturalWidth, box.width),
                          Math.min(img.naturalHeight, box.height)]);
                }};
                img.onerror = () => done([src, 0, 0]);
                document.body.appendChild(img);  // not #detail: a refresh redraws it
                img.src = src;
            }})))""")
        for src, width, height in sizes:
            assert width > 0 and height > 0, src
        # An unknown check's badge is a grey "not found" badge: it renders too, not broken.
        missing = await browser.evaluate("""new Promise(done => {
            const img = new Image();
            img.onload = () => done(img.naturalWidth);
            img.onerror = () => done(0);
            img.src = 'badge/no%20such%2Fcheck/status.svg'; })""")
        assert missing > 0
        assert browser.exceptions == []
        assert await browser.evaluate("window.__csp") == []


async def test_page_on_a_daemon_with_history_off(tmp_path: Path, browser: Browser) -> None:
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp_path / "data"),
                "defaults": {"interval": 1},
                "history": {"enabled": False},
                "checks": [{"name": SLASHED, "probe": "test_static"}],
            }
        )
    )
    with DaemonProcess(config) as daemon:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, what="readyz")
        await browser.goto(daemon.base_url + "/#group=")
        await browser.wait_for(
            "document.getElementById('history-note').textContent === 'history: history is off'"
        )
        await browser.wait_for(f"{CHECK_ROWS}.length === 1")
        assert await browser.evaluate(f"{CHECK_ROWS}[0].querySelector('.up24').textContent") == ""
        assert await browser.evaluate(f"{CHECK_ROWS}[0].querySelector('.state').textContent") in (
            "up",
            "pending",
        )
        assert browser.exceptions == []
        assert await browser.evaluate("window.__csp") == []
