"""Alert manager: the daemon feeds it every check result; it decides what to notify.

(Stub: the alerting work replaces this with the real engine behind the same interface.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.results import CheckInfo, CheckResult


class AlertManager:
    def __init__(
        self,
        config: AlertingConfig,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
        data_dir: Path,
        registry: CollectorRegistry,
    ) -> None:
        self.config = config

    async def start(self) -> None:
        """Load persisted state and start the delivery workers."""

    def observe(self, result: CheckResult) -> None:
        """Called for every finished run; must not block."""

    def reconfigure(
        self,
        config: AlertingConfig,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> None:
        """Apply a reloaded config; keeps state of checks that still exist."""
        self.config = config

    async def stop(self, grace: float = 5.0) -> None:
        """Flush what can be delivered within ``grace`` and persist the rest."""


async def send_test_notification(config: AlertingConfig, receiver: str) -> tuple[bool, str]:
    """Send one test notification to ``receiver``; returns (delivered, message)."""
    return False, "alerting is not implemented yet"
