"""Runs one probe instance safely: setup on demand, timeout, exceptions and garbage handled.

This is the single code path every run takes (the scheduler, ``alivemcp check`` and the tests),
so what a probe does wrong is contained here: a timeout becomes ``down``, an exception or a
malformed result becomes ``unknown``, and no secret survives into the recorded result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.hygiene.redact import redact_text
from alivemcp.hygiene.untrusted import clean_details, clean_label, clean_text
from alivemcp.probe import (
    CheckContext,
    LabeledObservation,
    Observable,
    Probe,
    ProbeResult,
    Status,
)
from alivemcp.surface import Surface

__all__ = ["ProbeHandle", "ProbeRun", "abandoned_probes"]

log = structlog.get_logger("alivemcp.engine.runner")

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
        """Run the probe once under the check's timeout and return the recorded result.

        Cancelled (a shutdown past its grace), the probe is cancelled and gets
        :data:`CANCEL_GRACE_SECONDS` to unwind (close sockets, note its canary) before the
        cancellation goes on; no result is recorded."""
        finished: asyncio.Future[CheckResult | None] = asyncio.get_running_loop().create_future()

        def deliver(result: CheckResult | None) -> None:
            if not finished.done():
                finished.set_result(result)

        run = self.start(planned_at, deliver)
        try:
            result = await finished
        except asyncio.CancelledError:
            run.cancel()
            await asyncio.wait({run.task}, timeout=CANCEL_GRACE_SECONDS)
            raise
        assert result is not None  # only cancel() delivers None
        return result

    def start(
        self, planned_at: float | None, deliver: Callable[[CheckResult | None], None]
    ) -> ProbeRun:
        """Start one run; ``deliver`` gets its result once, from a loop callback (``None`` if
        the run was cancelled with :meth:`ProbeRun.cancel`). The scheduler's path: one task and
        one timer per run, no coroutine of the engine's own around the probe."""
        return ProbeRun(self, planned_at, deliver)

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

    @property
    def needs_teardown(self) -> bool:
        """Whether :meth:`teardown` has anything to do: the probe's setup ran, and its type has
        a teardown of its own (the contract's default does nothing; a reload replacing
        100,000 MCP checks would otherwise start as many tasks and timers for nothing)."""
        return self._setup_done and type(self.probe).teardown is not Probe.teardown

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


# The states of a ProbeRun.
_PROBING, _TIMED_OUT, _CANCELLED, _DELIVERED = range(4)


