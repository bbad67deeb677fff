"""``HttpClients.fetch``: one whole answer from a real loopback server, and failures that are
``ProbeError``s of the right kind naming their target (the HTTP plumbing's error boundary)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.http import (
    BodyTooLarge,
    ConnectError,
    ConnectionClosed,
    HttpClients,
    ProtocolError,
    RequestTimeout,
)
from alivemcp.verdict import Findings
from tests.support import free_port, serve_http
from tests.support.http_client_stand_ins import Run

#: What the server saw of the last POST: (path, content-type, body).
_seen: list[tuple[str, str | None, bytes]] = []


class _Answers(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _seen.append((self.path, self.headers.get("Content-Type"), body))
        self._answer(201, b'{"echo": ' + str(len(body)).encode() + b"}")

    def do_GET(self) -> None:
        if self.path == "/endless":
            # No Content-Length: the body runs until the server closes, which it never does.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 16384)
            except OSError:  # the client hung up: what the test expects
                return
        elif self.path == "/garbage":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        elif self.path == "/hangup":
            self.close_connection = True
        else:
            self._answer(503, b"busy")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Answer", "yes")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve_http(_Answers) as url:
        yield url


@pytest.fixture
def silent() -> Iterator[str]:
    """A loopback port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/token"
    finally:
        stop.set()
        thread.join()
        for sock in accepted:
            sock.close()
        listener.close()


def test_fetch_returns_status_headers_and_the_whole_body(run: Run, server: str) -> None:
    clients = HttpClients(environ={})
    fetched = run(
        clients.fetch(
            "POST",
            server + "/form",
            timeout=5,
            body=b"a=1&b=2",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    )
    assert (fetched.status, fetched.body) == (201, b'{"echo": 7}')
    assert fetched.headers["x-answer"] == "yes"
    assert fetched.seconds > 0 and fetched.timings.connect_seconds is not None
    assert _seen[-1] == ("/form", "application/x-www-form-urlencoded", b"a=1&b=2")
    # An error status is an answer, not an exception: the caller judges it.
    assert run(clients.fetch("GET", server + "/busy", timeout=5)).status == 503


def test_a_refused_connection_is_a_connect_error_naming_its_target(run: Run) -> None:
    port = free_port()
    with pytest.raises(ConnectError) as caught:
        run(HttpClients(environ={}).fetch("GET", f"http://127.0.0.1:{port}/x", timeout=5))
    err = caught.value
    assert isinstance(err, ProbeError)
    assert (err.kind, err.target) == (ErrorKind.CONNECT, f"127.0.0.1:{port}")
    assert str(err).startswith(f"cannot connect to 127.0.0.1:{port}")
    # The verdict vocabulary reads it without knowing HTTP: the target is down.
    findings = Findings()
    findings.add_error(err)
    assert findings.result().status == "down"


def test_a_silent_server_is_a_timeout(run: Run, silent: str) -> None:
    with pytest.raises(RequestTimeout) as caught:
        run(HttpClients(environ={}).fetch("POST", silent, timeout=0.5, body=b"x"))
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert caught.value.target == silent.split("/")[2]


def test_an_endless_body_stops_at_the_cap(run: Run, server: str) -> None:
    with pytest.raises(BodyTooLarge) as caught:
        run(
            HttpClients(environ={}).fetch(
                "GET", server + "/endless", timeout=10, max_body_bytes=64 * 1024
            )
        )
    assert caught.value.kind is ErrorKind.PROTOCOL
    assert str(caught.value) == "response body larger than 65536 bytes"


@pytest.mark.parametrize(
    ("path", "error", "kind"),
    [
        ("/garbage", ProtocolError, ErrorKind.PROTOCOL),
        ("/hangup", ConnectionClosed, ErrorKind.CONNECT),
    ],
)
def test_answers_that_are_not_http_have_their_kind(
    run: Run, server: str, path: str, error: type[ProbeError], kind: ErrorKind
) -> None:
    with pytest.raises(error) as caught:
        run(HttpClients(environ={}).fetch("GET", server + path, timeout=5))
    assert caught.value.kind is kind
    assert caught.value.target == server.split("/")[2]
