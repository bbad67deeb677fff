"""One verdict vocabulary for every probe: severity order, error-kind mapping, findings.

- :data:`SEVERITY` and :func:`worst`: the single order ``up < unknown < degraded < down``.
  A finding that blames the target with evidence outranks a part the prober could not
  decide, so ``unknown`` wins only when nothing blames the target.
- :func:`status_for`: the default verdict for an :class:`~alivemcp.errors.ErrorKind`; a probe
  passes ``overrides`` only where its domain reads a kind differently (an Object Lambda probe
  reads ``permission`` as policy drift on the target, so ``down``).
- :class:`Findings`: collect what a run saw, then ``result()`` gives the
  :class:`~alivemcp.probe.ProbeResult` (worst status; the reason names the worst first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.outcome import LabeledObservation, ProbeResult, Status

__all__ = ["DEFAULT_STATUS", "SEVERITY", "Finding", "Findings", "status_for", "worst"]

#: Rank of each status, worst highest.
SEVERITY: Mapping[Status, int] = {
    Status.UP: 0,
    Status.UNKNOWN: 1,
    Status.DEGRADED: 2,
    Status.DOWN: 3,
}

#: The default verdict for each kind of error.
DEFAULT_STATUS: Mapping[ErrorKind, Status] = {
    # The prober's own identity or request is at fault: it cannot judge the target.
    ErrorKind.AUTH: Status.UNKNOWN,
    ErrorKind.PERMISSION: Status.UNKNOWN,
    ErrorKind.REJECTED: Status.UNKNOWN,
    ErrorKind.OTHER: Status.UNKNOWN,
    # Throttling that outlasted the plumbing's retries: the service is there and answering,
    # but will not serve at the rate needed; neither healthy nor gone.
    ErrorKind.THROTTLED: Status.DEGRADED,
    # The target is unreachable, missing or broken.
    ErrorKind.CONNECT: Status.DOWN,
    ErrorKind.DNS: Status.DOWN,
    ErrorKind.TLS: Status.DOWN,
    ErrorKind.TIMEOUT: Status.DOWN,
    ErrorKind.UNAVAILABLE: Status.DOWN,
    ErrorKind.PROTOCOL: Status.DOWN,
    ErrorKind.NOT_FOUND: Status.DOWN,
}

#: Findings named in a reason before the rest are counted as "+N more".
MAX_LISTED = 5


def worst(*statuses: Status) -> Status:
    """The most severe of ``statuses`` (``up`` when there are none)."""
    return max(statuses, key=SEVERITY.__getitem__, default=Status.UP)


def status_for(kind: ErrorKind, overrides: Mapping[ErrorKind, Status] | None = None) -> Status:
    """The verdict for an error of ``kind``: ``overrides`` first, then :data:`DEFAULT_STATUS`."""
    if overrides and kind in overrides:
        return overrides[kind]
    return DEFAULT_STATUS[kind]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a run saw that bears on the verdict."""

    status: Status
    reason: str


class Findings:
    """Collects a run's findings and observations and turns them into one ``ProbeResult``.

    ``add`` may be given ``up`` (a threshold check can pass its computed status straight
    through); such a finding never appears in the reason. ``details`` is a plain dict the
    probe fills for the status API.
    """

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.observations: dict[str, float] = {}
        self.labeled_observations: list[LabeledObservation] = []
        self.details: dict[str, Any] = {}

    def add(self, status: Status, reason: str) -> Status:
        """Record a finding; returns its status."""
        self.findings.append(Finding(status, reason))
        return status

    def add_error(
        self,
        err: ProbeError,
        overrides: Mapping[ErrorKind, Status] | None = None,
        *,
        reason: str | None = None,
    ) -> Status:
        """Record a plumbing error at :func:`status_for` its kind; returns that status.

        The reason is ``str(err)`` ("<operation> on <target>: <detail>") unless ``reason``
        gives the probe's own words, which are then followed by ``": <detail>"``.
        """
        status = status_for(err.kind, overrides)
        text = str(err) if reason is None else f"{reason}: {err.detail}"
        return self.add(status, text)

    def observe(self, name: str, value: float) -> None:
        """Report a number as gauge ``alivemcp_probe_<name>``."""
        self.observations[name] = value

    def labeled(self, name: str, value: float, **labels: str) -> None:
        """Report a number with extra labels (keep their values bounded)."""
        self.labeled_observations.append(LabeledObservation(name, value, labels))

    @property
    def status(self) -> Status:
        """The verdict so far."""
        return worst(*(f.status for f in self.findings))

    def __bool__(self) -> bool:
        """True when something other than ``up`` was found."""
        return self.status is not Status.UP

    def as_json(self) -> list[dict[str, str]]:
        """The findings that are not ``up``, worst first, for ``details``."""
        return [{"status": f.status.value, "text": f.reason} for f in self._ranked()]

    def result(self, ok_reason: str = "ok", *, max_listed: int = MAX_LISTED) -> ProbeResult:
        """The run's result: the worst status; the reason names the worst findings first
        (``"; "``-joined, at most ``max_listed`` and then ``"+N more"``), or ``ok_reason``
        when nothing but ``up`` was found."""
        ranked = self._ranked()
        if ranked:
            shown = [f.reason for f in ranked[:max_listed]]
            if len(ranked) > max_listed:
                shown.append(f"+{len(ranked) - max_listed} more")
            reason = "; ".join(shown)
        else:
            reason = ok_reason
        return ProbeResult(
            self.status,
            reason,
            observations=dict(self.observations),
            labeled_observations=tuple(self.labeled_observations),
            details=dict(self.details) or None,
        )

    def _ranked(self) -> list[Finding]:
        # sorted() is stable: findings of one status keep the order they were found in.
        bad = [f for f in self.findings if f.status is not Status.UP]
        return sorted(bad, key=lambda f: -SEVERITY[f.status])
