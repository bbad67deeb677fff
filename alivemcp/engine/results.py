"""Check results as the engine records them: what metrics, status API and alerting consume.

These are the only things outside a probe that see what a probe said; none of them sees the
probe itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alivemcp.probe import LabeledObservation, Status
from alivemcp.surface import Surface

if TYPE_CHECKING:
    from alivemcp.config.checks import DiscoveredOrigin

__all__ = ["CheckInfo", "CheckResult", "LocationVote"]


@dataclass(frozen=True, slots=True)
class CheckInfo:
    """The identity of a check: what alerting routes on and metrics label by."""

    name: str
    probe_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[str] = ()
    #: Where a discovered check came from (None: written in the config file).
    discovered: DiscoveredOrigin | None = None
    #: Seconds between runs (0: unknown). Cluster mode: how long a location's vote stays fresh.
    interval: float = 0.0
    #: Cluster mode: the locations that vote on it (empty: every location seen) and how many
    #: must agree (0: a majority).
    locations: tuple[str, ...] = ()
    quorum: int = 0


@dataclass(frozen=True, slots=True)
class LocationVote:
    """One location's latest result of a check, as the quorum saw it."""

    status: Status
    reason: str
    started_at: float  # unix time
    finished_at: float  # unix time
    replica: str
    #: Whether it still votes (younger than the freshness window).
    fresh: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "last_run": self.started_at,
            "replica": self.replica,
            "fresh": self.fresh,
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One finished run of one check."""

    check: CheckInfo
    status: Status
    reason: str
    duration_seconds: float
    started_at: float  # unix time
    finished_at: float  # unix time
    observations: Mapping[str, float] = field(default_factory=dict)
    labeled_observations: Sequence[LabeledObservation] = ()
    details: Mapping[str, Any] | None = None
    lateness_seconds: float = 0.0
    #: The cluster replica that produced it ("" in standalone mode, or run by this process).
    replica: str = ""
    #: What the target offers its clients (see :mod:`alivemcp.surface`); None: not looked at.
    surface: Surface | None = None
    #: Cluster mode: where the run was made (a result), or the votes of every location of
    #: the check (a quorum verdict: ``locations`` set).
    location: str = ""
    locations: Mapping[str, LocationVote] | None = None

    def as_json(self) -> dict[str, Any]:
        """The shape ``check --json`` prints and ``/status`` serves for a run."""
        out: dict[str, Any] = {
            "check": self.check.name,
            "probe": self.check.probe_type,
            "status": self.status.value,
            "reason": self.reason,
            "duration_seconds": round(self.duration_seconds, 6),
            "observations": dict(self.observations),
            "started_at": self.started_at,
        }
        if self.labeled_observations:
            out["labeled_observations"] = [
                {"name": o.name, "labels": dict(o.labels), "value": o.value}
                for o in self.labeled_observations
            ]
        if self.check.labels:
            out["labels"] = dict(self.check.labels)
        if self.details:
            out["details"] = self.details
        if self.locations is not None:
            out["locations"] = {k: v.as_json() for k, v in self.locations.items()}
        return out
