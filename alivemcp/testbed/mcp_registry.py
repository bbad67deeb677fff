"""A local MCP registry: ``GET /v0.1/servers`` of the registry API v0.1, from a list in memory.

For the tests, the demo and the discovery benchmark: an aiohttp server on a free loopback port
whose entries the caller changes between refreshes (:meth:`LocalRegistry.add`,
:meth:`~LocalRegistry.delete`, :meth:`~LocalRegistry.move`, or :attr:`~LocalRegistry.entries`
itself), served a page at a time (``limit``, at most :attr:`~LocalRegistry.max_limit`) with an
opaque ``nextCursor``, as the official registry pages (modelcontextprotocol/registry,
``docs/reference/api/openapi.yaml``). ``version=latest`` is honoured as there: only entries
marked ``isLatest``.

Faults (:attr:`LocalRegistry.fault`, from page :attr:`~LocalRegistry.fault_from_page` on):
``"error"`` (HTTP 500), ``"hang"`` (never answers), ``"garbage"`` (200 with bytes that are not
JSON), ``"cursor_loop"`` (the same cursor again and again), ``"oversize"`` (a page over
10 MB), ``"too_many"`` (a page of 1,001 servers), ``"wrong_types"`` (``servers`` is not a
list), ``"raw"`` (:attr:`~LocalRegistry.raw_page`, any bytes, as ``application/json``).

    async with LocalRegistry() as registry:
        registry.add("io.github.acme/weather", remotes=[remote("https://mcp.acme.test/mcp")])
        ... registry.url ...
"""

from __future__ import annotations

import asyncio
import base64
import json
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["FAULTS", "OFFICIAL_META", "LocalRegistry", "entry", "remote"]

OFFICIAL_META = "io.modelcontextprotocol.registry/official"
FAULTS = ("error", "hang", "garbage", "cursor_loop", "oversize", "too_many", "wrong_types", "raw")


def remote(
    url: str, kind: str = "streamable-http", headers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ``remotes[]`` item."""
    out: dict[str, Any] = {"type": kind, "url": url}
    if headers is not None:
        out["headers"] = headers
    return out


def entry(
    name: str,
    *,
    remotes: list[dict[str, Any]] | None = None,
    version: str = "1.0.0",
    status: str = "active",
    is_latest: bool = True,
    packages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``servers[]`` item as the registry answers it: the server and its official meta."""
    server: dict[str, Any] = {
        "name": name,
        "description": f"{name} (a local registry entry)",
        "version": version,
    }
    if remotes is not None:
        server["remotes"] = remotes
    if packages is not None:
        server["packages"] = packages
    return {
        "server": server,
        "_meta": {
            OFFICIAL_META: {
                "status": status,
                "isLatest": is_latest,
                "publishedAt": "2025-09-01T00:00:00Z",
                "updatedAt": "2025-09-01T00:00:00Z",
            }
        },
    }


class LocalRegistry:
    """The registry stand-in; :attr:`requests` lists the query of every request served."""

    def __init__(self, *, max_limit: int = 100) -> None:
        #: The entries in listing order (``servers[]`` items; any JSON value is served as is).
        self.entries: list[Any] = []
        self.max_limit = max_limit
        self.fault: str | None = None
        self.fault_from_page = 0
        #: The body of every page while :attr:`fault` is ``"raw"``.
        self.raw_page = b""
        self.requests: list[dict[str, str]] = []
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- the list

    def add(self, name: str, **fields: Any) -> dict[str, Any]:
        """Append :func:`entry` ``(name, **fields)`` and return it."""
        item = entry(name, **fields)
        self.entries.append(item)
        return item

    def delete(self, name: str) -> None:
        """Mark every entry of server ``name`` deleted (as the registry does: still listed)."""
        for item in self._named(name):
            item["_meta"][OFFICIAL_META]["status"] = "deleted"

    def move(self, name: str, url: str) -> None:
        """Point server ``name``'s first remote at ``url``."""
        for item in self._named(name):
            item["server"]["remotes"][0]["url"] = url

    def _named(self, name: str) -> list[dict[str, Any]]:
        found = [
            e
            for e in self.entries
            if isinstance(e, dict) and isinstance(e.get("server"), dict)
            if e["server"].get("name") == name
        ]
        if not found:
            raise KeyError(name)
        return found

    # -- serving

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v0.1/servers", self._servers)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        self._release.set()  # let hung requests go
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LocalRegistry:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _servers(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        offset = _offset(query.get("cursor"))
        if offset is None:
            return web.json_response({"error": "bad cursor"}, status=400)
        limit = max(1, min(int(query.get("limit") or 30), self.max_limit))
        page = offset // limit
        if self.fault is not None and page >= self.fault_from_page:
            return await self._faulty(self.fault, offset)
        listed = self.entries
        if query.get("version") == "latest":
            listed = [e for e in listed if _is_latest(e)]
        servers = listed[offset : offset + limit]
        following = offset + limit
        metadata: dict[str, Any] = {"count": len(servers)}
        if following < len(listed):
            metadata["nextCursor"] = _cursor(following)
        return web.json_response({"servers": servers, "metadata": metadata})

    async def _faulty(self, fault: str, offset: int) -> web.StreamResponse:
        if fault == "error":
            return web.json_response({"error": "internal error"}, status=500)
        if fault == "hang":
            await self._release.wait()
            return web.Response(status=503)
        if fault == "garbage":
            return web.Response(body=b"\x00\xff<html>not json", content_type="text/html")
        if fault == "cursor_loop":  # this page's own cursor as the next one
            same = _cursor(offset)
            return web.json_response({"servers": [], "metadata": {"nextCursor": same, "count": 0}})
        if fault == "oversize":
            padding = "x" * (10 * 1024 * 1024 + 1)
            item = entry("io.example/huge")
            item["server"]["description"] = padding
            return web.Response(
                body=json.dumps({"servers": [item]}), content_type="application/json"
            )
        if fault == "too_many":
            items = [entry(f"io.example/s{i}") for i in range(1001)]
            return web.json_response({"servers": items, "metadata": {"count": 1001}})
        if fault == "raw":
            return web.Response(body=self.raw_page, content_type="application/json")
        if fault == "wrong_types":
            return web.json_response({"servers": {"not": "a list"}, "metadata": []})
        raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")


def _is_latest(item: Any) -> bool:
    try:
        return item["_meta"][OFFICIAL_META]["isLatest"] is True
    except (KeyError, TypeError):
        return True  # (a malformed entry is served as is, for the client to refuse)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def _offset(cursor: str | None) -> int | None:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = text.partition(":")
        return int(value) if kind == "offset" and int(value) >= 0 else None
    except ValueError:
        return None
