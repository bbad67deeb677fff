"""Runs one probe instance safely: setup on demand, timeout, exceptions and garbage handled.

This is the single code path every run takes (the scheduler, ``alivemcp check`` and the tests),
so what a probe does wrong is contained here: a timeout becomes ``down``, an exception or a
malformed result becomes ``unknown``, and no secret survives into the recorded result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from alivemcp.probe import (
    CheckContext,
    LabeledObservation,
    Observable,
    Probe,
    ProbeResult,
    Status,
)
from alivemcp.redact import redact, redact_text
from alivemcp.results import CheckInfo, CheckResult
from alivemcp.untrusted import clean_details, clean_label, clean_text

__all__ = ["ProbeHandle", "abandoned_probes"]

log = structlog.get_logger("alivemcp.runner")

#: How long a cancelled probe may take to unwind before the run is recorded without it.
CANCEL_GRACE_SECONDS = 1.0

#: Tasks that ignored cancellation; kept referenced so they are not garbage-collected mid-run.
_abandoned: set[asyncio.Task[Any]] = set()


def abandoned_probes() -> int:
    return len(_abandoned)


class ProbeHandle:
    """A probe instance plus the engine's bookkeeping for one check."""

    __slots__ = ("_setup_done", "context", "info", "probe")

    def __init__(self, info: CheckInfo, context: CheckContext, probe: Probe[Any]) -> None:
        self.info = info
        self.context = context
        self.probe = probe
        self._setup_done = False

    async def run(self, planned_at: float | None = None) -> CheckResult:
        """Run the probe once under the check's timeout and return the recorded result."""
        started_wall = time.time()
        lateness = max(0.0, started_wall - planned_at) if planned_at is not None else 0.0
        started = time.perf_counter()
        result = await self._run_guarded()
        duration = time.perf_counter() - started
        # The boundary: whatever the target sent and the probe passed on is made safe here,
        # once, for every consumer (metrics, API, logs, alerts, state files).
        return CheckResult(
            check=self.info,
            status=result.status,
            reason=clean_text(redact_text(result.reason)),
            duration_seconds=duration,
            started_at=started_wall,
            finished_at=started_wall + duration,
            observations=result.observations,
            labeled_observations=_clean_labeled(result.labeled_observations),
            details=redact(clean_details(result.details)) if result.details else None,
            lateness_seconds=lateness,
        )

    async def _run_guarded(self) -> ProbeResult:
        timeout = self.context.timeout
        task = asyncio.ensure_future(self._setup_and_probe())
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            # The run itself is cancelled (shutdown past its grace): let the probe unwind
            # (close sockets, note its canary) before teardown can start beside it.
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
            if task.done():
                _consume(task)
            raise
        if not done:
            task.cancel()
            # Give the probe a moment to unwind (close sockets); a probe that swallows
            # cancellation is left behind rather than allowed to stall this check's slot.
            finished, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
            if not finished:
                _abandoned.add(task)
                task.add_done_callback(_abandoned.discard)
                log.warning("probe ignored cancellation", check=self.info.name)
            else:
                _consume(task)
            return ProbeResult(Status.DOWN, f"timeout after {_fmt_seconds(timeout)}")
        exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if exc is not None:
            log.warning(
                "probe raised",
                check=self.info.name,
                probe=self.info.probe_type,
                error=f"{type(exc).__name__}: {exc}",
            )
            return ProbeResult(Status.UNKNOWN, f"probe error: {type(exc).__name__}: {exc}")
        result = task.result()
        return _validated(result, type(self.probe).observables)

    async def _setup_and_probe(self) -> Any:
        if not self._setup_done:
            try:
                await self.probe.setup()
            except Exception as exc:  # setup is retried on the next run
                return ProbeResult(
                    Status.UNKNOWN, f"probe setup failed: {type(exc).__name__}: {exc}"
                )
            self._setup_done = True
        return await self.probe.probe()

    async def teardown(self, timeout: float = 10.0) -> None:
        """Run the probe's teardown if its setup ran; never raises."""
        if not self._setup_done:
            return
        self._setup_done = False
        try:
            async with asyncio.timeout(timeout):
                await self.probe.teardown()
        except Exception as exc:
            log.warning(
                "probe teardown failed",
                check=self.info.name,
                error=f"{type(exc).__name__}: {exc}",
            )


def _clean_labeled(items: Sequence[LabeledObservation]) -> Sequence[LabeledObservation]:
    if not items:
        return items
    return [
        LabeledObservation(
            item.name, item.value,
            {k: clean_label(redact_text(v)) for k, v in item.labels.items()},
        )
        for item in items
    ]


def _validated(result: object, declared: Sequence[Observable] | None = None) -> ProbeResult:
    if not isinstance(result, ProbeResult):
        return ProbeResult(
            Status.UNKNOWN,
            f"probe returned garbage: {type(result).__name__} instead of ProbeResult",
        )
    problems = result.problems()
    if declared is not None and not problems:
        problems = _undeclared(result, {o.name: o for o in declared})
    if problems:
        return ProbeResult(Status.UNKNOWN, "probe returned garbage: " + "; ".join(problems[:3]))
    return result


def _undeclared(result: ProbeResult, declared: Mapping[str, Observable]) -> list[str]:
    problems = []
    for name in result.observations:
        spec = declared.get(name)
        if spec is None or spec.labels:
            problems.append(f"observation {name!r} is not declared"
                            + (" without labels" if spec else ""))
    for item in result.labeled_observations:
        spec = declared.get(item.name)
        if spec is None:
            problems.append(f"labeled observation {item.name!r} is not declared")
        elif not set(item.labels) <= set(spec.labels):
            extra = sorted(set(item.labels) - set(spec.labels))
            problems.append(f"labeled observation {item.name!r} has undeclared labels {extra}")
    return problems


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _fmt_seconds(value: float) -> str:
    return f"{value:g}s"
