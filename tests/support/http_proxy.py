"""A small real HTTP proxy on 127.0.0.1 (its own event loop in a background thread).

CONNECT opens a tunnel; absolute-form requests (``GET http://host:port/path``) are forwarded
in origin form, one request per connection (``Connection: close``). Only loopback
destinations are allowed. With ``credentials`` it answers 407 unless the request carries the
matching ``Proxy-Authorization: Basic``; ``refuse`` lists ``host:port`` it answers 403 for;
``drop`` (changeable while it runs) lists path prefixes of plain-http requests whose connection
it closes without an answer, as a network that drops the traffic to one target would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import threading
from dataclasses import dataclass


@dataclass
class Seen:
    method: str
    target: str
    authorization: str | None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LocalProxy:
    def __init__(
        self, *, credentials: tuple[str, str] | None = None, refuse: tuple[str, ...] = ()
    ) -> None:
        self.credentials = credentials
        self.refuse = set(refuse)
        self.drop: set[str] = set()
        self.seen: list[Seen] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        if self.credentials:
            user, password = self.credentials
            return f"http://{user}:{password}@127.0.0.1:{self.port}"
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        authorization = headers.get("proxy-authorization")
        self.seen.append(Seen(method, target, authorization))
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if authorization != expected:
                await self._answer(
                    writer,
                    "407 Proxy Authentication Required",
                    'Proxy-Authenticate: Basic realm="test"\r\n',
                )
                return
        if method == "CONNECT":
            authority = target
        elif target.startswith("http://"):
            authority, _, path = target[len("http://") :].partition("/")
            if ":" not in authority.rpartition("]")[2]:
                authority += ":80"
            target = "/" + path
        else:
            await self._answer(writer, "400 Bad Request")
            return
        if method != "CONNECT" and any(target.startswith(p) for p in list(self.drop)):
            writer.close()
            return
        host, _, port = authority.rpartition(":")
        if authority in self.refuse or not _loopback(host):
            await self._answer(writer, "403 Forbidden")
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except OSError:
            await self._answer(writer, "502 Bad Gateway")
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            forwarded = (
                [f"{method} {target} HTTP/1.1"]
                + [
                    line
                    for line in lines[1:]
                    if line
                    and not line.lower().startswith(
                        ("proxy-authorization:", "proxy-connection:", "connection:")
                    )
                ]
                + ["Connection: close", "", ""]
            )
            up_writer.write("\r\n".join(forwarded).encode("latin-1"))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: str, extra: str = "") -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
