"""Take docs/statuspage.png: the status page, in headless Chromium, over an illustrative fleet.

    python scripts/screenshot_statuspage.py

Serves the real page bytes and a made-up /status document (names and reasons in the style the
probes produce) from a local server, then drives Debian's chromium like the page tests do.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from alivemcp.web.statuspage import PAGE_HTML  # noqa: E402
from tests.support.chromium_cdp import Browser  # noqa: E402

OUTPUT = REPO / "docs" / "statuspage.png"

SPECIAL: list[tuple[str, str, dict[str, str], str, str]] = [
    (
        "mcp/https://crm.example.com/mcp",
        "mcp_endpoint",
        {"team": "sales"},
        "down",
        "HTTP 503 from initialize",
    ),
    (
        "pii-redaction/tenant-acme",
        "s3_object_lambda",
        {"team": "data"},
        "down",
        "RAW PII returned through the Object Lambda access point: ssn, email "
        "(the transformer failed open)",
    ),
    (
        "orders-consumers",
        "kafka_consumer_lag",
        {"team": "payments"},
        "down",
        "orders-billing orders/7: stop (no commits for 10 runs, no members); lag 48210 messages"
        " / 12m",
    ),
    (
        "mcp/https://billing.example.com/mcp",
        "mcp_endpoint",
        {"team": "payments"},
        "degraded",
        "handshake took 2.41s (> degraded_latency 2s)",
    ),
    (
        "orders-replica",
        "s3_replication_lag",
        {"team": "payments"},
        "degraded",
        "replica arrived after 61.2s (SLA 45s)",
    ),
    (
        "uploads-events",
        "s3_event_delivery",
        {"team": "data"},
        "unknown",
        "prober's own permissions: AccessDenied on sqs:ReceiveMessage (role alivemcp-prober)",
    ),
    (
        "msk-prod/canary",
        "kafka_canary",
        {"team": "platform"},
        "up",
        "12 partitions, produce max 18ms, round trip max 41ms",
    ),
    (
        "msk-prod/partitions",
        "kafka_partition_health",
        {"team": "platform"},
        "up",
        "312 partitions healthy on 3 brokers",
    ),
    (
        "clickstream-firehose",
        "firehose_freshness",
        {"team": "data"},
        "up",
        "ACTIVE, freshness 74s, canary delivered in 81s",
    ),
    ("tenant-acme/access-point", "s3_access_point", {"team": "data"}, "up", "read 2.1 KB in 38ms"),
]
TEAMS = ("search", "sales", "payments", "platform", "data", "support")


def fleet() -> dict[str, Any]:
    rng = random.Random(3)
    now = time.time()
    rows = list(SPECIAL)
    for i in range(36):
        team = TEAMS[i % len(TEAMS)]
        rows.append(
            (
                f"mcp/https://{team}-{i:03d}.mcp.example.com/mcp",
                "mcp_endpoint",
                {"team": team},
                "up",
                f"protocol 2025-11-25, {rng.randint(3, 40)} tools",
            )
        )
    checks = []
    for name, probe, labels, status, reason in rows:
        base = rng.uniform(0.04, 0.3)
        history = []
        for k in range(20):
            late = k >= 16 and status != "up"
            history.append(
                [
                    now - (20 - k) * 60,
                    round(base * rng.uniform(0.7, 1.4) * (4 if late else 1), 4),
                    status if late else "up",
                ]
            )
        checks.append(
            {
                "check": name,
                "probe": probe,
                "labels": {"env": "production", **labels},
                "status": status,
                "reason": reason,
                "since": now - (rng.uniform(120, 900) if status != "up" else rng.uniform(1e4, 9e5)),
                "last_run": now - rng.uniform(1, 50),
                "duration_seconds": history[-1][1],
                "observations": {"total_seconds": history[-1][1]},
                "history": history,
            }
        )
    summary = {
        s: sum(1 for c in checks if c["status"] == s)
        for s in ("up", "degraded", "down", "unknown", "pending")
    }
    severity = {
        "down": ("target", "critical"),
        "degraded": ("target", "warning"),
        "unknown": ("probe_broken", "warning"),
    }
    alerts = [
        {
            "check": c["check"],
            "alert": severity[c["status"]][0],
            "severity": severity[c["status"]][1],
            "since": c["since"],
            "reason": c["reason"],
            # The replica alert is held by a maintenance window.
            "notified": c["check"] != "orders-replica",
        }
        for c in checks
        if c["status"] in severity
    ]
    return {"generated_at": now, "summary": summary, "checks": checks, "alerts": alerts}


async def main() -> None:
    doc = fleet()

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=PAGE_HTML, content_type="text/html", charset="utf-8")

    async def status(_: web.Request) -> web.Response:
        doc["generated_at"] = time.time()
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/status", status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with Browser(width=1400, height=760) as browser:
            await browser.goto(f"http://127.0.0.1:{port}/#group=team")
            await browser.wait_for("window.alivemcpStatusPage.refreshes >= 1")
            await browser.screenshot(OUTPUT)
    finally:
        await runner.cleanup()
    print(f"wrote {OUTPUT.relative_to(REPO)}")


if __name__ == "__main__":
    asyncio.run(main())
