"""The status page in real headless Chromium against a local server with 5,000 checks.

The server serves the exact bytes the daemon serves at ``GET /`` and a synthetic ``/status``
document of the daemon's shape, whatever the query asks (as a daemon older than
``?view=brief`` and ``?check=`` does: the page must draw from the full rows it gets). The
test types, scrolls and clicks like a person, waits for the page's own refresh loop, and
saves a screenshot (``.cache/ship/statuspage.png``).
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from alivemcp.web.statuspage import CONTENT_SECURITY_POLICY, PAGE_HEADERS, PAGE_HTML
from tests.support import DaemonProcess
from tests.support.aiohttp_server import serve_app
from tests.support.chromium_cdp import (
    Browser,
    csp_watching,
)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / ".cache" / "ship"
N_CHECKS = 5000
REGIONS = ("eu-west-1", "us-east-1", "us-west-2", "ap-southeast-2")
TEAMS = ("search", "payments", "identity", "ingest", "ml", "platform")
PROBES = ("mcp_endpoint", "kafka_canary", "s3_replication_lag", "firehose_freshness")
XSS_CHECK = "mcp/evil-server"
HELD_CHECK = "mcp_endpoint/endpoint-00128"  # down, its alert held (maintenance)
XSS_REASON = '<img src=x onerror="window.__xss = 1"> initialize returned HTML'
# Colours the page uses in light mode (headless Chromium reports no dark preference).
DOWN_RGB = "rgb(207, 34, 46)"
UP_RGB = "rgb(26, 127, 55)"


def synthetic_status(n: int = N_CHECKS, seed: int = 7) -> dict[str, Any]:
    """A /status document of the daemon's shape: mostly up, some of every other state."""
    rng = random.Random(seed)
    now = time.time()
    checks: list[dict[str, Any]] = []
    for i in range(n):
        if i % 125 == 3:
            status = "down"
        elif i % 61 == 5:
            status = "degraded"
        elif i % 401 == 9:
            status = "unknown"
        elif i % 997 == 11:
            status = "pending"
        else:
            status = "up"
        probe = PROBES[i % len(PROBES)]
        history = []
        if status != "pending":
            for k in range(20):
                history.append(
                    [
                        now - (20 - k) * 60,
                        round(rng.uniform(0.01, 0.4), 6),
                        status if k >= 17 else "up",
                    ]
                )
        checks.append(
            {
                "check": f"{probe}/endpoint-{i:05d}",
                "probe": probe,
                "labels": {"region": REGIONS[i % len(REGIONS)], "team": TEAMS[i % len(TEAMS)]},
                "status": status,
                "reason": {
                    "up": "ok",
                    "down": "connect failed: connection refused",
                    "degraded": "initialize took 2.4s (> degraded_latency 1s)",
                    "unknown": "AccessDenied on the prober's own role",
                    "pending": "not run yet",
                }[status],
                "since": None if status == "pending" else now - rng.uniform(30, 90000),
                "last_run": None if status == "pending" else now - rng.uniform(0, 60),
                "duration_seconds": None if status == "pending" else history[-1][1],
                "observations": {}
                if status == "pending"
                else {
                    "total_seconds": history[-1][1],
                    "tools": 12,
                },
                "history": history,
            }
        )
    # A reason a hostile server controls: it must show as text, never run.
    checks.append(
        {
            "check": XSS_CHECK,
            "probe": "mcp_endpoint",
            "labels": {"region": "eu-west-1"},
            "status": "down",
            "reason": XSS_REASON,
            "since": now - 100,
            "last_run": now - 5,
            "duration_seconds": 0.2,
            "observations": {},
            "history": [[now - 5, 0.2, "down"]],
        }
    )
    summary = {s: 0 for s in ("up", "degraded", "down", "unknown", "pending")}
    for check in checks:
        summary[check["status"]] += 1
    # Firing alerts as the daemon's alerting reports them; one held by a maintenance window.
    kinds = {
        "down": ("target", "critical"),
        "degraded": ("target", "warning"),
        "unknown": ("probe_broken", "warning"),
    }
    alerts = [
        {
            "check": c["check"],
            "alert": kinds[c["status"]][0],
            "severity": kinds[c["status"]][1],
            "since": now - 60,
            "reason": c["reason"],
            "notified": c["check"] != HELD_CHECK,
        }
        for c in checks
        if c["status"] in kinds
    ]
    return {"generated_at": now, "summary": summary, "checks": checks, "alerts": alerts}


