"""``alivemcp_check_location_status``: each location's vote on a check, as a state set.

Cluster mode with several locations: a check's status-store entry holds the quorum verdict,
whose ``locations`` carry each location's latest result (its vote). This family says, per
check probed from two or more locations, per location and per status, 1 for the status that
location's vote says and 0 for the others: ``alivemcp_check_status`` is the verdict, this the
votes behind it. A location whose latest result is stale (older than the freshness window)
does not vote: it shows ``unknown``, as the verdict counts it (its series stay, so a rule
over them never sees a location vanish).

Labels are ``check``, ``location`` and ``status`` only: a check's own labels are left out
(one named ``location`` would clash; join on ``check`` with ``alivemcp_check_up`` for them).

At the scale goal (100,000 checks x 3 locations, 1,200,000 lines) it is rendered at every
scrape, in the render thread, from kept pieces: per check the head of its lines (name
escaped once), per location and status the four line endings; a check costs a few joins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from alivemcp.engine.results import CheckInfo
from alivemcp.engine.status import CheckState
from alivemcp.probe import Status

__all__ = ["FAMILY", "HELP", "LocationStatusFamily"]

FAMILY = "alivemcp_check_location_status"
HELP = (
    "State set of each location's vote on the check (cluster mode, a check probed from two "
    "or more locations): 1 for the status of the location's latest result; unknown while that "
    "result is stale (the location does not vote)."
)
_STATUSES = tuple(Status)
#: Fewer than this many locations: the verdict is the one location's result, nothing to show.
MIN_LOCATIONS = 2


def _escape(value: str) -> str:
    # metrics.py's label escaping (this module is imported by it, not the other way round).
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class LocationStatusFamily:
    """Renders the family from the status store's states (those the replica exports)."""

    def __init__(self) -> None:
        #: check name -> (its info, ``FAMILY{check="<name>",location="``): kept across scrapes.
        self._heads: dict[str, tuple[CheckInfo, bytes]] = {}
        #: (location, status) -> the rest of the location's four lines after the head.
        self._endings: dict[tuple[str, Status], tuple[bytes, ...]] = {}

    def _ending(self, location: str, current: Status) -> tuple[bytes, ...]:
        at = f'{_escape(location)}",status="'
        endings = tuple(
            f'{at}{s.value}"}} {1.0 if s is current else 0.0}\n'.encode("utf-8", "replace")
            for s in _STATUSES
        )
        self._endings[(location, current)] = endings
        return endings

    def render_into(
        self,
        parts: list[bytes],
        states: Sequence[CheckState],
        breathe: Callable[[], None],
        lines_per_part: int,
    ) -> None:
        """Append the family (header, then its lines in parts of about ``lines_per_part``)
        to ``parts``; a gauge is written alike in both formats. Runs in the metrics render
        thread; reads only immutable entries."""
        parts.append(f"# HELP {FAMILY} {HELP}\n# TYPE {FAMILY} gauge\n".encode())
        heads = self._heads
        kept: dict[str, tuple[CheckInfo, bytes]] = {}
        endings = self._endings
        unknown = Status.UNKNOWN
        # Votes per part: each is len(_STATUSES) lines.
        per_part = max(1, lines_per_part // len(_STATUSES))
        piece: list[bytes] = []
        add = piece.append
        in_piece = 0
        for state in states:
            last = state.last
            if last is None:
                continue
            votes = last.locations
            if votes is None or len(votes) < MIN_LOCATIONS:
                continue
            info = state.info
            name = info.name
            head = heads.get(name)
            if head is None or head[0] is not info:
                text = f'{FAMILY}{{check="{_escape(name)}",location="'
                head = (info, text.encode("utf-8", "replace"))
            kept[name] = head
            line_head = head[1]
            for location, vote in votes.items():
                current = vote.status if vote.fresh else unknown
                ending = endings.get((location, current)) or self._ending(location, current)
                add(line_head)
                add(line_head.join(ending))
            in_piece += len(votes)
            if in_piece >= per_part:
                parts.append(b"".join(piece))
                piece.clear()
                in_piece = 0
                breathe()
        if piece:
            parts.append(b"".join(piece))
        self._heads = kept  # checks gone, or no longer with several locations, drop out
