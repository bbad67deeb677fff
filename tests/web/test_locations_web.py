"""Several locations on the web face (issue #37), over real HTTP from the daemon's own server:
``GET /api/v1/checks/{name}`` (a check's status row, its locations' votes included) and its
routing beside the views, ``?location=`` on the history endpoints (a location's own history,
written through a real HistoryStore under ``check@location``), the
``alivemcp_check_location_status`` state set, the MCP face's ``get_check``, and the status page
in headless Chromium drawing a dot per location (also over 50,000 checks)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from mcp.client.client import Client
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from alivemcp.cluster.verdicts import location_history_name
from alivemcp.engine.results import CheckInfo, CheckResult, LocationVote
from alivemcp.engine.status import StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.probe import Status
from alivemcp.web.metrics import Metrics
from alivemcp.web.server import HttpServer
from alivemcp.web.statuspage import PAGE_HEADERS, PAGE_HTML
from tests.support.aiohttp_server import serve_app
from tests.support.chromium_cdp import Browser, csp_watching

LOCS = ("eu-west", "us-east", "ap-south")
XSS = '<img src=x onerror="window.__xss = 1">'
HOSTILE = f"HTTP 503: {XSS} \u202etxt.exe"

PAYMENTS = CheckInfo("payments-mcp", "mcp_endpoint", {"team": "payments"}, locations=LOCS)
#: Awkward names: a "/" and a space; a name ending in a view; a "%" and an "@".
SLASHED = CheckInfo("search/api eu", "mcp_endpoint", {"team": "search"}, locations=LOCS[:2])
VIEWISH = CheckInfo("team/uptime", "mcp_endpoint", {"team": "search"}, locations=LOCS)
PERCENT = CheckInfo("100% ok@home", "mcp_endpoint", {}, locations=LOCS[:2])
SOLO = CheckInfo("solo", "mcp_endpoint", {}, locations=("eu-west",))
PLAIN = CheckInfo("plain", "mcp_endpoint", {})
NOT_MINE = CheckInfo("not-mine", "mcp_endpoint", {}, locations=LOCS)
CHECKS = (PAYMENTS, SLASHED, VIEWISH, PERCENT, SOLO, PLAIN, NOT_MINE)

#: payments-mcp: down from two of three locations.
PAYMENTS_VOTES = {
    "eu-west": ("down", "connect refused", "r1", True),
    "us-east": ("down", "timeout after 10s", "r2", True),
    "ap-south": ("up", "tools/list: 4 tools", "r3", True),
}
#: search/api eu: us-east's vote is stale (it does not vote), eu-west's reason is hostile.
SLASHED_VOTES = {
    "eu-west": ("degraded", HOSTILE, "r1", True),
    "us-east": ("down", "connect refused", "r2", False),
}


def votes(spec: Mapping[str, tuple[str, str, str, bool]], at: float) -> dict[str, LocationVote]:
    return {
        loc: LocationVote(Status(status), reason, at - 1.5, at - 1.0, replica, fresh)
        for loc, (status, reason, replica, fresh) in spec.items()
    }


def verdict(
    info: CheckInfo, status: str, reason: str, at: float, locations: dict[str, LocationVote] | None
) -> CheckResult:
    return CheckResult(
        info,
        Status(status),
        reason,
        0.25,
        at - 0.25,
        at,
        observations={"total_seconds": 0.25},
        replica="r1",
        locations=locations,
    )


def location_run(info: CheckInfo, location: str, status: str, at: float) -> CheckResult:
    """A location's own result, as the quorum stage keeps it in history."""
    named = dataclasses.replace(info, name=location_history_name(info.name, location))
    return CheckResult(named, Status(status), f"{status} from {location}", 0.2, at, at + 0.2)


@dataclass
class Served:
    url: str
    store: StatusStore
    history: HistoryStore
    now: float