@dataclass
class StatusServer:
    """What the local server answers; tests change it between page refreshes."""

    doc: dict[str, Any] = field(default_factory=synthetic_status)
    fail_with: int | None = None
    url: str = ""
    requests: int = 0
    queries: list[str] = field(default_factory=list)  # the query string of each request


@pytest.fixture
async def status_server() -> AsyncIterator[StatusServer]:
    state = StatusServer()

    async def page(_: web.Request) -> web.Response:
        # The same bytes and headers (the Content-Security-Policy) as the daemon's.
        return web.Response(
            body=PAGE_HTML, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS
        )

    async def status(request: web.Request) -> web.Response:
        state.requests += 1
        state.queries.append(request.query_string)
        if state.fail_with:
            return web.Response(status=state.fail_with, text="boom")
        state.doc["generated_at"] = time.time()
        return web.json_response(state.doc, dumps=json.dumps)

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/status", status)
    async with serve_app(app) as served:
        state.url = f"{served.url}/"
        yield state


#: Runs before the page's own script: records what the Content-Security-Policy blocked.


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with csp_watching() as b:
        yield b


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


PAGE = "window.alivemcpStatusPage"
CHECK_ROWS = "document.querySelectorAll('#spacer .row.check')"


async def test_page_renders_5000_checks_grouped_filtered_and_safe(
    status_server: StatusServer, browser: Browser
) -> None:
    doc = status_server.doc
    total = len(doc["checks"])
    await browser.goto(status_server.url)
    await browser.wait_for(f"{PAGE}.refreshes >= 1")

    # The summary chips carry the document's counts.
    chips = await browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#summary .chip')]"
        ".map(c => [c.dataset.state, Number(c.querySelector('b').textContent)]))"
    )
    assert chips == {**doc["summary"], "alerts": len(doc["alerts"])}
    assert await browser.evaluate("document.getElementById('shown').textContent") == (
        f"{total} checks"
    )

    # Only the rows in view exist in the DOM: the page stays light at 5,000 checks.
    rendered = await browser.evaluate(f"{CHECK_ROWS}.length")
    assert 10 < rendered < 120, rendered
    items = await browser.evaluate(f"{PAGE}.items.length")
    assert items >= total
    assert await browser.evaluate("document.getElementById('spacer').style.height") == (
        f"{items * 34}px"
    )

    # Default grouping: the label most checks carry; worst group and worst check first.
    assert await browser.evaluate("document.getElementById('group').value") in {"region", "team"}
    await browser.evaluate(
        "(() => { const s = document.getElementById('group'); s.value = 'region';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    groups = await browser.evaluate(f"{PAGE}.groups.map(g => g.name)")
    assert sorted(groups) == sorted(REGIONS)
    first = await browser.evaluate(
        "(() => { const rows = [...document.querySelectorAll('#spacer .row')]"
        ".sort((a, b) => a.getBoundingClientRect().y - b.getBoundingClientRect().y);"
        " return rows.slice(0, 2).map(r => [r.className, r.textContent]); })()"
    )
    assert "group" in first[0][0] and first[0][1].startswith("▾region: ")
    assert "s-down" in first[1][0]
    colour = await browser.evaluate(
        "getComputedStyle(document.querySelector('#spacer .row.check.s-down .dot')).backgroundColor"
    )
    assert colour == DOWN_RGB

    # A sparkline of the last 20 runs in every rendered row that has history.
    points = await browser.evaluate(
        "[...document.querySelectorAll('#spacer .row.check svg.spark polyline')]"
        ".map(p => p.getAttribute('points').split(' ').length)"
    )
    with_history = await browser.evaluate(
        f"[...{CHECK_ROWS}].filter(r => !r.classList.contains('s-pending')).length"
    )
    assert len(points) == with_history
    assert max(points) == 20

    # Typing in the filter box narrows 5,000 checks to one.
    await browser.type_text("#filter", "endpoint-04321")
    await browser.wait_for(
        f"document.getElementById('shown').textContent === '1 of {total} checks'"
    )
    names = await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.dataset.check)")
    assert names == [c["check"] for c in doc["checks"] if c["check"].endswith("endpoint-04321")]

    # key=value matches a label.
    await browser.type_text("#filter", "team=payments")
    expected = sum(1 for c in doc["checks"] if c["labels"].get("team") == "payments")
    await browser.wait_for(
        f"document.getElementById('shown').textContent === '{expected} of {total} checks'"
    )

    # A state chip filters to that state.
    await browser.type_text("#filter", "")
    await browser.click("#summary .chip[data-state='down']")
    await browser.wait_for(
        "document.getElementById('shown').textContent === "
        f"'{doc['summary']['down']} of {total} checks'"
    )
    assert set(
        await browser.evaluate(f"[...{CHECK_ROWS}].map(r => r.querySelector('.state').textContent)")
    ) == {"down"}
    await browser.click("#summary .chip[data-state='down']")

    # The alerts chip filters to the checks with a firing alert; each row carries its alert.
    await browser.click("#summary .chip[data-state='alerts']")
    alerting = len({a["check"] for a in doc["alerts"]})
    await browser.wait_for(
        f"document.getElementById('shown').textContent === '{alerting} of {total} checks'"
    )
    pills = await browser.evaluate(
        f"[...{CHECK_ROWS}].map(r => [r.querySelector('.state').textContent,"
        " r.querySelector('.alert').textContent])"
    )
    assert pills and all(
        pill == {"down": "critical", "degraded": "warning", "unknown": "broken"}[st]
        for st, pill in pills
        if pill != "held"
    )
    await browser.click("#summary .chip[data-state='alerts']")
    await browser.type_text("#filter", HELD_CHECK)
    await browser.wait_for(
        f"{CHECK_ROWS}.length === 1 && {CHECK_ROWS}[0].dataset.check === {json.dumps(HELD_CHECK)}"
    )
    assert (
        await browser.evaluate("document.querySelector('#spacer .row.check .alert').textContent")
        == "held"
    )

    # Server-controlled text is shown as text and never runs.
    await browser.type_text("#filter", "evil-server")
    await browser.wait_for(
        f"{CHECK_ROWS}.length === 1 && {CHECK_ROWS}[0].dataset.check === {json.dumps(XSS_CHECK)}"
    )
    reason = await browser.evaluate(
        "document.querySelector('#spacer .row.check .reason').textContent"
    )
    assert reason == XSS_REASON
    assert await browser.evaluate("document.querySelectorAll('#spacer img').length") == 0
    assert await browser.evaluate("window.__xss === undefined")

    # Clicking a check opens its details: observations and the full history.
    await browser.type_text("#filter", "endpoint-00003")
    await browser.wait_for(
        f"{CHECK_ROWS}.length === 1 && {CHECK_ROWS}[0].dataset.check.endsWith('endpoint-00003')"
    )
    await browser.click("#spacer .row.check .name")
    await browser.wait_for("!document.getElementById('detail').hidden")
    detail = await browser.evaluate("document.getElementById('detail').textContent")
    assert (
        "endpoint-00003" in detail
        and "total_seconds" in detail
        and "connection refused" in (detail)
    )
    await browser.click("#detail .close")
    await browser.wait_for("document.getElementById('detail').hidden")

    # Scrolling to the bottom renders the last rows and nothing else.
    await browser.type_text("#filter", "")
    await browser.wait_for(f"document.getElementById('shown').textContent === '{total} checks'")
    await browser.evaluate(
        "(() => { const v = document.getElementById('viewport'); v.scrollTop = v.scrollHeight;"
        " v.dispatchEvent(new Event('scroll')); })()"
    )
    last_name = await browser.evaluate(
        f"(() => {{ const i = {PAGE}.items; const last = i[i.length - 1];"
        " return last.check ? last.check.check : null; })()"
    )
    await browser.wait_for(
        f"[...{CHECK_ROWS}].some(r => r.dataset.check === {json.dumps(last_name)})"
    )
    assert await browser.evaluate(f"{CHECK_ROWS}.length") < 120
    await browser.evaluate("document.getElementById('viewport').scrollTop = 0")

    render_ms = await browser.evaluate(f"{PAGE}.renderMs")
    print(f"status page: grouping+filtering+painting {total} checks took {render_ms:.1f} ms")
    shot = await browser.screenshot(SCREENSHOTS / "statuspage.png")
    assert png_size(shot) == (1400, 900)
    assert len(shot) > 20_000  # a blank page compresses to a few hundred bytes
    # It asked for the brief list; given full rows, it never asked for rows by name.
    assert status_server.queries and set(status_server.queries) == {"view=brief"}
    assert browser.exceptions == []
    assert browser.console_errors == []
    assert await browser.evaluate("window.__csp") == []  # the page lives within its CSP


