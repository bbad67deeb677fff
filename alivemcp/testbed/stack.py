"""The demo's local stack: what each part started, and the variables the demo config uses."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from alivemcp.testbed.moto import MotoServer

Cleanup = Callable[[], object] | Callable[[], Awaitable[object]]


@dataclass
class DemoStack:
    """Shared by every demo part. A part's ``async def start(stack)`` starts its services,
    creates the resources its checks need, and publishes what ``config/demo.yaml``
    interpolates with :meth:`set_env` (e.g. ``DEMO_KAFKA_BOOTSTRAP``)."""

    workdir: Path
    moto: MotoServer
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _cleanups: list[Cleanup] = field(default_factory=list)

    def set_env(self, name: str, value: str) -> None:
        self.env[name] = value

    def note(self, line: str) -> None:
        """A line printed to the user when the demo is up (where to look, what is running)."""
        self.notes.append(line)

    def add_cleanup(self, fn: Cleanup) -> None:
        self._cleanups.append(fn)

    async def close(self) -> None:
        while self._cleanups:
            fn = self._cleanups.pop()
            started = time.monotonic()
            try:
                out = fn()
                if inspect.isawaitable(out):
                    await asyncio.wait_for(out, 15)
            except Exception as exc:  # keep cleaning up the rest
                print(f"demo cleanup failed: {type(exc).__name__}: {exc}")
            took = time.monotonic() - started
            if took > 2:
                print(f"demo cleanup {getattr(fn, '__qualname__', fn)} took {took:.1f}s")
