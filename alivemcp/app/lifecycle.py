"""Signals from the first moment of ``alivemcp run`` until the daemon's event loop takes over.

Python leaves SIGHUP and SIGTERM at their default action (terminate) until someone installs a
handler, and loading a large config takes seconds: a SIGHUP sent while the process starts (an
operator reloading right after a deploy) would kill it. :func:`hold_signals` is the first thing
``run`` does. Until :func:`take_held_signals` hands them to the daemon, SIGHUP is remembered (the
reload happens once the daemon has started) and SIGTERM/SIGINT end the process at once with exit
status 0: nothing has been opened or written yet, so there is nothing to clean up.

This module imports nothing heavy, so installing the handlers costs no start-up time.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["STOP_SIGNALS", "hold_signals", "take_held_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_held: list[int] = []
_taken = False


def hold_signals() -> None:
    """Install the start-up handlers (main thread only; safe to call more than once)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGHUP, _on_signal)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def take_held_signals() -> list[int]:
    """The signals held so far, oldest first; from now on the caller's handlers own them.

    Call after installing the event loop's handlers, so no signal falls between the two.
    """
    global _taken
    _taken = True
    held = list(_held)
    _held.clear()
    return held


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if signum in STOP_SIGNALS and not _taken:
        raise SystemExit(0)
    _held.append(signum)