class ProbeRun:
    """One run in progress: the probe's task, its timeout timer, and where the result goes.

    Driven by callbacks (the task's done callback and timers), so a run costs one task, one
    timer and a result: at 100,000 checks the engine's own share of a run is what matters.

    * The probe finishes in time: its result (or ``unknown`` for an exception or garbage).
    * The timeout fires: the probe is cancelled and gets :data:`CANCEL_GRACE_SECONDS` to unwind
      (close sockets); the result is ``down`` ("timeout after ..."), delivered once the probe
      has unwound, or at the end of that grace with the probe left behind (it ignored the
      cancellation; :func:`abandoned_probes` counts it) rather than allowed to hold the check.
    * :meth:`cancel`: the same unwinding, and ``None`` is delivered instead of a result.
    """

    __slots__ = (
        "_deliver",
        "_handle",
        "_lateness",
        "_started",
        "_started_wall",
        "_state",
        "_timer",
        "task",
    )

    def __init__(
        self,
        handle: ProbeHandle,
        planned_at: float | None,
        deliver: Callable[[CheckResult | None], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        self._handle = handle
        self._deliver = deliver
        self._state = _PROBING
        self._started_wall = started_wall = time.time()
        self._lateness = max(0.0, started_wall - planned_at) if planned_at is not None else 0.0
        self._started = time.perf_counter()
        self.task: asyncio.Task[Any] = loop.create_task(handle._setup_and_probe())
        self.task.add_done_callback(self._task_done)
        self._timer = loop.call_at(loop.time() + handle.context.timeout, self._timed_out)

    def cancel(self) -> None:
        """Give the run up: the probe is cancelled and unwinds; ``None`` is delivered."""
        if self._state in (_PROBING, _TIMED_OUT):
            self._state = _CANCELLED
            self._timer.cancel()
            self.task.cancel()
            self._timer = asyncio.get_running_loop().call_later(
                CANCEL_GRACE_SECONDS, self._left_behind
            )

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        state = self._state
        if state == _PROBING:
            self._timer.cancel()
            self._finish(self._outcome(task))
            return
        _consume(task)
        if state == _TIMED_OUT:
            self._timer.cancel()
            self._finish(self._timeout_result())
        elif state == _CANCELLED:
            self._timer.cancel()
            self._state = _DELIVERED
            self._deliver(None)

    def _timed_out(self) -> None:
        self._state = _TIMED_OUT
        self.task.cancel()
        # Give the probe a moment to unwind (close sockets) before the result is recorded.
        self._timer = asyncio.get_running_loop().call_later(CANCEL_GRACE_SECONDS, self._left_behind)

    def _left_behind(self) -> None:
        """The probe ignored its cancellation for the whole grace: left behind (kept
        referenced, so it is not garbage-collected mid-run), the check moves on."""
        task = self.task
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
        if self._state == _TIMED_OUT:
            log.warning("probe ignored cancellation", check=self._handle.info.name)
            self._finish(self._timeout_result())
        else:
            self._state = _DELIVERED
            self._deliver(None)

    def _timeout_result(self) -> ProbeResult:
        timeout = self._handle.context.timeout
        return ProbeResult(Status.DOWN, f"timeout after {_fmt_seconds(timeout)}")

    def _outcome(self, task: asyncio.Task[Any]) -> ProbeResult:
        exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if exc is not None:
            info = self._handle.info
            log.warning(
                "probe raised",
                check=info.name,
                probe=info.probe_type,
                error=f"{type(exc).__name__}: {exc}",
            )
            return ProbeResult(Status.UNKNOWN, f"probe error: {type(exc).__name__}: {exc}")
        return _validated(task.result(), type(self._handle.probe).observables)

    def _finish(self, result: ProbeResult) -> None:
        self._state = _DELIVERED
        duration = time.perf_counter() - self._started
        started_wall = self._started_wall
        # The boundary: whatever the target sent and the probe passed on is made safe here,
        # once, for every consumer (metrics, API, logs, alerts, state files).
        self._deliver(
            CheckResult(
                check=self._handle.info,
                status=result.status,
                reason=clean_text(redact_text(result.reason)),
                duration_seconds=duration,
                started_at=started_wall,
                finished_at=started_wall + duration,
                observations=result.observations,
                labeled_observations=_clean_labeled(result.labeled_observations),
                details=clean_details(result.details, redacted=True) if result.details else None,
                lateness_seconds=self._lateness,
                surface=result.surface,
            )
        )


def _clean_labeled(items: Sequence[LabeledObservation]) -> Sequence[LabeledObservation]:
    if not items:
        return items
    return [
        LabeledObservation(
            item.name,
            item.value,
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
    if declared is not None and _known_good(result, declared):
        return result
    problems = result.problems()
    if declared is not None and not problems:
        problems = _undeclared(result, {o.name: o for o in declared})
        if not problems:
            _remember_layout(result, declared)
    if problems:
        return ProbeResult(Status.UNKNOWN, "probe returned garbage: " + "; ".join(problems[:3]))
    return result


#: Observation layouts (the observations' names, each labeled observation's name and label
#: names) already found well-formed and declared, per declaration (a probe type's
#: ``observables``, kept referenced so its id stays its own). A probe reports the same few
#: layouts run after run: checking the names against the declaration and the name pattern
#: once per layout, not once per run, saved ~70,000 instructions of an MCP run (callgrind);
#: the values, which change every run, are still checked every run.
_layouts: dict[int, tuple[Sequence[Observable], set[tuple[object, ...]]]] = {}
_MAX_LAYOUTS = 64


def _layout(result: ProbeResult) -> tuple[object, ...] | None:
    """The names of ``result``'s observations, and of each labeled observation with its label
    names; None when a value or a container is not of the plain kinds the shortcut vouches
    for (then the full checks run)."""
    observations, labeled, details = (
        result.observations,
        result.labeled_observations,
        result.details,
    )
    if (
        type(observations) is not dict
        or type(labeled) not in (tuple, list)
        or (details is not None and type(details) is not dict)
        or type(result.status) is not Status
        or type(result.reason) is not str
        or (result.surface is not None and type(result.surface) is not Surface)
    ):
        return None
    for value in observations.values():
        if (type(value) is not float and type(value) is not int) or value != value:  # NaN
            return None
    names: list[tuple[object, ...]] = []
    for item in labeled:
        if type(item) is not LabeledObservation or type(item.labels) is not dict:
            return None
        value = item.value
        if (type(value) is not float and type(value) is not int) or value != value:
            return None
        labels = item.labels
        for text in labels.values():
            if type(text) is not str:
                return None
        names.append((item.name, *labels))
    return tuple(observations), tuple(names)


def _known_good(result: ProbeResult, declared: Sequence[Observable]) -> bool:
    entry = _layouts.get(id(declared))
    if entry is None or entry[0] is not declared:
        return False
    layout = _layout(result)
    return layout is not None and layout in entry[1]


def _remember_layout(result: ProbeResult, declared: Sequence[Observable]) -> None:
    """``result`` passed every check: its layout does not need the name checks again."""
    layout = _layout(result)
    if layout is None:
        return
    entry = _layouts.get(id(declared))
    if entry is None or entry[0] is not declared:
        entry = _layouts[id(declared)] = (declared, set())
    if len(entry[1]) < _MAX_LAYOUTS:
        entry[1].add(layout)


def _undeclared(result: ProbeResult, declared: Mapping[str, Observable]) -> list[str]:
    problems = []
    for name in result.observations:
        spec = declared.get(name)
        if spec is None or spec.labels:
            problems.append(
                f"observation {name!r} is not declared" + (" without labels" if spec else "")
            )
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
