"""Badges on the real daemon: SVG that parses, colours by status and uptime, widths that fit the
text, caching (ETag, 304), not-found and history-off badges; and the rendering rules."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alivemcp.web import badges
from alivemcp.web.badges import (
    Badge,
    format_latency,
    format_uptime,
    render,
    text_width,
    uptime_colour,
)
from tests.support import DaemonProcess, write_daemon_config

SVG = "{http://www.w3.org/2000/svg}"
LONG_NAME = "mcp/https://a-rather-long-host-name.example.test/mcp/v1/stream?tenant=acme"
MARKUP_NAME = "evil <script>alert(\"x\")</script> & 'co'"
GREEN, RED, YELLOW, GREY = "#4c1", "#e05d44", "#dfb317", "#9f9f9f"


def fetch(
    d: DaemonProcess, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(d.base_url + path, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def badge(
    d: DaemonProcess, name: str, kind: str, expect: int = 200
) -> tuple[dict[str, str], ET.Element]:
    status, headers, body = fetch(d, f"/badge/{urllib.parse.quote(name, safe='')}/{kind}")
    assert status == expect, (name, kind, status, body[:300])
    assert headers["Content-Type"] == "image/svg+xml"
    assert headers["Cache-Control"] == "public, max-age=60"
    assert headers["ETag"].startswith('"')
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    return headers, ET.fromstring(body)  # well-formed XML, whatever the name held


def texts(svg: ET.Element) -> tuple[str, str]:
    """(label, message) as drawn (each text is drawn twice: shadow and face)."""
    drawn = [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("aria-hidden") is None]
    assert len(drawn) == 2
    return drawn[0], drawn[1]


def decided_runs(d: DaemonProcess, name: str) -> int:
    runs = d.get_json(f"/api/v1/checks/{urllib.parse.quote(name, safe='')}/uptime")["runs"]
    return int(runs["up"] + runs["degraded"] + runs["down"])


def colour(svg: ET.Element) -> str:
    rects = list(svg.iter(f"{SVG}rect"))
    return rects[2].get("fill") or ""  # clip rect, label rect, message rect, gloss


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, Path]]:
    tmp = tmp_path_factory.mktemp("badges")
    flip = tmp / "flip.state"
    flip.write_text("up\n")
    checks: list[dict[str, Any]] = [
        {"name": "up", "probe": "test_static", "interval": 0.5},
        {"name": "down", "probe": "test_static", "interval": 0.5, "params": {"status": "down"}},
        {"name": "deg", "probe": "test_static", "interval": 0.5, "params": {"status": "degraded"}},
        {"name": "flip", "probe": "test_file", "interval": 0.3, "params": {"path": str(flip)}},
        {"name": LONG_NAME, "probe": "test_static", "interval": 0.5},
        {"name": MARKUP_NAME, "probe": "test_static", "interval": 0.5},
        {
            "name": "slow",
            "probe": "test_sleepy",
            "interval": 600,
            "timeout": 590,
            "params": {"seconds": 500, "markers": str(tmp / "m")},
        },
    ]
    config = write_daemon_config(tmp / "c.yaml", checks, scheduler={"shutdown_grace": 0.5})
    with DaemonProcess(config) as d:
        ran = ("up", "down", "deg", "flip", LONG_NAME, MARKUP_NAME)
        d.wait_for(lambda: all(d.status_of(n).get("last_run") for n in ran), what="first runs")
        # The uptime badges read the history's in-memory counts, filled once a batch commits.
        d.wait_for(lambda: all(decided_runs(d, n) for n in ran), what="first runs in history")
        yield d, flip


@pytest.mark.parametrize(
    ("name", "message", "fill"),
    [
        ("up", "up", GREEN),
        ("down", "down", RED),
        ("deg", "degraded", YELLOW),
        ("slow", "pending", GREY),
    ],
)
def test_status_badge_colours(daemon: Any, name: str, message: str, fill: str) -> None:
    d, _ = daemon
    _, svg = badge(d, name, "status.svg")
    assert texts(svg) == (name, message)
    assert colour(svg) == fill
    assert svg.get("aria-label") == f"{name}: {message}"


@pytest.mark.parametrize("window", ["24h", "7d", "30d"])
def test_uptime_badges(daemon: Any, window: str) -> None:
    d, _ = daemon
    _, svg = badge(d, "up", f"uptime-{window}.svg")
    assert texts(svg) == (f"uptime {window}", "100%") and colour(svg) == GREEN
    _, svg = badge(d, "down", f"uptime-{window}.svg")
    assert texts(svg) == (f"uptime {window}", "0%") and colour(svg) == RED
    _, svg = badge(d, "slow", f"uptime-{window}.svg")
    assert texts(svg) == (f"uptime {window}", "no data") and colour(svg) == GREY


def test_latency_badge_is_the_24h_p95(daemon: Any) -> None:
    d, _ = daemon
    p95 = d.get_json("/api/v1/checks/up/uptime?window=24h")["latency_seconds"]["p95"]
    _, svg = badge(d, "up", "latency.svg")
    label, message = texts(svg)
    assert label == "p95 24h" and message.endswith(" ms") and colour(svg) == "#007ec6"
    assert (
        message == format_latency(p95)
        or d.get_json(  # a batch may land between the reads
            "/api/v1/checks/up/uptime?window=24h"
        )["latency_seconds"]["p95"]
        != p95
    )
    assert texts(badge(d, "slow", "latency.svg")[1]) == ("p95 24h", "no data")


def test_label_override(daemon: Any) -> None:
    d, _ = daemon
    status, _, body = fetch(d, "/badge/up/uptime-7d.svg?label=API%20uptime")
    assert status == 200 and texts(ET.fromstring(body)) == ("API uptime", "100%")


def test_names_are_escaped_and_widths_fit_the_text(daemon: Any) -> None:
    d, _ = daemon
    _, svg = badge(d, MARKUP_NAME, "status.svg")
    assert texts(svg) == (MARKUP_NAME, "up")
    assert not list(svg.iter(f"{SVG}script"))
    _, long_svg = badge(d, LONG_NAME, "status.svg")
    assert texts(long_svg)[0] == LONG_NAME
    width = int(long_svg.get("width") or 0)
    assert width == round(text_width(LONG_NAME) + 10) + round(text_width("up") + 10)
    assert width > int(badge(d, "up", "status.svg")[1].get("width") or 0) + 300


def test_etag_and_304(daemon: Any) -> None:
    d, flip = daemon
    headers, _ = badge(d, "up", "status.svg")
    etag = headers["ETag"]
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        status, again, body = fetch(d, "/badge/up/status.svg", {"If-None-Match": sent})
        assert status == 304 and body == b"", sent
        assert again["ETag"] == etag and again["Cache-Control"] == "public, max-age=60"
    assert fetch(d, "/badge/up/status.svg", {"If-None-Match": '"stale"'})[0] == 200
    # A new status is a new body and a new tag: the old tag no longer matches.
    old = badge(d, "flip", "status.svg")[0]["ETag"]
    flip.write_text("down\n")
    d.wait_for(lambda: texts(badge(d, "flip", "status.svg")[1])[1] == "down", what="flip down")
    status, headers, _ = fetch(d, "/badge/flip/status.svg", {"If-None-Match": old})
    assert status == 200 and headers["ETag"] != old
    flip.write_text("up\n")


def test_head_request(daemon: Any) -> None:
    d, _ = daemon
    status, headers, body = fetch(d, "/badge/up/status.svg", method="HEAD")
    assert status == 200 and body == b"" and headers["Content-Type"] == "image/svg+xml"


@pytest.mark.parametrize("kind", ["status.svg", "uptime-24h.svg", "uptime-30d.svg", "latency.svg"])
def test_unknown_check_is_a_grey_404_badge(daemon: Any, kind: str) -> None:
    d, _ = daemon
    _, svg = badge(d, "no/such check", kind, expect=404)
    assert texts(svg)[1] == "not found" and colour(svg) == GREY


def test_unknown_badge_kind_is_a_404_badge(daemon: Any) -> None:
    d, _ = daemon
    for path in ("up/uptime-1h.svg", "up/health.svg", "up"):
        status, headers, body = fetch(d, f"/badge/{path}")
        assert status == 404 and headers["Content-Type"] == "image/svg+xml", path
        assert texts(ET.fromstring(body)) == ("badge", "no such badge")


def test_history_off_uptime_badge_is_grey_503(tmp_path: Path) -> None:
    config = write_daemon_config(
        tmp_path / "c.yaml",
        [{"name": "a", "probe": "test_static", "interval": 0.5}],
        history={"enabled": False},
    )
    with DaemonProcess(config) as d:
        d.wait_for(lambda: d.status_of("a").get("status") == "up", what="first run")
        assert texts(badge(d, "a", "status.svg")[1]) == ("a", "up")
        for kind in ("uptime-24h.svg", "latency.svg"):
            _, svg = badge(d, "a", kind, expect=503)
            assert texts(svg)[1] == "history off" and colour(svg) == GREY


# -- rendering rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "expected"),
    [
        (100, GREEN),
        (99.9, GREEN),
        (99.89, "#a4a61d"),
        (99.0, "#a4a61d"),
        (98.99, YELLOW),
        (95.0, YELLOW),
        (94.99, RED),
        (0, RED),
    ],
)
def test_uptime_colour_thresholds(percent: float, expected: str) -> None:
    assert uptime_colour(percent / 100) == expected


def test_uptime_colour_without_data_is_grey() -> None:
    assert uptime_colour(None) == GREY


@pytest.mark.parametrize(
    ("ratio", "text"),
    [
        (1.0, "100%"),
        (0.99996, "99.99%"),
        (0.9995, "99.95%"),
        (0.999, "99.9%"),
        (0.5, "50%"),
        (0.0, "0%"),
        (2 / 3, "66.66%"),
        (None, "no data"),
    ],
)
def test_uptime_text_is_cut_not_rounded(ratio: float | None, text: str) -> None:
    assert format_uptime(ratio) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.000123, "0.123 ms"),
        (0.0123, "12 ms"),
        (0.2504, "250 ms"),
        (1.234, "1.23 s"),
        (123.4, "123 s"),
        (None, "no data"),
    ],
)
def test_latency_text(seconds: float | None, text: str) -> None:
    assert format_latency(seconds) == text


def test_text_xml_cannot_hold_is_replaced_and_long_text_is_cut() -> None:
    svg = ET.fromstring(render(Badge("a\x00b\x1bc", "x" * 300, GREEN)))
    label, message = texts(svg)
    assert label == "a\ufffdb\ufffdc"
    assert len(message) == badges.MAX_TEXT_CHARS and message.endswith("\u2026")


def test_widths_of_wide_and_combining_characters() -> None:
    assert text_width("日本") == 22.0
    assert text_width("e\u0301") == text_width("e")  # a combining accent takes no room
    assert text_width("iiii") < text_width("mmmm")


def test_badge_body_is_stable() -> None:
    """Same badge, same bytes: what makes the ETag useful to caches."""
    one = render(Badge("up", "up", GREEN))
    time.sleep(0.01)  # why: the subject is time passing (no clock may leak into the bytes)
    assert render(Badge("up", "up", GREEN)) == one
