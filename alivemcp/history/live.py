"""Counts of the 24h, 7d and 30d windows of every check, kept in memory by the writer.

``/api/v1/checks`` shows three uptimes for every check; at 50,000 checks, summing them from
the database takes over a second per request (measured: ~1.4 s for the three windows), so the
writer keeps, per check, a ring of 25 hourly and 31 daily slots of (up, degraded, down)
counts, updated after each committed batch and rebuilt from the database at start. Answering
all checks is then a few additions per check. The slots are the same buckets the database
holds, so these figures equal what ``/uptime?window=`` answers from the database.

Memory: 168 unsigned 32-bit counters per check (672 bytes; ~34 MB at 50,000 checks). The
writer thread writes, request threads read: a read racing a write can be one batch behind for
one check, never corrupt (each counter is one machine word in an ``array``).
"""

from __future__ import annotations

from array import array

__all__ = ["LIVE_WINDOWS", "LiveWindows"]

_HOUR_SLOTS = 25  # the current hour and the 24 before it
_DAY_SLOTS = 31  # the current day and the 30 before it
_STRIDE = 3 * (_HOUR_SLOTS + _DAY_SLOTS)
_DAY_BASE = 3 * _HOUR_SLOTS
#: window → (resolution in seconds, buckets before the current one)
LIVE_WINDOWS: dict[str, tuple[int, int]] = {"24h": (3600, 24), "7d": (86400, 7), "30d": (86400, 30)}


class LiveWindows:
    def __init__(self) -> None:
        self._counts = array("I")
        self._last_hour = array("q")
        self._last_day = array("q")

    def _grow(self, check_id: int) -> None:
        have = len(self._last_hour)
        if check_id < have:
            return
        more = max(check_id + 1 - have, have, 64)
        self._counts.extend(array("I", bytes(4 * more * _STRIDE)))
        self._last_hour.extend((-(2**62),) * more)
        self._last_day.extend((-(2**62),) * more)

    def add_hour(self, check_id: int, bucket: int, up: int, degraded: int, down: int) -> None:
        """Counts of the hour bucket starting at ``bucket`` (unix seconds)."""
        self._grow(check_id)
        self._add(self._last_hour, check_id, bucket // 3600, _HOUR_SLOTS, check_id * _STRIDE,
                  up, degraded, down)

    def add_day(self, check_id: int, bucket: int, up: int, degraded: int, down: int) -> None:
        """Counts of the day bucket starting at ``bucket`` (unix seconds)."""
        self._grow(check_id)
        self._add(self._last_day, check_id, bucket // 86400, _DAY_SLOTS,
                  check_id * _STRIDE + _DAY_BASE, up, degraded, down)

    def _add(self, last: array[int], check_id: int, index: int, slots: int, base: int,
             up: int, degraded: int, down: int) -> None:
        counts = self._counts
        newest = last[check_id]
        if index > newest:
            # Slots of buckets between the newest seen and this one are stale: clear them.
            for skipped in range(max(newest + 1, index - slots + 1), index + 1):
                at = base + 3 * (skipped % slots)
                counts[at] = counts[at + 1] = counts[at + 2] = 0
            last[check_id] = index
        elif index <= newest - slots:
            return  # older than the ring holds
        at = base + 3 * (index % slots)
        counts[at] += up
        counts[at + 1] += degraded
        counts[at + 2] += down

    def forget(self, check_id: int) -> None:
        """Clear a check's counts (its id was freed and may be given to a new check)."""
        if check_id >= len(self._last_hour):
            return
        base = check_id * _STRIDE
        self._counts[base:base + _STRIDE] = array("I", bytes(4 * _STRIDE))
        self._last_hour[check_id] = self._last_day[check_id] = -(2**62)

    def window(self, check_id: int, window: str, now: float) -> tuple[int, int, int]:
        """(up, degraded, down) over ``window`` (a key of :data:`LIVE_WINDOWS`)."""
        if check_id >= len(self._last_hour):
            return (0, 0, 0)
        resolution, before = LIVE_WINDOWS[window]
        if resolution == 3600:
            last, slots, base = self._last_hour, _HOUR_SLOTS, check_id * _STRIDE
        else:
            last, slots, base = self._last_day, _DAY_SLOTS, check_id * _STRIDE + _DAY_BASE
        current = int(now) // resolution
        newest = last[check_id]
        up = degraded = down = 0
        counts = self._counts
        for index in range(max(current - before, newest - slots + 1), min(current, newest) + 1):
            at = base + 3 * (index % slots)
            up += counts[at]
            degraded += counts[at + 1]
            down += counts[at + 2]
        return (up, degraded, down)
