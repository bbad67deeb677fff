"""/metrics over HTTP is streamed a part at a time: the body must be exactly the render's,
with a Content-Length (not chunked), and HEAD must send the headers only."""

from __future__ import annotations

import aiohttp

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import Status
from alivemcp.web.metrics import RENDER_CHUNK, Metrics
from alivemcp.web.server import HttpServer

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


async def test_the_streamed_body_is_the_render_with_its_length() -> None:
    store = StatusStore()
    metrics = Metrics(store)
    infos = [CheckInfo(f"c{i}", "p", {"team": "é"}) for i in range(2 * RENDER_CHUNK + 7)]
    store.set_checks(infos)
    for n, info in enumerate(infos):
        store.record(
            CheckResult(
                check=info,
                status=Status.UP,
                reason="r",
                duration_seconds=0.1,
                started_at=1000.0 + n,
                finished_at=1000.1 + n,
                observations={"lat": n / 7},
            )
        )
    parts, _ = await metrics.render_parts(OPENMETRICS)
    assert len(parts) > 10  # several parts, so the stream is really written in pieces
    server = HttpServer(store, metrics, lambda: True, lambda: True)
    await server.start("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        async with aiohttp.ClientSession() as session:
            for accept in (None, OPENMETRICS):
                headers = {"Accept": accept} if accept else {}
                async with session.get(url, headers=headers) as response:
                    body = await response.read()
                    sent = response.headers
                expected, content_type = await metrics.render(accept)
                # The engine-wide tail (process CPU, GC counts) moves between two renders;
                # everything before it must be the same bytes.
                cut = body.index(b"# HELP process_")
                assert body[:cut] == expected[: expected.index(b"# HELP process_")]
                assert body.endswith(b"# EOF\n") == (accept is not None)
                assert sent["Content-Type"] == content_type
                assert int(sent["Content-Length"]) == len(body)
                assert "Transfer-Encoding" not in sent
            async with session.head(url) as response:
                assert response.status == 200
                assert int(response.headers["Content-Length"]) > 0
                assert await response.read() == b""
    finally:
        await server.stop()
