"""The daemon's heap: the collector kept off long-lived objects, glibc's allocator tuned.

At 100,000 checks the daemon holds millions of long-lived objects. Two things about them are
costly by default:

- A full collection walks all of them and pauses the event loop for most of a second:
  :func:`settle_heap` freezes what was built, so no collection scans it again.
- glibc keeps memory it was given back for reuse, and the daemon's large short-lived buffers
  (a scrape's ~70 MB of exposition pieces, a config load's YAML nodes) came from the heap:
  once freed, the long-lived objects made in between pinned those pages (measured: about
  80 MB more resident after the first scrape of 100,000 checks). :func:`tune_allocator` fixes
  glibc's mmap threshold, so a block of 128 KiB or more is always a mapping of its own and
  freed back to the system, and caps the per-thread arenas at two (the render and history
  threads each kept a heap of their own). ``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``
  or ``MALLOC_TRIM_THRESHOLD_`` set in the environment is left as it is.

Elsewhere than glibc (musl, macOS) both are no-ops apart from the freeze.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["dropping", "settle_heap", "tune_allocator"]

_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: Blocks this large or larger are mappings of their own (glibc's starting value, which it
#: otherwise raises up to 32 MiB as large blocks are freed).
MMAP_THRESHOLD = 128 * 1024
#: Free memory kept at the top of the heap before glibc gives it back. Fixing the mmap
#: threshold also stops glibc adjusting this one from its 128 KiB start; 16 MiB keeps the top
#: of the heap from being given back and taken again as the working set moves. (Measured:
#: no difference in CPU per run either way, within the engine benchmark's noise.)
TRIM_THRESHOLD = 16 << 20
#: The main arena and one for every other thread.
ARENA_MAX = 2


def dropping(doomed: list[Any]) -> Iterator[None]:
    """Let go of ``doomed`` (the caller's last references to them) one at a time, yielding
    after each: the caller lets the loop run every so many steps. What a reload replaces at
    100,000 checks is millions of objects: freed all at once when the last reference went,
    that was a fifth of a second on the event loop in one step."""
    while doomed:
        doomed.pop()
        yield


def settle_heap() -> None:
    """Move everything built so far (checks, probe instances, jobs) out of the collector's
    reach. With 50,000 checks a full collection walks millions of long-lived objects and
    pauses the event loop for most of a second; frozen objects are never scanned again.

    Then the memory a config load used for a moment (YAML nodes, the raw document: several
    times what the loaded checks keep) goes back to the system: glibc keeps freed memory for
    reuse, and at 100,000 checks that was hundreds of MB of resident memory for nothing."""
    gc.collect()
    gc.freeze()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def tune_allocator() -> None:
    """Fix glibc's mmap threshold and cap its arenas (see the module docstring); call before
    the daemon starts its threads. Settings from the environment win."""
    libc = _glibc()
    if libc is None:
        return
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(_M_ARENA_MAX, ARENA_MAX)


@functools.cache
def _glibc() -> Any:
    """The C library, when it is glibc (it has ``malloc_trim`` and ``mallopt``); else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc
