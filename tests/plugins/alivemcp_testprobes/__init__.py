"""Test-only probe types, installed as a third-party plugin would be (a dist-info with an
``alivemcp.probes`` entry point, found on ``sys.path``). They let tests drive the engine:
fixed results, results read from a file, hangs, exceptions and garbage."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from alivemcp.probe import LabeledObservation, Probe, ProbeParams, ProbeResult, Status


class StaticParams(ProbeParams):
    status: Status = Status.UP
    reason: str = "ok"
    delay: float = Field(0.0, ge=0, description="Seconds to sleep before answering.")
    observations: dict[str, float] = Field(default_factory=dict)
    record_to: str | None = Field(None, description="Append each run's start time here.")
    secret_in_reason: str | None = None


class StaticProbe(Probe[StaticParams]):
    """Answers what its params say."""

    Params = StaticParams
    summary = "test: a fixed result"
    target_param = "reason"

    async def probe(self) -> ProbeResult:
        p = self.params
        if p.record_to:
            with open(p.record_to, "a") as f:  # noqa: ASYNC230 - tiny test file
                f.write(f"{time.time()}\n")
        if p.delay:
            await asyncio.sleep(p.delay)
        reason = p.reason if p.secret_in_reason is None else f"{p.reason} {p.secret_in_reason}"
        return ProbeResult(
            p.status,
            reason,
            observations=dict(p.observations),
            labeled_observations=[LabeledObservation("widgets", 2, {"kind": "a"})],
        )


class FileParams(ProbeParams):
    path: str = Field(description="First line: up|degraded|down|unknown; second: the reason.")


class FileProbe(Probe[FileParams]):
    """Answers what a file says, so a test can flip a check's state from outside the daemon."""

    Params = FileParams
    summary = "test: the status written in a file"

    async def probe(self) -> ProbeResult:
        lines = Path(self.params.path).read_text().splitlines() or ["unknown"]  # noqa: ASYNC240
        reason = lines[1] if len(lines) > 1 else f"file says {lines[0]}"
        return ProbeResult(Status(lines[0].strip()), reason, observations={"value": 1.0})


class HangParams(ProbeParams):
    ignore_cancel: bool = False


class HangProbe(Probe[HangParams]):
    """Never answers; optionally swallows cancellation too."""

    Params = HangParams

    async def probe(self) -> ProbeResult:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if not self.params.ignore_cancel:
                    raise
                await asyncio.sleep(5)  # a bad citizen: keeps running after cancellation
                raise


class RaiseParams(ProbeParams):
    message: str = "boom"
    in_setup: bool = False


class RaiseProbe(Probe[RaiseParams]):
    Params = RaiseParams

    async def setup(self) -> None:
        if self.params.in_setup:
            raise ConnectionError(f"setup {self.params.message}")

    async def probe(self) -> ProbeResult:
        raise RuntimeError(self.params.message)


class GarbageParams(ProbeParams):
    kind: Literal["none", "string", "bad_status", "nan", "bad_name", "text_value"] = "none"


class GarbageProbe(Probe[GarbageParams]):
    Params = GarbageParams

    async def probe(self) -> Any:
        kind = self.params.kind
        if kind == "none":
            return None
        if kind == "string":
            return "up"
        if kind == "bad_status":
            return ProbeResult("fine", "ok")  # type: ignore[arg-type]
        if kind == "nan":
            return ProbeResult(Status.UP, "ok", observations={"x": math.nan})
        if kind == "bad_name":
            return ProbeResult(Status.UP, "ok", observations={"Bad-Name": 1.0})
        return ProbeResult(Status.UP, "ok", observations={"x": "12"})  # type: ignore[dict-item]


class NoopProbe(Probe[ProbeParams]):
    """Returns up at once: the engine's own overhead, measured by the scheduler benchmark."""

    Params = ProbeParams

    async def probe(self) -> ProbeResult:
        return ProbeResult(Status.UP, "ok")


class SleepyParams(ProbeParams):
    seconds: float = Field(ge=0, description="How long each run sleeps before answering.")
    status: Status = Status.UP
    markers: str = Field(
        description="Directory for marker files: started, finished, "
        "cancelled, teardown (each holds the time it happened)."
    )


class SleepyProbe(Probe[SleepyParams]):
    """Sleeps, then answers its status, leaving a marker file at each step, so a test can see from
    outside the daemon whether a run finished or was cancelled, and whether teardown ran."""

    Params = SleepyParams

    def _mark(self, what: str) -> None:
        directory = Path(self.params.markers)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / what).write_text(f"{time.time()}\n")

    async def probe(self) -> ProbeResult:
        self._mark("started")
        try:
            await asyncio.sleep(self.params.seconds)
        except asyncio.CancelledError:
            self._mark("cancelled")
            raise
        self._mark("finished")
        return ProbeResult(self.params.status, f"slept {self.params.seconds:g}s")

    async def teardown(self) -> None:
        self._mark("teardown")
