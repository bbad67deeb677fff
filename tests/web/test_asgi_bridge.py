"""The ASGI bridge on its own: small ASGI applications behind an aiohttp route, asked by a
real client over a socket. The scope, a body in chunks, one-message and streamed answers (a
stream's headers before its first event), hop-by-hop headers, the client leaving (seen by
``receive`` and by ``send``), and applications that fail or are not running."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from alivemcp.web.asgi_bridge import BODY_CHUNK, AsgiApp, AsgiBridge, Message, Receive, Scope, Send
from tests.support.aiohttp_server import serve_app

#: Every wait here is on an event with a deadline.
WITHIN = 10.0


@asynccontextmanager
async def bridged(app: AsgiApp | None) -> AsyncIterator[str]:
    """``app`` behind ``/asgi/{tail}``; yields the base URL of that route."""
    web_app = web.Application()
    web_app.router.add_route("*", "/asgi/{tail:.*}", AsgiBridge(lambda: app).handle)
    async with serve_app(web_app, shutdown_timeout=1.0) as served:
        yield f"{served.url}/asgi"


async def _start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def test_the_scope_and_a_body_read_in_chunks() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(len(message["body"]))
            if not message["more_body"]:
                break
        names = [name for name, _ in scope["headers"]]
        doc = {
            "type": scope["type"],
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "scheme": scope["scheme"],
            "http_version": scope["http_version"],
            "client": scope["client"][0],
            "server_port": scope["server"][1],
            "custom": dict(scope["headers"])[b"x-custom"].decode(),
            "lower": all(name == name.lower() for name in names),
            "chunks": chunks,
        }
        body = json.dumps(doc).encode()
        await _start(send, 200, [(b"content-type", b"application/json")])
        await send({"type": "http.response.body", "body": body})

    payload = bytes(range(256)) * 800  # 204,800 bytes: more than three chunks
    async with bridged(app) as url, aiohttp.ClientSession() as session:
        headers = {"X-Custom": "Value", "Content-Type": "application/octet-stream"}
        async with session.post(
            URL(f"{url}/a%2Fb?x=1&y=%2F", encoded=True), data=payload, headers=headers
        ) as r:
            assert r.status == 200
            doc = await r.json()
    assert doc["type"] == "http" and doc["method"] == "POST"
    assert (doc["path"], doc["raw_path"], doc["query"]) == ("/asgi/a/b", "/asgi/a%2Fb", "x=1&y=%2F")
    assert (doc["scheme"], doc["http_version"], doc["client"]) == ("http", "1.1", "127.0.0.1")
    assert doc["server_port"] == int(url.split(":")[2].split("/")[0])
    assert (doc["custom"], doc["lower"]) == ("Value", True)
    assert sum(doc["chunks"]) == len(payload)
    assert len(doc["chunks"]) >= len(payload) // BODY_CHUNK
    assert max(doc["chunks"]) <= BODY_CHUNK


async def test_a_one_message_answer_keeps_its_status_and_headers_but_not_hop_by_hop_ones() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        headers = [
            (b"content-type", b"text/plain"),
            (b"content-length", b"5"),
            (b"connection", b"close"),
            (b"x-answer", b"42"),
            (b"set-cookie", b"a=1"),
            (b"set-cookie", b"b=2"),
        ]
        await _start(send, 201, headers)
        await send({"type": "http.response.body", "body": b"hello", "more_body": False})

    async with (
        bridged(app) as url,
        aiohttp.ClientSession() as session,
        session.get(f"{url}/x") as reply,
    ):
        assert (reply.status, await reply.text()) == (201, "hello")
        assert reply.headers["Content-Length"] == "5"
        assert reply.headers["X-Answer"] == "42"
        assert reply.headers.getall("Set-Cookie") == ["a=1", "b=2"]
        assert reply.headers.get("Connection", "").lower() != "close"


async def test_a_stream_sends_its_headers_before_its_first_event() -> None:
    headers_seen = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await _start(send, 200, [(b"content-type", b"text/event-stream")])
        # The first event waits for the client to have the headers: they must not wait for it.
        await asyncio.wait_for(headers_seen.wait(), WITHIN)
        for n in range(3):
            await send(
                {"type": "http.response.body", "body": f"data: {n}\n\n".encode(), "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with (
        bridged(app) as url,
        aiohttp.ClientSession() as session,
        session.get(f"{url}/events") as reply,
    ):
        assert reply.headers["Content-Type"] == "text/event-stream"
        assert "Content-Length" not in reply.headers
        headers_seen.set()
        body = await asyncio.wait_for(reply.read(), WITHIN)
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"


async def test_the_application_sees_the_client_leave() -> None:
    disconnected: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    write_failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
    started = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the (empty) body
        await _start(send, 200, [(b"content-type", b"text/event-stream")])
        await send({"type": "http.response.body", "body": b": hello\n\n", "more_body": True})
        started.set()
        disconnected.set_result(await receive())  # waits until the client is gone
        try:
            await send({"type": "http.response.body", "body": b"data: late\n\n", "more_body": True})
        except OSError as exc:  # ASGI 2.4: a write to a client that left raises
            write_failed.set_result(exc)

    async with bridged(app) as url:
        session = aiohttp.ClientSession()
        reply = await session.get(f"{url}/stream")
        await asyncio.wait_for(started.wait(), WITHIN)
        assert await reply.content.readline() == b": hello\n"
        reply.close()
        await session.close()
        message = await asyncio.wait_for(disconnected, WITHIN)
        assert message == {"type": "http.disconnect"}
        assert isinstance(await asyncio.wait_for(write_failed, WITHIN), OSError)


async def test_applications_that_fail_or_answer_nothing_are_a_500_and_none_a_503() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("boom")

    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()

    async def headers_only(scope: Scope, receive: Receive, send: Send) -> None:
        await _start(send, 204, [])

    expected: list[tuple[AsgiApp | None, int]] = [
        (broken, 500),
        (silent, 500),
        (headers_only, 204),
        (None, 503),
    ]
    for app, status in expected:
        async with (
            bridged(app) as url,
            aiohttp.ClientSession() as session,
            session.post(f"{url}/y", data=b"{}") as reply,
        ):
            assert reply.status == status, (app, await reply.text())
            if status >= 500:
                doc: dict[str, Any] = await reply.json()
                assert "error" in doc
