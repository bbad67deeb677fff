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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from alivemcp.durations import Duration, DurationOrZero
from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.outcome import OBSERVATION_NAME, LabeledObservation, ProbeResult, Status
from alivemcp.resultsview import NO_RESULTS, MemberResult, ResultsView
from alivemcp.surface import Surface, SurfaceMode, build_surface
from alivemcp.verdict import SEVERITY, Findings, status_for, worst

__all__ = [
    "OBSERVATION_NAME",
    "SEVERITY",
    "CheckContext",
    "Duration",
    "DurationOrZero",
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
    "Surface",
    "SurfaceMode",
    "build_surface",
    "status_for",
    "worst",
]


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
    #: The shared clients (an :class:`alivemcp.plumbing.Plumbing`; the contract cannot name
    #: the layer above it: ``alivemcp.plumbing.plumbing_of(context)`` gives it typed).
    plumbing: Any
    #: The latest results of the checks the params declared (``referenced_checks()``); see
    #: :mod:`alivemcp.resultsview`. Read-only: a probe never runs another check.
    results: ResultsView = NO_RESULTS
    #: The check was made by discovery (from a registry or service discovery), not written
    #: in the config: probes may default to gentler settings for it.
    discovered: bool = False


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
