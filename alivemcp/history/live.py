"""Counts of the 24h, 7d and 30d windows of every check, kept in memory by the writer.

``/api/v1/checks`` shows three uptimes for every check; at 50,000 checks, summing them from
the database takes over a second per request (measured: ~1.4 s for the three windows), so the
writer keeps, per check, a ring of 25 hourly and 31 daily slots of (up, degraded, down)
counts, updated after each committed batch and rebuilt from the database at start. Answering
all checks is then a few additions per check. The slots are the same buckets the database
holds, so these figures equal what ``/uptime?window=`` answers from the database.

Reading a check's three windows by looping over its slots cost 1-1.5 s of CPU for 50,000
checks per request (measured), so each check also keeps running totals: the sum of its 25 hour
slots (24h as of its newest hour), of its 8 newest day slots (7d) and of all 31 day slots
(30d). A read for a ``now`` inside the check's newest hour and day (every check that ran
recently) is nine array reads; any other read falls back to the loop.

Memory: 168 unsigned 32-bit counters and 9 64-bit totals per check (744 bytes; ~37 MB at
50,000 checks). The writer thread writes, request threads read: a read racing a write can be
one batch behind for one check, never corrupt (each counter is one machine word).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

Row = tuple[int, int, int, int, int]  # check_id, bucket, up, degraded, down

__all__ = ["LIVE_WINDOWS", "LiveWindows"]

_HOUR_SLOTS = 25  # the current hour and the 24 before it
_DAY_SLOTS = 31  # the current day and the 30 before it
_STRIDE = 3 * (_HOUR_SLOTS + _DAY_SLOTS)
_DAY_BASE = 3 * _HOUR_SLOTS
#: Running totals per check: (up, degraded, down) of 24h, 7d, 30d.
_TOTALS = 9
_WEEK_DAYS = 8  # the current day and the 7 before it
#: window → (resolution in seconds, buckets before the current one)
LIVE_WINDOWS: dict[str, tuple[int, int]] = {"24h": (3600, 24), "7d": (86400, 7), "30d": (86400, 30)}


class LiveWindows:
    def __init__(self) -> None:
        self._counts = array("I")
        self._last_hour = array("q")
        self._last_day = array("q")
        self._totals = array("q")

    def _grow(self, check_id: int) -> None:
        have = len(self._last_hour)
        if check_id < have:
            return
        # An eighth more, not double: the arrays are most of this class's memory (744 bytes a
        # check), and doubling past 100,000 checks left up to 30 % of them unused for good.
        more = max(check_id + 1 - have, have // 8, 64)
        self._counts.extend(array("I", bytes(4 * more * _STRIDE)))
        self._last_hour.extend((-(2**62),) * more)
        self._last_day.extend((-(2**62),) * more)
        self._totals.extend(array("q", bytes(8 * more * _TOTALS)))

    def load(self, hours: Iterable[Row], days: Iterable[Row], now: float) -> None:
        """Fill empty rings from the database at start: (check_id, bucket, up, degraded,
        down) rows of each table, any order. A bulk path: ``add_*`` per row cost ~15 µs
        (2.8 M rows at 50,000 checks took 45 s on a busy machine); this is ~1 µs a row."""
        self._load(hours, 3600, _HOUR_SLOTS, 0, self._last_hour, now)
        self._load(days, 86400, _DAY_SLOTS, _DAY_BASE, self._last_day, now)
        counts, totals = self._counts, self._totals
        for cid in range(len(self._last_hour)):
            base, at = cid * _STRIDE, cid * _TOTALS
            day = base + _DAY_BASE
            for k in range(3):
                totals[at + k] = sum(counts[base + k : day : 3])
                totals[at + 6 + k] = sum(counts[day + k : base + _STRIDE : 3])
            newest = self._last_day[cid]
            if newest > -(2**62):
                self._sum_week(cid, newest, day)

    def _load(
        self, rows: Iterable[Row], width: int, slots: int, offset: int, last: array[int], now: float
    ) -> None:
        counts = self._counts
        current = int(now) // width
        oldest = current - slots
        for cid, bucket, up, degraded, down in rows:
            index = bucket // width
            if not oldest < index <= current:
                continue
            if cid >= len(last):
                self._grow(cid)
            at = cid * _STRIDE + offset + 3 * (index % slots)
            counts[at] += up
            counts[at + 1] += degraded
            counts[at + 2] += down
            if index > last[cid]:
                last[cid] = index

    def add_hour(self, check_id: int, bucket: int, up: int, degraded: int, down: int) -> None:
        """Counts of the hour bucket starting at ``bucket`` (unix seconds)."""
        if check_id >= len(self._last_hour):
            self._grow(check_id)
        self._add(
            self._last_hour,
            check_id,
            bucket // 3600,
            _HOUR_SLOTS,
            check_id * _STRIDE,
            up,
            degraded,
            down,
        )

    def add_day(self, check_id: int, bucket: int, up: int, degraded: int, down: int) -> None:
        """Counts of the day bucket starting at ``bucket`` (unix seconds)."""
        if check_id >= len(self._last_hour):
            self._grow(check_id)
        self._add(
            self._last_day,
            check_id,
            bucket // 86400,
            _DAY_SLOTS,
            check_id * _STRIDE + _DAY_BASE,
            up,
            degraded,
            down,
        )

    def _add(
        self,
        last: array[int],
        check_id: int,
        index: int,
        slots: int,
        base: int,
        up: int,
        degraded: int,
        down: int,
    ) -> None:
        counts, totals = self._counts, self._totals
        hourly = slots == _HOUR_SLOTS
        whole = check_id * _TOTALS + (0 if hourly else 6)  # the totals of the whole ring
        newest = last[check_id]
        if index > newest:
            # Slots of buckets between the newest seen and this one are stale: clear them.
            for skipped in range(max(newest + 1, index - slots + 1), index + 1):
                at = base + 3 * (skipped % slots)
                totals[whole] -= counts[at]
                totals[whole + 1] -= counts[at + 1]
                totals[whole + 2] -= counts[at + 2]
                counts[at] = counts[at + 1] = counts[at + 2] = 0
            last[check_id] = index
            if not hourly:  # the 7d window moved: sum its 8 slots again (once a day a check)
                self._sum_week(check_id, index, base)
        elif index <= newest - slots:
            return  # older than the ring holds
        at = base + 3 * (index % slots)
        counts[at] += up
        counts[at + 1] += degraded
        counts[at + 2] += down
        totals[whole] += up
        totals[whole + 1] += degraded
        totals[whole + 2] += down
        if not hourly and index > last[check_id] - _WEEK_DAYS:
            week = check_id * _TOTALS + 3
            totals[week] += up
            totals[week + 1] += degraded
            totals[week + 2] += down

    def _sum_week(self, check_id: int, newest: int, base: int) -> None:
        counts = self._counts
        up = degraded = down = 0
        for index in range(newest - _WEEK_DAYS + 1, newest + 1):
            at = base + 3 * (index % _DAY_SLOTS)
            up += counts[at]
            degraded += counts[at + 1]
            down += counts[at + 2]
        week = check_id * _TOTALS + 3
        self._totals[week], self._totals[week + 1], self._totals[week + 2] = up, degraded, down

    def forget(self, check_id: int) -> None:
        """Clear a check's counts (its id was freed and may be given to a new check)."""
        if check_id >= len(self._last_hour):
            return
        base = check_id * _STRIDE
        self._counts[base : base + _STRIDE] = array("I", bytes(4 * _STRIDE))
        self._last_hour[check_id] = self._last_day[check_id] = -(2**62)
        at = check_id * _TOTALS
        self._totals[at : at + _TOTALS] = array("q", bytes(8 * _TOTALS))

    def windows(self, check_id: int, now: float) -> tuple[int, ...]:
        """(up, degraded, down) of 24h, 7d and 30d: nine counts."""
        if check_id >= len(self._last_hour):
            return (0,) * 9
        at = check_id * _TOTALS
        t = self._totals
        second = int(now)
        if self._last_hour[check_id] == second // 3600:
            hour: tuple[int, ...] = (t[at], t[at + 1], t[at + 2])
        else:
            hour = self.window(check_id, "24h", now)
        if self._last_day[check_id] == second // 86400:
            days: tuple[int, ...] = (
                t[at + 3],
                t[at + 4],
                t[at + 5],
                t[at + 6],
                t[at + 7],
                t[at + 8],
            )
        else:
            days = (*self.window(check_id, "7d", now), *self.window(check_id, "30d", now))
        return (*hour, *days)

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