async def test_page_refreshes_itself_and_marks_stale_data(
    status_server: StatusServer, browser: Browser
) -> None:
    doc = status_server.doc
    await browser.goto(status_server.url + "#refresh=1&q=endpoint-00000")
    await browser.wait_for(f"{PAGE}.refreshes >= 1")
    await browser.wait_for(f"{CHECK_ROWS}.length === 1")
    assert (
        await browser.evaluate("document.querySelector('#spacer .row.check .state').textContent")
        == "up"
    )
    colour = await browser.evaluate(
        "getComputedStyle(document.querySelector('#spacer .row.check .dot')).backgroundColor"
    )
    assert colour == UP_RGB

    # The check goes down on the server: the open page shows it without a reload.
    target = doc["checks"][0]
    target.update(status="down", reason="HTTP 503 from initialize")
    doc["summary"]["up"] -= 1
    doc["summary"]["down"] += 1
    await browser.wait_for(
        "document.querySelector('#spacer .row.check .state').textContent === 'down'"
    )
    assert (
        await browser.evaluate("document.querySelector('#spacer .row.check .reason').textContent")
        == "HTTP 503 from initialize"
    )
    assert await browser.evaluate("document.title") == (
        f"{doc['summary']['down'] + doc['summary']['degraded']} not up · alivemcp"
    )

    # A grouping the user picked survives refreshes, "nothing" included.
    await browser.evaluate(
        "(() => { const s = document.getElementById('group'); s.value = '';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    seen = await browser.evaluate(f"{PAGE}.refreshes")
    await browser.wait_for(f"{PAGE}.refreshes >= {seen + 2}")
    assert await browser.evaluate("document.getElementById('group').value") == ""
    assert await browser.evaluate("document.querySelectorAll('#spacer .row.group').length") == 0
    assert "group=&" in await browser.evaluate("location.hash") + "&"

    # The server fails: the page keeps the last data and says it is stale.
    status_server.fail_with = 500
    await browser.wait_for("document.getElementById('updated').classList.contains('stale')")
    assert "HTTP 500" in await browser.evaluate("document.getElementById('updated').textContent")
    assert await browser.evaluate(f"{CHECK_ROWS}.length") == 1

    # And recovers by itself.
    status_server.fail_with = None
    await browser.wait_for("!document.getElementById('updated').classList.contains('stale')")
    assert browser.exceptions == []


async def test_page_served_by_the_real_daemon_shows_its_checks(
    tmp_path: Path, browser: Browser
) -> None:
    state_file = tmp_path / "flip.txt"
    state_file.write_text("up\nall good\n")
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "logging": {"format": "json"},
                "data_dir": str(tmp_path / "data"),
                "defaults": {"interval": 1, "labels": {"env": "test"}},
                "checks": [
                    {
                        "name": "fleet",
                        "probe": "test_static",
                        "labels": {"team": "search"},
                        "targets": [f"endpoint {i}" for i in range(200)],
                    },
                    {
                        "name": "payments-api",
                        "probe": "test_file",
                        "labels": {"team": "payments"},
                        "params": {"path": str(state_file)},
                    },
                ],
                # Built-in alerting, to a receiver no one listens on: /status lists firing alerts.
                "alerting": {
                    "receivers": [
                        {"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}
                    ],
                    "default_receivers": ["hook"],
                    "policy": {"failures_to_fire": 1},
                },
            }
        )
    )
    with DaemonProcess(config) as daemon:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, what="readyz")
        await browser.goto(daemon.base_url + "/#refresh=1&group=team")
        await browser.wait_for(f"{PAGE}.refreshes >= 1 && {PAGE}.checks.length === 201")
        groups = await browser.evaluate(f"{PAGE}.groups.map(g => g.name)")
        assert sorted(groups) == ["payments", "search"]
        await browser.type_text("#filter", "payments-api")
        await browser.wait_for(
            f"{CHECK_ROWS}.length === 1 && {CHECK_ROWS}[0].dataset.check === 'payments-api'"
        )
        await browser.wait_for(
            "document.querySelector('#spacer .row.check .state').textContent === 'up'"
        )
        # The daemon sees the target fail; the open page follows without a reload.
        state_file.write_text("down\nHTTP 503 from initialize\n")
        await browser.wait_for(
            "document.querySelector('#spacer .row.check .state').textContent === 'down'"
        )
        assert (
            await browser.evaluate(
                "document.querySelector('#spacer .row.check .reason').textContent"
            )
            == "HTTP 503 from initialize"
        )
        await browser.wait_for(
            "document.querySelectorAll('#spacer .row.check svg.spark circle').length > 0"
        )
        # Its alert fires in the daemon's alerting, and the row says so.
        await browser.wait_for(
            "document.querySelector('#spacer .row.check .alert').textContent === 'critical'"
        )
        await browser.wait_for(
            "document.querySelector(\"#summary .chip[data-state='alerts'] b\").textContent === '1'"
        )
        await browser.type_text("#filter", "")
        await browser.wait_for(f"{CHECK_ROWS}.length > 10")
        # The daemon's brief list has no recent runs: each row's sparkline comes from its row
        # asked by name ("fleet/endpoint 12": a "/" and a space in the query).
        await browser.wait_for(
            f"[...{CHECK_ROWS}].every(r => r.querySelector('svg.spark polyline') !== null)"
        )
        assert await browser.evaluate(
            f"{PAGE}.rowRequests > 0 && {PAGE}.checks.every(c => c._brief)"
        )
        await browser.screenshot(SCREENSHOTS / "statuspage-daemon.png")
        assert await browser.evaluate("window.__csp") == []
        assert browser.exceptions == []
        # The daemon's own headers: the page's CSP, and JSON no browser may sniff as HTML.
        page_headers = response_headers(daemon.base_url + "/")
        assert page_headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert "connect-src 'self'" in CONTENT_SECURITY_POLICY
        for path in ("/status", "/healthz", "/readyz", "/metrics", "/"):
            assert response_headers(daemon.base_url + path)["X-Content-Type-Options"] == (
                "nosniff"
            ), path
        assert response_headers(daemon.base_url + "/status")["Content-Type"].startswith(
            "application/json"
        )


