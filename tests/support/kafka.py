"""Helpers shared by the Kafka tests (import as ``tests.support.kafka``).

General helpers (``run_check``, ``run_until``, ``free_port``...) live in ``tests.support``;
the real brokers are fixtures in ``tests/kafka/conftest.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.results import CheckResult
from alivemcp.engine.runner import ProbeHandle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.kafka import KafkaCluster

#: Canary latency thresholds a busy 2-core machine always meets: latency is not under test.
RELAXED = {"produce_latency_threshold": 30, "roundtrip_latency_threshold": 30}


def unique(prefix: str) -> str:
    """A topic or group name no other test (or earlier run on a shared broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def conn(kafka: KafkaCluster, **extra: Any) -> dict[str, Any]:
    """The ``cluster:`` params of a check on the test broker(s)."""
    return {"bootstrap_servers": kafka.bootstrap, **extra}


class Check:
    """One check instance run repeatedly, as the daemon runs it: probe state (windows, the
    canary's reader) and the plumbing's clients are kept between runs."""

    def __init__(
        self,
        probe: str,
        params: dict[str, Any],
        *,
        timeout: float = 30.0,
        labels: dict[str, str] | None = None,
        plumbing: Plumbing | None = None,
    ) -> None:
        doc = {
            "checks": [
                {
                    "name": probe,
                    "probe": probe,
                    "interval": max(60.0, timeout),
                    "timeout": timeout,
                    "labels": labels or {},
                    "params": params,
                }
            ]
        }
        loaded = load_config_text(yaml.safe_dump(doc), env={})
        self.timeout = timeout
        self._own_plumbing = plumbing is None
        self.plumbing = plumbing or Plumbing()
        self.handle: ProbeHandle = build_handle(loaded.checks[0], self.plumbing)

    async def run(self) -> CheckResult:
        return await self.handle.run()

    async def close(self) -> None:
        await self.handle.teardown()
        if self._own_plumbing:
            await self.plumbing.aclose()
