"""Receivers: one module per destination behind :class:`~.base.Receiver`."""

from __future__ import annotations

import httpx

from alivemcp.alerting.config import (
    LogReceiverConfig,
    PagerDutyReceiverConfig,
    SlackReceiverConfig,
    WebhookReceiverConfig,
)
from alivemcp.alerting.receivers.base import Failure, Receiver, SendResult
from alivemcp.alerting.receivers.log import LogReceiver
from alivemcp.alerting.receivers.pagerduty import PagerDutyReceiver
from alivemcp.alerting.receivers.slack import SlackReceiver
from alivemcp.alerting.receivers.webhook import WebhookReceiver
from alivemcp.alerting.secrets import register_receiver_secrets

__all__ = ["Failure", "Receiver", "SendResult", "build_receiver"]

AnyReceiverConfig = (
    SlackReceiverConfig | PagerDutyReceiverConfig | WebhookReceiverConfig | LogReceiverConfig
)


def build_receiver(
    config: AnyReceiverConfig, client: httpx.AsyncClient, external_url: str | None
) -> Receiver:
    # Before the first request: an error body quoting part of a URL or token is redacted.
    register_receiver_secrets(config)
    if isinstance(config, SlackReceiverConfig):
        return SlackReceiver(config, client, external_url)
    if isinstance(config, PagerDutyReceiverConfig):
        return PagerDutyReceiver(config, client, external_url)
    if isinstance(config, LogReceiverConfig):
        return LogReceiver(config, client)
    return WebhookReceiver(config, client, external_url)
