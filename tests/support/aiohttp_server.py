"""An aiohttp application served on a free loopback port, for tests that need a real server.

The stand-ins (alert receivers, AWS endpoints, status pages) differ in their routes only; how
they are served, found and torn down is written once here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from aiohttp.log import access_logger


@dataclass(frozen=True)
class ServedApp:
    """Where a served application listens."""

    port: int

    @property
    def url(self) -> str:
        """The base URL, without a trailing slash: ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def serve_app(
    app: web.Application, *, access_log: bool = False, shutdown_timeout: float = 60.0
) -> AsyncIterator[ServedApp]:
    """Serve ``app`` on 127.0.0.1 on a port the OS picks, for the duration of the block.

    ``access_log`` keeps aiohttp's access log lines (off by default: tests read their own
    logs); ``shutdown_timeout`` bounds how long leaving the block waits for requests still
    in flight (a stand-in holding a request open wants a short one).
    """
    runner = web.AppRunner(
        app,
        shutdown_timeout=shutdown_timeout,
        access_log=access_logger if access_log else None,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield ServedApp(port=int(runner.addresses[0][1]))
    finally:
        await runner.cleanup()