def response_headers(url: str) -> dict[str, str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return dict(resp.headers.items())


@dataclass
class HostileServer:
    """Another origin on loopback serving a status document of its own, readable from any
    origin (CORS *): without the page's origin check, the page would render it."""

    url: str = ""
    requests: int = 0


@pytest.fixture
async def hostile_server() -> AsyncIterator[HostileServer]:
    state = HostileServer()

    async def status(_: web.Request) -> web.Response:
        state.requests += 1
        doc = synthetic_status(3)
        doc["checks"][0]["check"] = "all-good/trust-me"
        return web.json_response(doc, headers={"Access-Control-Allow-Origin": "*"})

    app = web.Application()
    app.router.add_get("/status", status)
    async with serve_app(app) as served:
        state.url = f"{served.url}/status"
        yield state


async def test_page_refuses_a_source_on_another_origin_and_keeps_its_own(
    status_server: StatusServer, hostile_server: HostileServer, browser: Browser
) -> None:
    from urllib.parse import quote

    other_port = hostile_server.url.split(":")[2].split("/")[0]
    refused = [
        hostile_server.url,
        f"//127.0.0.1:{other_port}/status",  # scheme-relative
        f"http://localhost:{other_port}/status",  # same host, other name and port
        "javascript:alert(1)",
    ]
    for n, source in enumerate(refused):
        # A query string of its own per case: a new document, not a fragment change.
        await browser.goto(f"{status_server.url}?case={n}#source={quote(source, safe='')}")
        await browser.wait_for("document.getElementById('updated').classList.contains('stale')")
        updated = await browser.evaluate("document.getElementById('updated').textContent")
        assert "refused #source: not this page's origin" in updated
        message = await browser.evaluate("document.querySelector('#spacer .empty').textContent")
        assert message.startswith("Not loading status from ") and source in message
        assert await browser.evaluate(f"{PAGE}.refreshes") == 0
    own = status_server.requests
    await browser.evaluate("new Promise(r => setTimeout(r, 1500))")
    assert hostile_server.requests == 0  # never fetched, not even once
    assert status_server.requests == own  # and the page fetched nothing else instead
    assert await browser.evaluate("document.body.textContent.includes('trust-me')") is False

    # A source on the page's own origin still works, relative or absolute.
    for n, source in enumerate(["status?view=1", status_server.url + "status"]):
        await browser.goto(f"{status_server.url}?ok={n}#source={quote(source, safe='')}")
        await browser.wait_for(f"{PAGE}.refreshes >= 1")
        assert await browser.evaluate(f"{PAGE}.checks.length") == len(status_server.doc["checks"])
        assert not await browser.evaluate(
            "document.getElementById('updated').classList.contains('stale')"
        )
    assert status_server.requests >= own + 2
    assert await browser.evaluate("window.__csp") == []
    assert browser.exceptions == []


async def test_page_in_cluster_mode_names_the_answering_replica_and_each_checks_owner(
    status_server: StatusServer, browser: Browser
) -> None:
    """Cluster mode: the document names the replica that answered, each row the replica that
    produced its last result (the rows of a brief list carry it too)."""
    doc = status_server.doc
    doc["replica"] = "alivemcp-1"
    for i, row in enumerate(doc["checks"]):
        row["owner"] = f"alivemcp-{i % 3}"
    name = doc["checks"][2]["check"]
    await browser.goto(status_server.url + "#check=" + name)
    await browser.wait_for(f"{PAGE}.refreshes >= 1")
    await browser.wait_for("document.getElementById('updated').textContent.includes('replica')")
    assert "replica alivemcp-1" in await browser.evaluate(
        "document.getElementById('updated').textContent"
    )
    await browser.wait_for("!document.getElementById('detail').hidden")
    detail = await browser.evaluate("document.getElementById('detail').textContent")
    assert "probed byalivemcp-2" in detail
    assert browser.exceptions == []
