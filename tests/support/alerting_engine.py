"""Drive the alert manager in-process: results fed directly, an injectable clock."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.alerting.manager import AlertManager
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.probe import Status


class FakeClock:
    """The policy's clock; delivery still runs in real (short) time."""

    def __init__(self, start: float | None = None) -> None:
        self.now = start if start is not None else time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def check(
    name: str,
    labels: Mapping[str, str] | None = None,
    depends_on: Iterable[str] = (),
    alert: dict[str, Any] | None = None,
    probe: str = "test_file",
) -> tuple[CheckInfo, AlertPolicyOverride | None]:
    info = CheckInfo(
        name=name, probe_type=probe, labels=dict(labels or {}), depends_on=tuple(depends_on)
    )
    return info, AlertPolicyOverride.model_validate(alert) if alert is not None else None


def result(
    info: CheckInfo,
    status: str,
    reason: str | None = None,
    observations: dict[str, float] | None = None,
) -> CheckResult:
    now = time.time()
    return CheckResult(
        check=info,
        status=Status(status),
        reason=reason or f"it is {status}",
        duration_seconds=0.01,
        started_at=now,
        finished_at=now,
        observations=observations or {},
    )


class Harness:
    def __init__(
        self,
        manager: AlertManager,
        checks: dict[str, CheckInfo],
        clock: FakeClock,
        registry: CollectorRegistry,
    ) -> None:
        self.manager = manager
        self.checks = checks
        self.clock = clock
        self.registry = registry

    def feed(self, name: str, *statuses: str, step: float = 1.0, **kw: Any) -> None:
        for status in statuses:
            self.clock.advance(step)
            self.manager.observe(result(self.checks[name], status, **kw))

    def tick(self, advance: float = 0.0) -> None:
        self.clock.advance(advance)
        self.manager.tick()

    async def delivered(self, timeout: float = 20.0) -> None:
        assert await self.manager.wait_delivered(timeout), self.manager.queue_depths()

    def metrics(self) -> str:
        return generate_latest(self.registry).decode()


@contextlib.asynccontextmanager
async def running(
    config: dict[str, Any],
    checks: list[tuple[CheckInfo, AlertPolicyOverride | None]],
    data_dir: Path,
    clock: FakeClock | None = None,
) -> AsyncIterator[Harness]:
    clock = clock or FakeClock()
    registry = CollectorRegistry()
    manager = AlertManager(
        AlertingConfig.model_validate(config),
        checks,
        data_dir,
        registry,
        clock=clock,
        tick_interval=3600,
    )
    await manager.start()
    try:
        yield Harness(manager, {info.name: info for info, _ in checks}, clock, registry)
    finally:
        await manager.stop(grace=2.0)


def fast(**policy: Any) -> dict[str, Any]:
    """A top-level alerting section skeleton: no group wait unless asked."""
    return {"group_wait": 0, "group_interval": 0, "policy": policy}
