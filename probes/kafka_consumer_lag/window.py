"""Burrow-style evaluation of one group's partition over its last ``window`` runs.

- ``rewind``: the committed offset went back inside the window (a reset or a replay);
- ``stop``: the committed offset did not move over the whole window, the lag stayed above
  zero, and the group has no active members (the consumers are gone);
- ``stall``: the same, but the group still has members, or its membership is not visible;
- ``warn``: the lag grew on every run of the whole window (falling behind).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from enum import StrEnum

__all__ = ["PartitionWindow", "Sample", "WindowState", "classify_window"]


class WindowState(StrEnum):
    """What the window of recent samples says about one partition (Burrow's vocabulary)."""

    OK = "ok"
    WARN = "warn"
    REWIND = "rewind"
    STALL = "stall"
    STOP = "stop"


class Sample:
    """One run's view of one group's partition (a plain slotted class: 40,000 are made per
    run in a big check, and the lag is read several times each)."""

    __slots__ = ("at", "committed", "lag", "log_end")

    def __init__(self, at: float, committed: int, log_end: int) -> None:
        self.at = at
        self.committed = committed
        self.log_end = log_end
        # A committed offset past the log end (topic recreated, unclean election) is no lag.
        self.lag = log_end - committed if log_end > committed else 0

    def __repr__(self) -> str:
        return f"Sample(at={self.at}, committed={self.committed}, log_end={self.log_end})"


class PartitionWindow:
    """The last ``window`` samples of one group's partition, with the Burrow rules kept as
    running counts so a run costs O(1) per partition (40,000 of them in one check is real)."""

    __slots__ = ("_growing", "_rewind", "_rewind_age", "_still", "samples", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.samples: deque[Sample] = deque(maxlen=window)
        self._still = 0  # trailing samples with the same committed offset, all lagging
        self._growing = 0  # trailing samples whose lag rose on each step
        self._rewind: tuple[int, int] | None = None
        self._rewind_age = 0  # samples appended since the rewind step

    def add(self, sample: Sample) -> None:
        samples = self.samples
        if samples and sample.log_end < samples[-1].log_end:
            self.clear()  # another log under the same name: old samples do not apply
        previous = samples[-1] if samples else None
        lag = sample.lag
        if previous is None:
            self._still = 1 if lag > 0 else 0
            self._growing = 1
        else:
            if sample.committed < previous.committed:
                self._rewind = (previous.committed, sample.committed)
                self._rewind_age = 0
            elif self._rewind is not None:
                self._rewind_age += 1
            if lag > 0 and sample.committed == previous.committed:
                self._still = self._still + 1 if self._still else 1
            else:
                self._still = 1 if lag > 0 else 0
            self._growing = self._growing + 1 if lag > previous.lag else 1
        samples.append(sample)

    def clear(self) -> None:
        self.samples.clear()
        self._still = self._growing = 0
        self._rewind = None

    def state(self, members_active: bool | None) -> tuple[WindowState, str]:
        """Burrow-style verdict; ``stop``, ``stall`` and ``warn`` need a full window (fewer
        samples cannot show that progress stopped or that lag only grew)."""
        samples, window = self.samples, self.window
        # The rewind step is inside the window while both of its samples are.
        if self._rewind is not None and self._rewind_age <= window - 2:
            older, newer = self._rewind
            return WindowState.REWIND, f"committed offset went back from {older} to {newer}"
        if not samples or samples[-1].lag == 0:
            return WindowState.OK, "caught up"
        if len(samples) < window:
            return WindowState.OK, "lagging"
        span = samples[-1].at - samples[0].at
        if self._still >= window:
            if members_active is False:
                return WindowState.STOP, (
                    f"no commits over the last {window} runs ({span:.0f}s) and the group "
                    "has no active members"
                )
            return WindowState.STALL, (
                f"committed offset stuck at {samples[-1].committed} over the last {window} "
                f"runs ({span:.0f}s)"
            )
        if self._growing >= window:
            return WindowState.WARN, (
                f"lag grew on each of the last {window} runs "
                f"({samples[0].lag} -> {samples[-1].lag} messages)"
            )
        return WindowState.OK, "lagging"


def classify_window(
    samples: Sequence[Sample], window: int, members_active: bool | None
) -> tuple[WindowState, str]:
    """Burrow-style evaluation of one partition's last ``window`` samples, oldest first."""
    tracker = PartitionWindow(window)
    for sample in list(samples)[-window:]:
        tracker.add(sample)
    return tracker.state(members_active)
