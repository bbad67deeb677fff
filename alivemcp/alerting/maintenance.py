"""Maintenance windows: which checks are held right now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from alivemcp.alerting.config import MaintenanceWindow
from alivemcp.alerting.matchers import Matcher, match_all, parse_matchers

__all__ = ["MaintenanceCalendar"]


class MaintenanceCalendar:
    def __init__(self, windows: Sequence[MaintenanceWindow]) -> None:
        self._windows: list[tuple[MaintenanceWindow, tuple[Matcher, ...]]] = [
            (w, parse_matchers(w.matchers)) for w in windows
        ]

    def active_for(self, labels: Mapping[str, str], now: float) -> str | None:
        """The name of a window holding a check with these labels at ``now``, else None."""
        for window, matchers in self._windows:
            if match_all(matchers, labels) and _is_open(window, now):
                return window.name
        return None

    def __bool__(self) -> bool:
        return bool(self._windows)


def _is_open(window: MaintenanceWindow, now: float) -> bool:
    if window.recurring is None:
        assert window.start is not None and window.end is not None
        return window.start.timestamp() <= now < window.end.timestamp()
    rec = window.recurring
    zone = ZoneInfo(rec.timezone)
    local_now = datetime.fromtimestamp(now, tz=UTC).astimezone(zone)
    days = rec.weekday_numbers()
    # A window that started on an earlier day may still be open (durations past midnight).
    lookback = int(rec.duration // 86400) + 1
    for back in range(lookback + 1):
        day = (local_now - timedelta(days=back)).date()
        if day.weekday() not in days:
            continue
        start = datetime.combine(day, rec.start, tzinfo=zone)
        if start.timestamp() <= now < start.timestamp() + rec.duration:
            return True
    return False
