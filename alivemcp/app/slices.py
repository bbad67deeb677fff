"""Work over every check, done a slice at a time with the event loop let run in between.

A reload or a refresh at 100,000 checks builds name sets, starts teardowns and applies changes
to every check; done in one go, each held the loop for tens to hundreds of milliseconds (the
probes' runs waited, and were late). Here each of those jobs takes :data:`APPLY_SLICE` steps
between two turns of the loop (some tens of milliseconds a slice).
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Sequence

from alivemcp.config import ResolvedCheck
from alivemcp.engine.runner import ProbeHandle

__all__ = ["APPLY_SLICE", "AnyOf", "Slices", "names_of", "teardown_all"]

#: Checks handled between two turns of the event loop when a config is applied (probe
#: instances built, teardowns started): each slice takes some tens of milliseconds.
APPLY_SLICE = 1000


async def names_of(checks: Sequence[ResolvedCheck]) -> frozenset[str]:
    """The checks' names, :data:`APPLY_SLICE` at a time with the loop let run in between."""
    names: set[str] = set()
    for i, check in enumerate(checks):
        names.add(check.name)
        if i % APPLY_SLICE == APPLY_SLICE - 1:
            await asyncio.sleep(0)
    return frozenset(names)


class AnyOf:
    """A name is in it when it is in any of ``parts``: membership without building their
    union (a set of 100,000 names in one go holds the loop)."""

    __slots__ = ("_parts",)

    def __init__(self, *parts: Container[str]) -> None:
        self._parts = parts

    def __contains__(self, name: object) -> bool:
        return any(name in part for part in self._parts)


class Slices:
    """Counts the steps of a job that must not be left half-done and lets the loop run every
    :data:`APPLY_SLICE` of them. Cancelled at one of those points, it yields no more: the job
    finishes in one go and then checks :attr:`cancelled` to pass the cancellation on."""

    __slots__ = ("cancelled", "count")

    def __init__(self) -> None:
        self.count = 0
        self.cancelled = False

    async def step(self) -> None:
        self.count += 1
        if self.count % APPLY_SLICE or self.cancelled:
            return
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled = True


async def teardown_all(handles: list[ProbeHandle], seconds: float) -> None:
    """Tear ``handles`` down side by side, each within ``seconds``. Started
    :data:`APPLY_SLICE` at a time with the loop let run in between (a reload replacing
    100,000 checks starts as many teardowns). Once started, a teardown runs to its end even if
    the caller is cancelled: a canary clean-up is never cut half-way."""
    handles = [h for h in handles if h.needs_teardown]
    tasks: list[asyncio.Task[None]] = []
    for start in range(0, len(handles), APPLY_SLICE):
        loop = asyncio.get_running_loop()
        tasks += [
            loop.create_task(h.teardown(seconds)) for h in handles[start : start + APPLY_SLICE]
        ]
        if start + APPLY_SLICE < len(handles):
            await asyncio.sleep(0)
    # Waited for a slice at a time too: waiting registers a callback on every task at once.
    for start in range(0, len(tasks), APPLY_SLICE):
        await asyncio.wait(tasks[start : start + APPLY_SLICE])
