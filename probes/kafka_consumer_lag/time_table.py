"""Time-lag estimates from the log-end offsets seen on earlier runs (kafka-lag-exporter's
method), for partitions whose first unconsumed message cannot be read."""

from __future__ import annotations

import bisect

__all__ = ["OffsetTimeTable"]


class OffsetTimeTable:
    """(log-end offset, time) points of one partition, for kafka-lag-exporter-style estimates.

    The message at offset ``o`` was written after the last time the log end was seen at or
    below ``o`` and before the first time it was seen above ``o``; interpolating between those
    two points gives its approximate write time. For an unchanged log end only the first and
    the latest sighting are kept, so a quiet partition does not fill the table.
    """

    __slots__ = ("_offsets", "_times", "max_points")

    def __init__(self, max_points: int = 64) -> None:
        self.max_points = max(3, max_points)
        self._offsets: list[int] = []
        self._times: list[float] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, log_end: int, at: float) -> None:
        if self._offsets and log_end < self._offsets[-1]:
            # The log went backwards (topic recreated, truncation): old points describe
            # another log.
            self._offsets.clear()
            self._times.clear()
        if (
            len(self._offsets) >= 2
            and self._offsets[-1] == log_end
            and self._offsets[-2] == log_end
        ):
            self._times[-1] = at
        else:
            self._offsets.append(log_end)
            self._times.append(at)
        if len(self._offsets) > self.max_points:
            del self._offsets[0]
            del self._times[0]

    def written_at(self, offset: int) -> tuple[float, str] | None:
        """Estimated write time of the message at ``offset`` and how it was obtained:
        ``interpolated``, ``extrapolated``, or ``at least`` (only known to be written before
        the table's first point, so the lag is a lower bound); None when the table cannot
        tell."""
        offsets, times = self._offsets, self._times
        if not offsets or offset >= offsets[-1]:
            return None  # not written yet as far as the table knows
        # First point whose log end is past the message: it was written before that time.
        after = bisect.bisect_right(offsets, offset)
        if after > 0:
            # Latest sighting of a log end at or below the offset: written after that time.
            o1, t1 = offsets[after - 1], times[after - 1]
            o2, t2 = offsets[after], times[after]
            return t1 + (offset - o1) / (o2 - o1) * (t2 - t1), "interpolated"
        # Older than the whole table: extrapolate with the table's average write rate.
        o_first, t_first = offsets[0], times[0]
        o_last, t_last = offsets[-1], times[-1]
        if o_last > o_first and t_last > t_first:
            rate = (o_last - o_first) / (t_last - t_first)
            return t_first - (o_first - offset) / rate, "extrapolated"
        return t_first, "at least"
