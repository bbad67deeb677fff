"""The probe contract: the one interface every probe type implements.

A probe type is a subclass of :class:`Probe` that declares a pydantic ``Params`` model and an
async :meth:`Probe.probe` returning a :class:`ProbeResult`. The engine creates one instance per
check, calls :meth:`Probe.setup` once before the first run, :meth:`Probe.probe` on every run
(under the check's timeout) and :meth:`Probe.teardown` when the check is removed or the daemon
stops. Probe types are found through the ``alivemcp.probes`` entry-point group.

Everything else (timing, timeouts, exception handling, metrics, status, alerting) is the
engine's job: a probe only observes its target and says what it saw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from alivemcp.durations import Duration
from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.resultsview import NO_RESULTS, MemberResult, ResultsView

if TYPE_CHECKING:
    from alivemcp.plumbing import Plumbing
    from alivemcp.verdict import SEVERITY, Findings, status_for, worst

__all__ = [
    "SEVERITY",
    "CheckContext",
    "Duration",
    "ErrorKind",
    "Findings",
    "LabeledObservation",
    "MemberResult",
    "Observable",
    "Probe",
    "ProbeError",
    "ProbeParams",
    "ProbeResult",
    "ResultsView",
    "Status",
    "status_for",
    "worst",
]

#: Names this contract re-exports from :mod:`alivemcp.verdict`, which itself builds on the
#: classes below; they are loaded on first access (PEP 562) so neither import order cycles.
_VERDICT_EXPORTS = frozenset({"SEVERITY", "Findings", "status_for", "worst"})


def __getattr__(name: str) -> Any:
    if name in _VERDICT_EXPORTS:
        from alivemcp import verdict

        return getattr(verdict, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    """

    status: Status
    reason: str
    observations: Mapping[str, float] = field(default_factory=dict)
    labeled_observations: Sequence[LabeledObservation] = ()
    details: Mapping[str, Any] | None = None

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
        return found


def _observation_problems(name: object, value: object) -> list[str]:
    if not isinstance(name, str) or not OBSERVATION_NAME.match(name):
        return [f"observation name {name!r} is not [a-z_][a-z0-9_]*"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"observation {name} is {type(value).__name__}, not a number"]
    if math.isnan(value):
        return [f"observation {name} is NaN"]
    return []


@dataclass(frozen=True, slots=True)
class Observable:
    """The declaration of one observation a probe reports: a gauge ``alivemcp_probe_<name>``.

    Follow Prometheus naming: the base unit as the suffix (``_seconds``, ``_bytes``,
    ``_ratio``; plain counts of things need none, e.g. ``partitions``), never ``_total`` or
    ``_count`` (they belong to counters and histograms), ``_info`` for a constant 1 whose
    labels carry the information.
    """

    name: str
    help: str
    labels: tuple[str, ...] = ()


class ProbeParams(BaseModel):
    """Base for every probe type's params model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a probe instance knows about the check it serves and the engine around it."""

    name: str
    probe_type: str
    interval: float
    timeout: float
    labels: Mapping[str, str]
    plumbing: Plumbing
    #: The latest results of the checks the params declared (``referenced_checks()``); see
    #: :mod:`alivemcp.resultsview`. Read-only: a probe never runs another check.
    results: ResultsView = NO_RESULTS


ParamsT = TypeVar("ParamsT", bound=ProbeParams)


class Probe(Generic[ParamsT]):
    """Base class of every probe type.

    Subclasses set ``Params`` (a :class:`ProbeParams` subclass) and implement :meth:`probe`.
    Instance attributes may carry state between runs of the same check (e.g. a window of
    consumer offsets): the engine never runs two probes of one check at once.
    """

    #: The params model, validated from the check's ``params:`` mapping.
    Params: ClassVar[type[ProbeParams]] = ProbeParams
    #: One line for ``alivemcp probes``.
    summary: ClassVar[str] = ""
    #: When a check has ``targets:``, a plain-string target fills this param.
    target_param: ClassVar[str | None] = None
    #: Upper bound on runs of this type in flight at once (None: only the global limit).
    max_concurrency: ClassVar[int | None] = None
    #: Timeout when neither the check nor the config's defaults set one (a canary that waits
    #: for a 45 s SLA needs more than the engine's generic default).
    default_timeout: ClassVar[float | None] = None
    #: Every observation the probe may report (name, help, labels). The metrics' help text,
    #: the reference and the dashboards read it; config validation refuses a user label that
    #: a declared observation carries (the series would have it twice and Prometheus would
    #: reject the whole scrape); and the engine holds the probe to it: an observation outside
    #: the declaration is reported as garbage. None: undeclared (a third-party probe written
    #: before this existed); colliding labels are then dropped when rendered.
    observables: ClassVar[Sequence[Observable] | None] = None

    def __init__(self, context: CheckContext, params: ParamsT) -> None:
        self.context = context
        self.params = params

    async def setup(self) -> None:
        """Create long-lived clients. Called once before the first run; may be retried."""

    async def probe(self) -> ProbeResult:
        """Run one probe and say what it saw. Raise only for bugs: the engine reports
        an exception as ``unknown``, and cancels the call when the timeout passes."""
        raise NotImplementedError

    async def teardown(self) -> None:
        """Release clients and clean up canaries. Called on removal and on shutdown."""
