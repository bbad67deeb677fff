"""The OAuth client-credentials request of ``mcp_endpoint``, against real loopback token
endpoints that misbehave: every failure is ``unknown`` (the prober's own credentials could not
be had), says what happened, and never shows the client secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs

import pytest

from tests.support import free_port, run_check, serve_http

SECRET = "s3cret-client-value-0042"
#: What the token endpoint received: (content-type, parsed form).
_received: list[tuple[str | None, dict[str, list[str]]]] = []


class _TokenEndpoint(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _received.append((self.headers.get("Content-Type"), parse_qs(body.decode())))
        if self.path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(b'{"access_token": "')
                while True:
                    self.wfile.write(b"a" * 16384)
            except OSError:  # the client hung up: what the test expects
                return
        answers = {
            "/refuse": (400, b'{"error": "invalid_scope"}'),
            "/html": (200, b"<html>login</html>"),
            "/list": (200, b'["access_token"]'),
        }
        status, answer = answers.get(self.path, (404, b""))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture(scope="module")
def token_server() -> Iterator[str]:
    with serve_http(_TokenEndpoint) as url:
        yield url


def _oauth(token_url: str, **extra: str) -> dict[str, object]:
    # The MCP URL is never reached: the token request fails first.
    return {
        "url": f"http://127.0.0.1:{free_port()}/mcp",
        "oauth": {"token_url": token_url, "client_id": "prober", "client_secret": SECRET, **extra},
    }


async def test_the_form_is_sent_url_encoded_and_a_refusal_is_unknown(token_server: str) -> None:
    result = await run_check(
        "mcp_endpoint",
        _oauth(
            token_server + "/refuse", scope="mcp:read mcp:write", resource="https://mcp.test/m&x"
        ),
    )
    assert result.status == "unknown"
    assert result.reason.startswith("cannot authenticate: OAuth token request on ")
    assert result.reason.endswith(": answered HTTP 400 (invalid_scope)")
    content_type, form = _received[-1]
    assert content_type == "application/x-www-form-urlencoded"
    assert form == {
        "grant_type": ["client_credentials"],
        "client_id": ["prober"],
        "client_secret": [SECRET],
        "scope": ["mcp:read mcp:write"],
        "resource": ["https://mcp.test/m&x"],
    }
    assert SECRET not in json.dumps([result.reason, result.details])


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/html", "answered without a usable access_token"),
        ("/list", "answered without a usable access_token"),
        ("/endless", "answered more than 65536 bytes"),
    ],
)
async def test_a_token_answer_that_is_not_a_token_is_unknown(
    token_server: str, path: str, said: str
) -> None:
    result = await run_check("mcp_endpoint", _oauth(token_server + path), timeout=10)
    assert result.status == "unknown"
    assert result.reason.endswith(said), result.reason


async def test_an_unreachable_token_endpoint_is_unknown_and_says_why() -> None:
    port = free_port()
    result = await run_check("mcp_endpoint", _oauth(f"http://127.0.0.1:{port}/token"))
    assert result.status == "unknown"
    assert f"unreachable: cannot connect to 127.0.0.1:{port}" in result.reason