@asynccontextmanager
async def serve(data_dir: Path) -> AsyncIterator[Served]:
    now = time.time()
    store = StatusStore(replica="r0")
    store.set_checks(CHECKS)
    history = HistoryStore(data_dir, HistoryConfig())
    history.set_checks(CHECKS)
    history.start()
    # History: the verdict of payments-mcp went down 4 minutes ago; eu-west saw it first, 5
    # minutes ago (its own incident); ap-south never did. Written under both names.
    for ago in (600, 540, 480, 420, 360, 300, 240, 180, 120, 60):
        at = now - ago
        history.consume(
            verdict(PAYMENTS, "down" if ago <= 240 else "up", "x", at, votes(PAYMENTS_VOTES, at))
        )
        history.consume(location_run(PAYMENTS, "eu-west", "down" if ago <= 300 else "up", at))
        history.consume(location_run(PAYMENTS, "us-east", "down" if ago <= 240 else "up", at))
        history.consume(location_run(PAYMENTS, "ap-south", "up", at))
        history.consume(location_run(SLASHED, "eu-west", "degraded", at))
    assert await history.flush(10), "history never wrote the runs"
    # The status store: the quorum verdicts, as the quorum stage records them.
    store.record(
        verdict(
            PAYMENTS,
            "down",
            "down from 2 of 3 locations: eu-west (connect refused), us-east (timeout after "
            "10s); ap-south up",
            now - 30,
            votes(PAYMENTS_VOTES, now - 30),
        )
    )
    store.record(
        verdict(SLASHED, "degraded", "degraded from 1 of 2", now - 20, votes(SLASHED_VOTES, now))
    )
    all_up = {loc: ("up", "ok", "r1", True) for loc in LOCS}
    store.record(verdict(VIEWISH, "up", "up from 3 of 3", now - 10, votes(all_up, now)))
    store.record(
        verdict(
            PERCENT, "up", "up from 2 of 2", now - 10, votes(dict(list(all_up.items())[:2]), now)
        )
    )
    store.record(
        verdict(SOLO, "up", "ok", now - 10, votes({"eu-west": ("up", "ok", "r1", True)}, now))
    )
    store.record(verdict(PLAIN, "up", "ok", now - 10, None))
    store.record(verdict(NOT_MINE, "down", "down from 3 of 3", now - 10, votes(all_up, now)))
    metrics = Metrics(store)
    metrics.checks.set_owned(lambda name: name != NOT_MINE.name)
    server = HttpServer(store, metrics, lambda: True, lambda: True, None, history, mcp=True)
    await server.start("127.0.0.1", 0)
    try:
        yield Served(f"http://127.0.0.1:{server.port}", store, history, now)
    finally:
        await server.stop()
        await history.stop()


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with serve(tmp_path_factory.mktemp("locations")) as s:
        yield s


