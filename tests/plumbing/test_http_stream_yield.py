"""A server flooding an event stream cannot hold the event loop: the body reader yields to
other tasks while it works through data that is already buffered.

A ticker task sleeping 10 ms at a time measures the longest stall of the loop while the
flood is read and parsed (the SSE parser and JSON decoding the MCP probe does per event) as
the CPU time the loop's thread spent between two ticks: wall-clock gaps would also count the
time the process waits for a core on a busy machine, which is not the reader's doing. Time
the garbage collector spends in that stretch is left out too: a full collection walks every
object the test process holds (a suite's worker, 195 ms once), whoever allocated them. The
bound is a correctness bound: the old reader held the loop for 60-250 ms of CPU at a time,
this one for a few milliseconds.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from alivemcp.plumbing.http import HttpClients
from probes.mcp.sse import SseParser
from tests.support.http_client_stand_ins import Run

EVENT = (
    b'data: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":1,"progress":%d}}\n\n'
)
FLOOD_BYTES = 8 * 1024 * 1024
#: A loop busy longer than this (CPU seconds) between two ticks fails the test.
MAX_STALL = 0.03


def _events_body() -> bytes:
    events = []
    size = 0
    index = 0
    while size < FLOOD_BYTES:
        event = EVENT % index
        events.append(event)
        size += len(event)
        index += 1
    return b"".join(events)


BODY = _events_body()
EVENTS = BODY.count(b"\n\n")


@pytest.fixture(scope="module")
def flood_server() -> Iterator[int]:
    """Answers ``GET /chunked``, ``/length`` or ``/close`` with the whole flood at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

    def serve(conn: socket.socket) -> None:
        with conn:
            request = conn.recv(65536)
            path = request.split(b" ", 2)[1]
            try:
                if path == b"/chunked":
                    conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
                    for start in range(0, len(BODY), 4096):  # many small chunks
                        piece = BODY[start : start + 4096]
                        conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                    conn.sendall(b"0\r\n\r\n")
                elif path == b"/length":
                    conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
                else:
                    conn.sendall(head + b"Connection: close\r\n\r\n" + BODY)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


class _CollectorTime:
    """CPU time the installing thread (the loop's) has spent in the garbage collector while
    installed. A collection in another thread (the flood server's) is not counted: the loop's
    thread does not run then, so its CPU clock leaves that time out by itself."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0
        self._thread = threading.get_ident()

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.total += time.thread_time() - self._started

    def __enter__(self) -> _CollectorTime:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


async def _read_flood(url: str) -> tuple[int, float]:
    """(events parsed, the most CPU the loop's thread spent outside the garbage collector
    between two 10 ms ticks)."""
    stop = asyncio.Event()
    worst = 0.0

    async def ticker(collector: _CollectorTime) -> None:
        nonlocal worst
        while not stop.is_set():
            before, collecting = time.thread_time(), collector.total
            await asyncio.sleep(0.01)  # why: the subject: the loop's busy time between ticks
            busy = time.thread_time() - before - (collector.total - collecting)
            worst = max(worst, busy)

    clients = HttpClients(environ={})
    session = clients.probe_session(proxy="direct", max_body_bytes=2 * FLOOD_BYTES)
    parsed = 0
    with _CollectorTime() as collector:
        tick = asyncio.create_task(ticker(collector))
        await asyncio.sleep(0)  # the ticker's first tick begins before the request
        try:
            async with session.request("GET", url, timeout=60) as response:
                parser = SseParser()
                async for chunk in session.stream(response):
                    for event in parser.feed(chunk):
                        json.loads(event.data)  # what the probe does with each message event
                        parsed += 1
        finally:
            stop.set()
            await tick
            await session.aclose()
    return parsed, worst


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_a_flooding_stream_does_not_stall_the_loop(
    run: Run, flood_server: int, framing: str
) -> None:
    parsed, worst = run(_read_flood(f"http://127.0.0.1:{flood_server}/{framing}"))
    assert parsed == EVENTS
    assert worst < MAX_STALL, f"the loop was busy {worst * 1000:.0f} ms between two ticks"
