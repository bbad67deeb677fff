"""Fixtures for the HTTP client tests: both event loops the daemon may run on, and a
``getaddrinfo`` stand-in whose answers (and hangs) the test decides."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from tests.support.http_client_stand_ins import Lookups, Run

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=list(LOOPS))
def run(request: pytest.FixtureRequest) -> Run:
    """Run a coroutine to completion on a fresh loop of the parametrized kind."""
    factory = LOOPS[request.param]

    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as loop_runner:
            return loop_runner.run(coro)

    return runner


@pytest.fixture
def lookups() -> Iterator[Lookups]:
    stand_in = Lookups()
    try:
        yield stand_in
    finally:
        stand_in.release()