async def get(
    served: Served, path: str, headers: Mapping[str, str] | None = None
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(served.url + path, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def get_json(served: Served, path: str, status: int = 200) -> Any:
    got, text = await get(served, path)
    assert got == status, (path, got, text[:500])
    return json.loads(text)


def q(name: str) -> str:
    return quote(name, safe="")


# -- GET /api/v1/checks/{name} -------------------------------------------------------------------


async def test_a_check_is_its_status_row_with_its_votes_and_uptime(served: Served) -> None:
    doc = await get_json(served, "/api/v1/checks/payments-mcp")
    row = served.store.snapshot(only=["payments-mcp"])["checks"][0]
    assert {k: v for k, v in doc.items() if k not in ("uptime", "generated_at")} == json.loads(
        json.dumps(row)
    )
    assert doc["status"] == "down" and doc["owner"] == "r1"
    assert doc["reason"].startswith("down from 2 of 3 locations: eu-west (connect refused)")
    assert doc["locations"] == {
        loc: {
            "status": status,
            "reason": reason,
            "last_run": served.now - 30 - 1.5,
            "replica": replica,
            "fresh": fresh,
        }
        for loc, (status, reason, replica, fresh) in PAYMENTS_VOTES.items()
    }
    assert doc["observations"] == {"total_seconds": 0.25}
    assert [run[2] for run in doc["history"]] == ["down"]
    # The live windows, as /api/v1/checks has them: the verdict's (4 of 10 runs down).
    assert set(doc["uptime"]) == {"24h", "7d", "30d"}
    assert math.isclose(doc["uptime"]["24h"]["up_ratio"], 0.6)
    listed = await get_json(served, "/api/v1/checks")
    [entry] = [c for c in listed["checks"] if c["check"] == "payments-mcp"]
    assert entry["uptime"] == doc["uptime"]
    assert abs(doc["generated_at"] - time.time()) < 60


async def test_a_check_without_locations_has_no_locations_field(served: Served) -> None:
    doc = await get_json(served, "/api/v1/checks/plain")
    assert "locations" not in doc and doc["status"] == "up"


async def test_awkward_names_route_to_the_check_and_views_keep_working(served: Served) -> None:
    # "/" and space: encoded, or the "/" literal (the last segment names no view).
    for path in (f"/api/v1/checks/{q(SLASHED.name)}", "/api/v1/checks/search/api%20eu"):
        doc = await get_json(served, path)
        assert doc["check"] == SLASHED.name and set(doc["locations"]) == {"eu-west", "us-east"}
    assert (await get_json(served, f"/api/v1/checks/{q(PERCENT.name)}"))["check"] == PERCENT.name
    # A name ending in a view: encoded, it is the check; literal, the view of "team".
    assert (await get_json(served, "/api/v1/checks/team%2Fuptime"))["check"] == "team/uptime"
    assert await get_json(served, "/api/v1/checks/team/uptime", 404) == {
        "error": "no check named 'team'"
    }
    up = await get_json(served, "/api/v1/checks/team%2Fuptime/uptime?window=1h")
    assert up["check"] == "team/uptime" and up["window"] == "1h"
    # The views of a check with a "/" in its name, encoded and literal.
    for name in (q(SLASHED.name), "search/api%20eu"):
        assert (await get_json(served, f"/api/v1/checks/{name}/history"))["check"] == SLASHED.name
        assert (await get_json(served, f"/api/v1/checks/{name}/incidents"))["incidents"] == []
    # The tool-surface views still answer (no surface recorded here), and the changelog.
    for view in ("tools", "tools/diff"):
        doc = await get_json(served, f"/api/v1/checks/payments-mcp/{view}", 404)
        assert "tool surface" in doc["error"], doc
    assert "changes" in await get_json(served, "/api/v1/changes")


async def test_unknown_checks_and_paths_are_json_404(served: Served) -> None:
    assert await get_json(served, "/api/v1/checks/nope", 404) == {"error": "no check named 'nope'"}
    assert await get_json(served, f"/api/v1/checks/{q('no/such check')}", 404) == {
        "error": "no check named 'no/such check'"
    }
    # A literal "/": a view that does not exist, or a check that does not; the answer says both.
    doc = await get_json(served, "/api/v1/checks/payments-mcp/latency", 404)
    assert doc["error"].startswith("no API endpoint '/api/v1/checks/payments-mcp/latency'")
    assert "nor is there a check 'payments-mcp/latency'" in doc["error"]
    for path in ("/api/v1/nothing", "/api/v1/checks/"):
        doc = await get_json(served, path, 404)
        assert "/api/v1/checks/{name} and" in doc["error"], doc
        assert "?location=" in doc["error"], doc
    bad = await get_json(served, "/api/v1/checks/payments-mcp?window=1h", 400)
    assert bad["parameter"] == "window"


# -- ?location= ----------------------------------------------------------------------------------


async def test_a_locations_own_history_beside_the_verdicts(served: Served) -> None:
    base = "/api/v1/checks/payments-mcp"
    verdict_doc = await get_json(served, f"{base}/uptime?window=1h")
    assert verdict_doc["check"] == "payments-mcp" and "location" not in verdict_doc
    assert verdict_doc["runs"] == {"up": 6, "degraded": 0, "down": 4, "unknown": 0}
    expected = {"eu-west": (5, 5), "us-east": (6, 4), "ap-south": (10, 0)}
    for loc, (up, down) in expected.items():
        doc = await get_json(served, f"{base}/uptime?window=1h&location={loc}")
        assert doc["check"] == "payments-mcp" and doc["location"] == loc
        assert doc["runs"] == {"up": up, "degraded": 0, "down": down, "unknown": 0}, loc
    series = await get_json(served, f"{base}/history?location=eu-west&window=1h")
    assert series["location"] == "eu-west" and series["resolution_seconds"] == 60
    assert sum(b["runs"]["down"] for b in series["buckets"]) == 5
    incidents = await get_json(served, f"{base}/incidents?location=eu-west")
    assert incidents["check"] == "payments-mcp" and incidents["location"] == "eu-west"
    [incident] = incidents["incidents"]
    assert incident["check"] == "payments-mcp" and incident["location"] == "eu-west"
    assert incident["first_reason"] == "down from eu-west" and incident["ended_at"] is None
    assert math.isclose(incident["started_at"], served.now - 300, abs_tol=0.01)
    assert (await get_json(served, f"{base}/incidents?location=ap-south"))["incidents"] == []
    [verdicts] = (await get_json(served, f"{base}/incidents"))["incidents"]
    assert math.isclose(verdicts["started_at"], served.now - 240, abs_tol=0.01)
    # A check with a "/" in its name, literal and encoded.
    for name in ("search/api%20eu", q(SLASHED.name)):
        doc = await get_json(served, f"/api/v1/checks/{name}/uptime?window=1h&location=eu-west")
        assert doc["check"] == SLASHED.name and doc["runs"]["degraded"] == 10


async def test_location_parameter_errors(served: Served) -> None:
    base = "/api/v1/checks/payments-mcp"
    for view in ("uptime", "history", "incidents"):
        doc = await get_json(served, f"{base}/{view}?location=mars", 404)
        assert doc["parameter"] == "location"
        assert doc["error"].startswith("no history of check 'payments-mcp' from location 'mars'")
        doc = await get_json(served, f"{base}/{view}?location={q('eu west')}", 400)
        assert doc["parameter"] == "location" and "not a location name" in doc["error"]
        doc = await get_json(served, f"{base}/{view}?location=eu-west&location=us-east", 400)
        assert doc["parameter"] == "location" and "give it once" in doc["error"]
    # A location of a check not kept apart (one location): 404, not the check's own history.
    doc = await get_json(served, "/api/v1/checks/solo/uptime?location=eu-west", 404)
    assert doc["parameter"] == "location"
    assert await get_json(served, "/api/v1/checks/nope/uptime?location=eu-west", 404) == {
        "error": "no check named 'nope'"
    }
    doc = await get_json(served, f"{base}/uptime?locaton=eu-west", 400)
    assert doc["allowed"] == ["window", "location"]


# -- metrics -------------------------------------------------------------------------------------


def location_samples(text: str) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "alivemcp_check_location_status":
            for s in family.samples:
                key = (s.labels["check"], s.labels["location"], s.labels["status"])
                assert key not in out, key
                assert set(s.labels) == {"check", "location", "status"}
                out[key] = s.value
    return out


async def test_metrics_carry_each_locations_vote_as_a_state_set(served: Served) -> None:
    status, text = await get(served, "/metrics")
    assert status == 200
    assert "# TYPE alivemcp_check_location_status gauge\n" in text
    assert "# HELP alivemcp_check_location_status State set of each location's vote" in text
    samples = location_samples(text)
    statuses = ("up", "degraded", "down", "unknown")
    expected: dict[tuple[str, str, str], float] = {}
    current = {
        PAYMENTS.name: {"eu-west": "down", "us-east": "down", "ap-south": "up"},
        # us-east's vote is stale: it does not vote, unknown.
        SLASHED.name: {"eu-west": "degraded", "us-east": "unknown"},
        VIEWISH.name: dict.fromkeys(LOCS, "up"),
        PERCENT.name: dict.fromkeys(LOCS[:2], "up"),
    }
    for check, by_location in current.items():
        for loc, vote in by_location.items():
            for s in statuses:
                expected[(check, loc, s)] = 1.0 if s == vote else 0.0
    # Not "solo" (one location: its verdict is its result), "plain", nor "not-mine" (another
    # replica exports it).
    assert samples == expected
    # The verdict stays on the per-check families.
    assert (
        'alivemcp_check_status{check="payments-mcp",probe="mcp_endpoint",team="payments",'
        'status="down"} 1.0'
    ) in text
    # OpenMetrics: the same samples, the body still one valid exposition.
    status, om = await get(
        served, "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200 and om.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(om)}  # type: ignore[no-untyped-call]
    got = {
        (s.labels["check"], s.labels["location"], s.labels["status"]): s.value
        for s in families["alivemcp_check_location_status"].samples
    }
    assert got == expected


# -- the MCP face --------------------------------------------------------------------------------


async def test_mcp_get_check_says_each_locations_vote(served: Served) -> None:
    async with Client(f"{served.url}/mcp", mode="legacy") as client:
        result = await client.call_tool("get_check", {"check": SLASHED.name})
        read = await client.read_resource(f"alivemcp://checks/{q(PAYMENTS.name)}")
        plain = await client.call_tool("get_check", {"check": "plain"})
    assert not result.is_error, result.content
    doc = result.structured_content
    assert isinstance(doc, dict)
    locations = doc["locations"]
    assert set(locations) == {"eu-west", "us-east"}
    assert locations["us-east"] == {
        "status": "down",
        "reason": "connect refused",
        "last_run": served.now - 1.5,
        "replica": "r2",
        "fresh": False,
    }
    # A target's text reaches a model inert: the bidi override shown as an escape.
    assert "\u202e" not in locations["eu-west"]["reason"]
    assert "<U+202E>" in locations["eu-west"]["reason"]
    (content,) = read.contents
    resource = json.loads(content.text)  # type: ignore[union-attr]
    assert resource["locations"]["eu-west"]["status"] == "down"
    assert resource["locations"]["ap-south"]["replica"] == "r3"
    assert plain.structured_content is not None
    assert plain.structured_content.get("locations") is None


# -- the status page -----------------------------------------------------------------------------

PAGE = "window.alivemcpStatusPage"


def dots_of(name: str) -> str:
    """The location dots of a check's row: [location, class, title] each."""
    return (
        f"[...document.querySelectorAll('#spacer .row.check[data-check={json.dumps(name)}] .loc')]"
        ".map(d => [d.dataset.location, d.className, d.title])"
    )


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    b: Browser
    async with csp_watching() as b:
        yield b


async def test_status_page_draws_a_dot_per_location(served: Served, browser: Browser) -> None:
    await browser.goto(f"{served.url}/#group=")
    await browser.wait_for(f"{PAGE}.refreshes >= 1")
    await browser.wait_for("document.querySelectorAll('#spacer .row.check').length === 7")
    dots = await browser.evaluate(dots_of(PAYMENTS.name))
    assert [d[0] for d in dots] == ["ap-south", "eu-west", "us-east"]
    assert [d[1] for d in dots] == ["loc s-up", "loc s-down", "loc s-down"]
    assert dots[1][2].startswith("eu-west: down \u2014 connect refused (replica r1)\nlast run ")
    assert dots[0][2].startswith("ap-south: up \u2014 tools/list: 4 tools (replica r3)")
    # A stale vote: hollow and faded, and its title says it does not vote. The hostile reason
    # is an attribute's text: no element made of it, nothing run.
    dots = await browser.evaluate(dots_of(SLASHED.name))
    assert [d[1] for d in dots] == ["loc s-degraded", "loc s-down stale"]
    assert dots[1][2].startswith(
        "us-east: down \u2014 connect refused (replica r2); stale, not voting"
    )
    assert dots[0][2].startswith(f"eu-west: degraded \u2014 {HOSTILE} (replica r1)")
    stale = await browser.evaluate(
        "(() => { const d = document.querySelector('.loc.stale'), s = getComputedStyle(d);"
        " return [s.backgroundColor, Number(s.opacity)]; })()"
    )
    assert stale == ["rgba(0, 0, 0, 0)", 0.5]
    assert await browser.evaluate("window.__xss") is None
    assert await browser.evaluate("document.querySelectorAll('#spacer img').length") == 0
    # The reason's text follows the dots in the same cell.
    cell = await browser.evaluate(
        "document.querySelector('#spacer .row.check[data-check=\"payments-mcp\"] .reason')"
        ".textContent"
    )
    assert cell.startswith("down from 2 of 3 locations")
    assert await browser.evaluate(dots_of("plain")) == []
    assert len(await browser.evaluate(dots_of("solo"))) == 1
    # The opened check lists its locations.
    await browser.click('#spacer .row.check[data-check="payments-mcp"] .name')
    await browser.wait_for("!document.getElementById('detail').hidden")
    rows = await browser.evaluate(
        "[...document.querySelectorAll('#detail table.votes tr')]"
        ".map(r => [...r.cells].map(c => c.textContent.trim()))"
    )
    assert [r[:2] for r in rows] == [["ap-south", "up"], ["eu-west", "down"], ["us-east", "down"]]
    assert rows[1][2].startswith("connect refused · ") and rows[1][2].endswith(" ago · r1")
    assert await browser.evaluate("window.__csp") == []
    assert browser.exceptions == []


async def test_status_page_takes_what_a_compact_brief_list_leaves_out(
    served: Served, browser: Browser
) -> None:
    """A brief list whose votes carry only their status and freshness (the size of the list
    at 50,000 checks): the dots show from it at once, and the rows on screen get reasons and
    replicas from their full rows, asked by name. The daemon's own rows, served as is."""

    async def page(_: web.Request) -> web.Response:
        return web.Response(
            body=PAGE_HTML, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
        )

    async def status(request: web.Request) -> web.Response:
        names = request.query.getall("check", [])
        if names:
            return web.json_response(served.store.snapshot(only=names))
        doc = served.store.snapshot(brief=True)
        for row in doc["checks"]:
            if "locations" in row:
                row["locations"] = {
                    loc: {"status": v["status"], "fresh": v["fresh"]}
                    for loc, v in row["locations"].items()
                }
        return web.json_response(doc)

    async def no_history(_: web.Request) -> web.Response:
        return web.json_response({"error": "history is disabled"}, status=503)

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/status", status)
    app.router.add_get("/api/{rest:.*}", no_history)
    async with serve_app(app) as standin:
        await browser.goto(f"{standin.url}/#group=")
        await browser.wait_for(f"{PAGE}.refreshes >= 1")
        # The full rows come moments after the list: then the replicas and reasons show.
        await browser.wait_for(f"{dots_of(PAYMENTS.name)}.some(d => d[2].includes('(replica'))")
        dots = await browser.evaluate(dots_of(PAYMENTS.name))
        assert [d[1] for d in dots] == ["loc s-up", "loc s-down", "loc s-down"]
        assert dots[1][2].startswith("eu-west: down \u2014 connect refused (replica r1)")
        dots = await browser.evaluate(dots_of(SLASHED.name))
        assert dots[1][2].startswith("us-east: down \u2014 connect refused (replica r2); stale")
        assert browser.exceptions == []
        assert await browser.evaluate("window.__csp") == []


def many_checks(n: int, now: float) -> Iterator[CheckResult]:
    for i in range(n):
        info = CheckInfo(
            f"fleet/endpoint-{i:05d}", "mcp_endpoint", {"region": "eu"}, locations=LOCS
        )
        spec = {
            loc: ("down" if (i + j) % 97 == 0 else "up", "ok", f"r{j}", (i + j) % 89 != 0)
            for j, loc in enumerate(LOCS)
        }
        yield verdict(info, "up", "up from 3 of 3", now, votes(spec, now))


async def test_status_page_with_50000_checks_of_three_locations(
    tmp_path: Path, browser: Browser
) -> None:
    """The brief list carries every row's votes; the page paints from it and draws dots for
    the rows in the DOM only. Figures printed for the docs; no bound on time."""
    now = time.time()
    results = list(many_checks(50_000, now))
    store = StatusStore(replica="r0")
    store.set_checks(r.check for r in results)
    for r in results:
        store.record(r)
    brief = json.dumps(store.snapshot(brief=True)).encode()
    without = json.dumps(
        {
            **store.snapshot(brief=True),
            "checks": [
                {k: v for k, v in row.items() if k != "locations"}
                for row in store.snapshot(brief=True)["checks"]
            ],
        }
    ).encode()
    server = HttpServer(store, Metrics(store), lambda: True, lambda: True)
    await server.start("127.0.0.1", 0)
    try:
        await browser.goto(f"http://127.0.0.1:{server.port}/#group=")
        await browser.wait_for(f"{PAGE}.firstPaintMs !== null", timeout=120)
        figures = await browser.evaluate(
            f"({{paint: {PAGE}.firstPaintMs, parsed: {PAGE}.firstStatusMs,"
            f" checks: {PAGE}.checks.length, build: {PAGE}.renderMs,"
            " rows: document.querySelectorAll('#spacer .row.check').length,"
            " dots: document.querySelectorAll('#spacer .row.check .loc').length})"
        )
        assert figures["checks"] == 50_000
        assert 0 < figures["rows"] < 200 and figures["dots"] == 3 * figures["rows"]
        assert browser.exceptions == []
        assert await browser.evaluate("window.__csp") == []
    finally:
        await server.stop()
    print(
        f"\nstatus page, 50,000 checks x 3 locations: brief list {len(brief):,} bytes "
        f"({len(without):,} without the votes); list parsed at {figures['parsed']:.0f} ms, "
        f"first paint at {figures['paint']:.0f} ms (rows built in {figures['build']:.0f} ms); "
        f"{figures['rows']} rows, {figures['dots']} dots in the DOM"
    )
