"""Event streams as MCP 2025-11-25 allows them, and redirects in front of an endpoint.

* A server may end a request's event stream after an event with an ``id`` (and ``retry``)
  before the response; the client resumes with GET and ``Last-Event-ID``.
* A server may send its own requests (``ping``) on the stream; the client must answer them.
* A proxy may redirect ``/mcp`` to ``/mcp/`` (307/308): followed within the origin only.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check


def _stats(lab: ServerProcess) -> dict[str, int]:
    with urllib.request.urlopen(lab.base + "/_stats", timeout=5) as resp:
        return dict(json.loads(resp.read()))


def _details(result: Any) -> dict[str, Any]:
    return dict(result.details or {})


async def test_streams_ended_early_are_resumed(lab: ServerProcess) -> None:
    # Each response stream of /resume ends twice (after an id and retry: 100 ms) before the
    # response; the lab refuses a GET without the session id, the protocol version, the
    # right Last-Event-ID, or sooner than the retry delay.
    result = await run_check(
        "mcp_endpoint",
        {
            "url": lab.base + "/resume",
            "degraded_latency": 8,
            "call": {
                "name": "add",
                "arguments": {"a": 1, "b": 2},
                "expect_json_path": "structuredContent.sum",
                "expect_value": 3,
            },
        },
    )
    assert result.status == "up", result.reason
    # initialize, tools/list and tools/call: two resumptions each.
    assert _details(result)["sse_resumptions"] == 6
    assert _details(result)["delete_status"] == 200
    assert not [k for k in _stats(lab) if k.startswith("resume refused")]


async def test_server_pings_on_the_stream_are_answered(lab: ServerProcess) -> None:
    before = _stats(lab).get("pong received", 0)
    result = await run_check("mcp_endpoint", {"url": lab.base + "/ping-first"})
    assert result.status == "up", result.reason
    # The lab answers initialize and tools/list only after the client answered its ping.
    assert _stats(lab).get("pong received", 0) - before == 2


async def test_server_pings_on_a_legacy_stream_are_answered(lab: ServerProcess) -> None:
    before = _stats(lab).get("pong received", 0)
    result = await run_check("mcp_endpoint", {"url": lab.base + "/legacy-ping"})
    assert (result.status, _details(result).get("transport")) == ("up", "sse"), result.reason
    assert _stats(lab).get("pong received", 0) - before == 2


async def test_sdk_server_closing_the_stream_is_resumed(sdk_resumable: ServerProcess) -> None:
    # The official SDK with an event store: the poll tool closes its stream (ctx.
    # close_sse_stream()) and answers 0.3 s later; the answer arrives on the resumed GET.
    result = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_resumable.url,
            "degraded_latency": 8,
            "call": {"name": "poll", "expect_contains": "polled"},
        },
    )
    assert result.status == "up", result.reason
    assert _details(result)["sse_resumptions"] >= 1


async def test_sdk_server_pinging_the_client_gets_its_answer(sdk_resumable: ServerProcess) -> None:
    result = await run_check(
        "mcp_endpoint",
        {
            "url": sdk_resumable.url,
            "call": {"name": "ping_client", "expect_contains": "pong received"},
        },
    )
    assert result.status == "up", result.reason


async def test_same_origin_307_is_followed_for_the_whole_run(lab: ServerProcess) -> None:
    before = _stats(lab)
    result = await run_check("mcp_endpoint", {"url": lab.base + "/redir"})
    after = _stats(lab)
    assert result.status == "up", result.reason
    assert "followed a redirect to http://127.0.0.1" in result.reason
    assert _details(result)["redirected_to"] == lab.base + "/redir/"
    # Only initialize met the redirect; the rest of the run (and the DELETE) used /redir/.
    assert after.get("POST /redir", 0) - before.get("POST /redir", 0) == 1
    assert after.get("POST /redir/", 0) - before.get("POST /redir/", 0) == 3
    assert after.get("DELETE /redir/", 0) - before.get("DELETE /redir/", 0) == 1


async def test_other_redirects_are_reported_not_followed(lab: ServerProcess) -> None:
    port = lab.port
    before = _stats(lab).get("POST /json", 0)
    foreign = await run_check(
        "mcp_endpoint",
        {"url": lab.base + "/redir-foreign", "headers": {"Authorization": "Bearer abcdefgh"}},
    )
    assert foreign.status == "down"
    assert foreign.reason == (
        f"initialize: HTTP 307 redirect to http://localhost:{port}/json "
        "(redirects are not followed)"
    )
    moved = await run_check("mcp_endpoint", {"url": lab.base + "/redir301"})
    assert (moved.status, moved.reason) == (
        "down",
        "initialize: HTTP 301 redirect to /json (redirects are not followed)",
    )
    assert _stats(lab).get("POST /json", 0) == before  # neither was followed
    loop = await run_check("mcp_endpoint", {"url": lab.base + "/redir-loop/0"})
    assert (loop.status, loop.reason) == (
        "down",
        "initialize: HTTP 307 redirect to /redir-loop/4 (stopped after 3 redirects)",
    )
