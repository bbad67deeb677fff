"""Bytes that are not (good) HTTP never crash or stall the probe: a raw TCP server per case."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support import run_check

OK_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
RESPONSES = {
    "not-http": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "malformed HTTP response: not an HTTP/1.x"),
    "huge-head": (
        (OK_HEAD + "X-Pad: " + "a" * 100_000 + "\r\n\r\n").encode(),
        "malformed HTTP response: response head longer than",
    ),
    "bad-chunk": (
        (OK_HEAD + "Transfer-Encoding: chunked\r\n\r\nzz\r\n").encode(),
        "malformed HTTP response: bad chunk size line",
    ),
    "bad-length": (
        (OK_HEAD + "Content-Length: ten\r\n\r\n").encode(),
        "malformed HTTP response: Content-Length 'ten' is not a number",
    ),
    "short-body": (
        (OK_HEAD + 'Content-Length: 500\r\n\r\n{"jsonrpc":').encode(),
        "connection closed mid-response",
    ),
    "closed": (b"", "server closed the connection before responding"),
    "nested-json": (
        (OK_HEAD + "Content-Length: 200000\r\n\r\n").encode() + b"[" * 200_000,
        "not MCP: the response body is JSON nested too deeply",
    ),
}


@pytest.fixture(scope="module")
def raw_servers() -> Iterator[dict[str, int]]:
    """One listening socket per case; each connection gets the canned bytes, then EOF."""
    listeners: dict[str, socket.socket] = {}
    stop = threading.Event()

    def serve(name: str, sock: socket.socket) -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(RESPONSES[name][0])
                except OSError:
                    pass

    threads = []
    for name in RESPONSES:
        sock = socket.create_server(("127.0.0.1", 0))
        listeners[name] = sock
        thread = threading.Thread(target=serve, args=(name, sock), daemon=True)
        thread.start()
        threads.append(thread)
    try:
        yield {name: sock.getsockname()[1] for name, sock in listeners.items()}
    finally:
        stop.set()
        for sock in listeners.values():
            sock.close()


@pytest.mark.parametrize("case", list(RESPONSES))
async def test_garbage_is_down_with_a_reason(raw_servers: dict[str, int], case: str) -> None:
    url = f"http://127.0.0.1:{raw_servers[case]}/mcp"
    result = await run_check(
        "mcp_endpoint",
        {"url": url, "transport": "streamable_http", "request_timeout": 3},
        timeout=5,
    )
    assert result.status == "down"
    assert RESPONSES[case][1] in result.reason, result.reason
