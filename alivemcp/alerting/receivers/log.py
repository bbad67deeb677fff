"""The ``log`` receiver: notifications as structured log lines (event ``alert``)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import structlog

from alivemcp.alerting.config import LogReceiverConfig
from alivemcp.alerting.model import Event, Notification
from alivemcp.alerting.receivers.base import Receiver, SendResult
from alivemcp.alerting.receivers.render import iso

__all__ = ["LogReceiver"]

log = structlog.get_logger("alivemcp.alerts")


class LogReceiver(Receiver):
    type_name = "log"
    repeats_are_harmless = True  # a log line written twice misleads no one

    def __init__(self, config: LogReceiverConfig, client: httpx.AsyncClient) -> None:
        super().__init__(config.name, client, config.timeout)

    async def send(self, batch: Sequence[Notification]) -> SendResult:
        for n in batch:
            emit = log.info if n.event in (Event.RESOLVED, Event.TEST) else log.warning
            emit(
                "alert",
                title=n.title(),
                receiver=self.name,
                check=n.check,
                alert=n.kind.value,
                notification_event=n.event.value,
                severity=n.severity,
                reason=n.reason,
                since=iso(n.since),
                dedup_key=n.dedup_key,
            )
        return SendResult(len(batch))
