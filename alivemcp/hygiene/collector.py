"""The collector's schedule while checks run: when full and young collections happen.

Garbage-collection tuning is the process's business, not the scheduler's: the scheduler only
starts a :class:`CollectorPolicy` while it runs and settles what a batch of first runs made
(:func:`settle_young_objects`). Why each rule exists, with the measurements, is in the
docstrings below; :mod:`alivemcp.hygiene.heap` holds the freeze and allocator tuning of loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = [
    "FULL_COLLECTION_SECONDS",
    "YOUNG_COLLECTION_SECONDS",
    "CollectorPolicy",
    "collector_paused",
    "settle_young_objects",
]


def settle_young_objects() -> None:
    """After a batch's first runs: what they created to last (each check's first result, the
    alerting and history state made on it) leaves the collector's reach, as the checks
    themselves did at start-up (the daemon's gc.freeze): at 100,000 checks a full collection
    walking them paused the loop for a second. The young garbage is cleared first; a full
    collection first would itself be such a pause."""
    gc.collect(1)
    gc.freeze()


#: Seconds between the full collections the scheduler makes itself (see CollectorPolicy).
FULL_COLLECTION_SECONDS = 300.0
#: Seconds between the young collections it makes itself (see CollectorPolicy).
YOUNG_COLLECTION_SECONDS = 0.05
#: A generation-2 threshold never reached: no full collection starts by itself.
_NEVER = 2**31 - 1


class CollectorPolicy:
    """Full garbage collections every :data:`FULL_COLLECTION_SECONDS` instead of whenever the
    old generation grew by a quarter, and the young generations collected every
    :data:`YOUNG_COLLECTION_SECONDS` besides CPython's own rule.

    Every check's latest result (and its status entry) lives one interval, long enough to reach
    the old generation, so at 100,000 checks that generation holds a few hundred thousand live
    objects, and CPython's own rule started a full collection of all of them about every
    quarter interval: 150-350 ms with the loop held (measured with
    ``benchmarks/lateness_trace.py``), the cause of most runs started over 50 ms late. A full
    collection finds nothing in that steady state (replaced results are freed by their
    reference counts; the collector only matters for cycles), so it is made on a timer: the
    same pause, a few times an hour. The process-wide thresholds are put back when the last
    started scheduler stops.

    The young collections: CPython starts one only once allocations exceed deallocations by
    700, and here nearly every allocation that lasts is matched by freeing an old object (a new
    result replaces the last one, a scrape's new exposition entry for a check the entry it
    made last time). So the youngest generation grew unexamined, 16,000 objects in 20 s of
    steady state and 110,000 in a scrape after every check had run, and the collection that
    finally came walked them all with the interpreter lock held: loop stalls of 60-280 ms in
    those scrapes (seen through the collector's callbacks, with the size of each generation
    at each collection). On a timer, each collection examines what 50 ms made, about a
    millisecond's work, and moves it straight to the old generation: each object is examined
    about once, as before, in small pieces."""

    _users = 0
    _saved: tuple[int, int, int] = (0, 0, 0)

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._young_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        cls = type(self)
        if cls._users == 0:
            cls._saved = gc.get_threshold()
            young, middle, _ = cls._saved
            gc.set_threshold(young, middle, _NEVER)
        cls._users += 1
        self._loop = loop
        self._timer = loop.call_later(FULL_COLLECTION_SECONDS, self._collect)
        self._young_timer = loop.call_later(YOUNG_COLLECTION_SECONDS, self._collect_young)

    def _collect(self) -> None:
        gc.collect()
        assert self._loop is not None
        self._timer = self._loop.call_later(FULL_COLLECTION_SECONDS, self._collect)

    def _collect_young(self) -> None:
        if gc.isenabled():  # (a config load pauses the collector: its objects all live)
            gc.collect(1)
        assert self._loop is not None
        self._young_timer = self._loop.call_later(YOUNG_COLLECTION_SECONDS, self._collect_young)

    def stop(self) -> None:
        if self._timer is None:
            return
        self._timer.cancel()
        self._timer = None
        if self._young_timer is not None:
            self._young_timer.cancel()
            self._young_timer = None
        cls = type(self)
        cls._users -= 1
        if cls._users == 0:
            gc.set_threshold(*cls._saved)


#: Nested pauses (a reload in a thread while another load runs) resume the collector once.
_pause_lock = threading.Lock()
_pauses = 0
_resume_collector = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a config loads. A load builds millions of
    objects (YAML nodes, the document, models) that all live until it ends; each young
    collection on the way re-walks the older ones, which at 100,000 checks was half the load.
    What a load throws away is freed by reference counting; the collector resumes after."""
    global _pauses, _resume_collector
    with _pause_lock:
        _pauses += 1
        if _pauses == 1:
            _resume_collector = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume_collector:
                gc.enable()
