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

__all__ = ["CheckInfo", "CheckResult"]


@dataclass(frozen=True, slots=True)
class CheckInfo:
    """The identity of a check: what alerting routes on and metrics label by."""

    name: str
    probe_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: Sequence[str] = ()
    #: Where a discovered check came from (None: written in the config file).
    discovered: DiscoveredOrigin | None = None


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
        return out
