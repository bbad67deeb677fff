"""A 50,000-check deployment asked through the MCP face: every ``list_checks`` answer stays
within its bounds (rows, bytes) and its time, whatever the filters, and pages to the end.

The status store is filled in-process with 50,000 checks and a result each (what the daemon's
store holds at that size); the face is asked over HTTP with the official SDK client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.probe import Status
from alivemcp.web.mcp_answers import list_checks
from alivemcp.web.mcp_schema import MAX_CHECKS, ListChecksArgs
from tests.support.mcp_face import Face, serve_face

CHECKS = 50_000
TEAMS = 50
#: One list_checks answer, over HTTP, on a loaded two-core machine (measured: well under a
#: second each; see the figures the test prints).
WITHIN_SECONDS = 5.0
#: The text of one answer (its structured content is the same again on the wire).
MAX_ANSWER_BYTES = 400_000


def status_of(i: int) -> Status:
    if i % 100 == 0:
        return Status.DOWN
    if i % 37 == 0:
        return Status.DEGRADED
    return Status.UP


def fill(store: StatusStore) -> None:
    infos = [
        CheckInfo(
            f"mcp/server-{i:05d}.example.com",
            "mcp_endpoint",
            {"team": f"team-{i % TEAMS}", "env": "prod", "region": "eu-west-1"},
        )
        for i in range(CHECKS)
    ]
    store.set_checks(infos)
    now = time.time()
    for i, info in enumerate(infos):
        status = status_of(i)
        reason = (
            "tools/list: 12 tools in 0.081s"
            if status is Status.UP
            else f"HTTP 503 from https://server-{i:05d}.example.com/mcp: " + "upstream busy " * 12
        )
        store.record(CheckResult(info, status, reason, 0.08, now - 30, now - 29.9))


@pytest.fixture(scope="module")
async def big(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Face]:
    store = StatusStore()
    fill(store)
    directory: Path = tmp_path_factory.mktemp("face-50k")
    async with serve_face(directory, store=store, history=False, surfaces=False) as served:
        yield served


async def test_list_checks_at_50000_checks_is_bounded_in_rows_bytes_and_time(big: Face) -> None:
    down = sum(1 for i in range(CHECKS) if status_of(i) is Status.DOWN)
    degraded = sum(1 for i in range(CHECKS) if status_of(i) is Status.DEGRADED)
    texts = sum(1 for i in range(CHECKS) if "server-4999" in f"server-{i:05d}")
    questions: list[tuple[dict[str, Any], int | None]] = [
        ({}, CHECKS),
        ({"limit": MAX_CHECKS}, CHECKS),
        ({"status": "down"}, down),
        ({"status": ["down", "degraded"], "label": "team=team-7"}, None),
        ({"text": "server-4999"}, texts),
        ({"text": "no such thing anywhere"}, 0),
        ({"offset": CHECKS - 150, "limit": MAX_CHECKS}, CHECKS),
    ]
    figures = []
    async with Client(big.url, mode="legacy") as client:
        for arguments, matched in questions:
            started = time.perf_counter()
            result = await client.call_tool("list_checks", arguments)
            took = time.perf_counter() - started
            assert not result.is_error, result.content
            doc = result.structured_content
            assert isinstance(doc, dict)
            size = len(result.content[0].text.encode())  # type: ignore[union-attr]
            figures.append((arguments, took, size, doc["returned"], doc["matched"]))
            assert doc["total_checks"] == CHECKS
            assert doc["summary"]["down"] == down and doc["summary"]["degraded"] == degraded
            if matched is not None:
                assert doc["matched"] == matched, arguments
            assert doc["returned"] <= arguments.get("limit", 50)
            assert doc["truncated"] == (doc["offset"] + doc["returned"] < doc["matched"])
            assert took < WITHIN_SECONDS, (arguments, took)
            assert size < MAX_ANSWER_BYTES, (arguments, size)
    for arguments, took, size, returned, matched in figures:
        print(
            f"list_checks {json.dumps(arguments)}: {took * 1000:.0f} ms, {size:,} bytes, "
            f"{returned} of {matched} rows"
        )


async def test_paging_reaches_the_last_matching_check(big: Face) -> None:
    seen: list[str] = []
    arguments: dict[str, Any] = {"status": "down", "limit": MAX_CHECKS}
    async with Client(big.url, mode="2026-07-28") as client:
        for _ in range(10):
            doc = (await client.call_tool("list_checks", arguments)).structured_content
            assert isinstance(doc, dict)
            seen += [row["check"] for row in doc["checks"]]
            if doc["next_offset"] is None:
                break
            arguments = {**arguments, "offset": doc["next_offset"]}
    assert seen == [f"mcp/server-{i:05d}.example.com" for i in range(0, CHECKS, 100)]


def test_the_scan_itself_at_50000_checks(big: Face) -> None:
    """The in-process part of an answer (what runs in a worker thread): the figure printed."""
    states = big.store.states()
    for arguments in ({}, {"text": "server-4999"}, {"status": ["down", "degraded"]}):
        started = time.perf_counter()
        doc = list_checks(states, ListChecksArgs.model_validate(arguments))
        took = time.perf_counter() - started
        print(f"scan {json.dumps(arguments)}: {took * 1000:.0f} ms, {doc.matched} matched")
        assert took < WITHIN_SECONDS
