"""What a probe run says: its :class:`Status`, its :class:`ProbeResult` and the numbers it
observed, and the names those take as metrics (which check labels would collide with).
Part of the probe contract, re-exported by :mod:`alivemcp.probe`; the lowest of its
modules (:mod:`alivemcp.verdict` builds on it), so it imports nothing of alivemcp's but
:mod:`alivemcp.surface` (which imports nothing of alivemcp's either).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from alivemcp.surface import Surface

__all__ = [
    "CHECK_IDENTITY_LABELS",
    "CHECK_SERIES_LABELS",
    "OBSERVATION_NAME",
    "OBSERVATION_PREFIX",
    "LabeledObservation",
    "ProbeResult",
    "Status",
    "engine_label_owners",
]

#: An observation ``name`` is exported as the gauge ``alivemcp_probe_<name>``.
OBSERVATION_PREFIX = "alivemcp_probe_"
#: Labels on every per-check series, before the check's own labels.
CHECK_IDENTITY_LABELS = ("check", "probe")
#: The extra label each multi-series family adds; the metrics renderer writes exactly these,
#: and config validation refuses user labels of the same names (see
#: :func:`engine_label_owners`).
CHECK_SERIES_LABELS = {
    "alivemcp_check_status": "status",
    "alivemcp_check_runs_total": "result",
    "alivemcp_check_uptime_ratio": "window",
}


def engine_label_owners() -> dict[str, str]:
    """Label name → a per-check series of the engine that already carries it."""
    owners = {label: "every alivemcp_check_* series" for label in CHECK_IDENTITY_LABELS}
    owners.update({label: family for family, label in CHECK_SERIES_LABELS.items()})
    return owners


OBSERVATION_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class Status(StrEnum):
    """The four verdicts. ``unknown`` means the prober could not decide, never "target down"."""

    UP = "up"
    DEGRADED = "degraded"
    DOWN = "down"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class LabeledObservation:
    """A named number with extra labels (e.g. per consumer group), exported as a gauge.

    Keep label values bounded: they multiply series for every check.
    """

    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe run saw.

    ``observations`` become gauges named ``alivemcp_probe_<name>``; names must match
    ``[a-z_][a-z0-9_]*`` and carry their unit (``_seconds``, ``_bytes``, ``_total``...).
    ``details`` is free-form JSON-able data for the status API and ``check --json``.
    ``surface`` is what the target offers its clients (an MCP server's tools...), for the
    surface consumers (versions, approvals, alerts on change); None when not looked at.
    """

    status: Status
    reason: str
    observations: Mapping[str, float] = field(default_factory=dict)
    labeled_observations: Sequence[LabeledObservation] = ()
    details: Mapping[str, Any] | None = None
    surface: Surface | None = None

    @classmethod
    def up(cls, reason: str = "ok", **kwargs: Any) -> ProbeResult:
        return cls(Status.UP, reason, **kwargs)

    @classmethod
    def degraded(cls, reason: str, **kwargs: Any) -> ProbeResult:
        return cls(Status.DEGRADED, reason, **kwargs)

    @classmethod
    def down(cls, reason: str, **kwargs: Any) -> ProbeResult:
        return cls(Status.DOWN, reason, **kwargs)

    @classmethod
    def unknown(cls, reason: str, **kwargs: Any) -> ProbeResult:
        return cls(Status.UNKNOWN, reason, **kwargs)

    def problems(self) -> list[str]:
        """Why this result is malformed (empty when it is well-formed).

        The engine calls this on whatever a probe returned, so a buggy or third-party probe
        that returns garbage is reported as ``unknown`` instead of poisoning metrics.
        """
        found: list[str] = []
        if not isinstance(self.status, Status):
            found.append(f"status {self.status!r} is not one of {[s.value for s in Status]}")
        if not isinstance(self.reason, str):
            found.append(f"reason is {type(self.reason).__name__}, not str")
        if not isinstance(self.observations, Mapping):
            found.append("observations is not a mapping")
        else:
            for name, value in self.observations.items():
                found.extend(_observation_problems(name, value))
        if not isinstance(self.labeled_observations, Sequence):
            found.append("labeled_observations is not a sequence")
        else:
            for item in self.labeled_observations:
                if not isinstance(item, LabeledObservation):
                    found.append(f"labeled observation {item!r} is not a LabeledObservation")
                    continue
                found.extend(_observation_problems(item.name, item.value))
                if not all(
                    isinstance(k, str) and OBSERVATION_NAME.match(k) and isinstance(v, str)
                    for k, v in item.labels.items()
                ):
                    found.append(f"labeled observation {item.name!r} has invalid labels")
        if self.details is not None and not isinstance(self.details, Mapping):
            found.append("details is not a mapping")
        if self.surface is not None and not isinstance(self.surface, Surface):
            found.append("surface is not a Surface")
        return found


def _observation_problems(name: object, value: object) -> list[str]:
    if not isinstance(name, str) or not OBSERVATION_NAME.match(name):
        return [f"observation name {name!r} is not [a-z_][a-z0-9_]*"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"observation {name} is {type(value).__name__}, not a number"]
    if math.isnan(value):
        return [f"observation {name} is NaN"]
    return []
