"""Helpers of the discovery tests: name lookups the test decides, the ``on_targets`` sink,
configs, and small aiohttp servers on loopback.

No test here asks a real DNS server: the HTTP clients resolve names through :class:`Lookups`,
whose answers each test sets (public names answer with a public address that is never
connected to: discovery only lists targets, it does not probe them).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from alivemcp.config import LoadedConfig, ResolvedCheck, load_config_text
from alivemcp.discovery.manager import DiscoveryManager
from alivemcp.plumbing.http import HttpClients, Resolver

#: An address outside every private range (never connected to by these tests).
PUBLIC_IP = "93.184.215.14"


class Lookups:
    """A ``getaddrinfo`` stand-in: names in :attr:`answers` resolve to those IP literals, any
    other name ending in ``.example.com`` to :data:`PUBLIC_IP`, the rest fail (NXDOMAIN)."""

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = {}
        self.calls: list[str] = []

    def __call__(
        self, host: str, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Any]:
        self.calls.append(host)
        ips = self.answers.get(host)
        if ips is None and host.endswith(".example.com"):
            ips = [PUBLIC_IP]
        if ips is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        infos: list[Any] = []
        for ip in ips:
            infos += socket.getaddrinfo(ip, port, type=type, flags=socket.AI_NUMERICHOST)
        return infos


def make_http(lookups: Lookups, environ: Mapping[str, str] | None = None) -> HttpClients:
    """HTTP clients resolving through ``lookups`` (no cache: each lookup is asked again), with
    no proxy from the environment unless ``environ`` names one."""
    return HttpClients(
        resolver=Resolver(getaddrinfo=lookups, cache_seconds=0), environ=dict(environ or {})
    )


class Sink:
    """The ``on_targets`` callback: every set handed on, by source, and a queue of them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, ResolvedCheck]]] = []
        self.queue: asyncio.Queue[tuple[str, dict[str, ResolvedCheck]]] = asyncio.Queue()

    async def __call__(self, source: str, checks: Mapping[str, ResolvedCheck]) -> None:
        item = (source, dict(checks))
        self.calls.append(item)
        self.queue.put_nowait(item)

    async def next(self, timeout: float = 10.0) -> dict[str, ResolvedCheck]:
        async with asyncio.timeout(timeout):
            return (await self.queue.get())[1]

    def last(self, source: str) -> dict[str, ResolvedCheck]:
        return [checks for name, checks in self.calls if name == source][-1]


def load(
    text: str, base_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> LoadedConfig:
    return load_config_text(text, env=dict(env or {}), base_dir=base_dir)


def manager_for(
    text: str, http: HttpClients, sink: Sink, base_dir: Path | None = None, **kwargs: Any
) -> DiscoveryManager:
    loaded = load(text, base_dir)
    return DiscoveryManager(loaded, http, sink, base_dir=base_dir or Path("."), **kwargs)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(handler: Handler, path: str = "/sd") -> tuple[web.AppRunner, str]:
    """``handler`` at ``path`` on a free loopback port: (runner, URL)."""
    app = web.Application()
    app.router.add_route("*", path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
