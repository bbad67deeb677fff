"""Generic webhook: alivemcp's JSON body or an Alertmanager (version 4) body, optionally
signed with HMAC-SHA256 so the receiver can tell our requests from forgeries."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

import httpx

from alivemcp.alerting.config import WebhookReceiverConfig
from alivemcp.alerting.model import Event, Notification
from alivemcp.alerting.receivers.base import (
    Failure,
    Receiver,
    SendResult,
    classify_response,
    post_json,
)
from alivemcp.alerting.receivers.render import iso, runbook_url

__all__ = ["WebhookReceiver", "alertmanager_body", "json_body", "signature"]


class WebhookReceiver(Receiver):
    type_name = "webhook"

    def __init__(
        self, config: WebhookReceiverConfig, client: httpx.AsyncClient, external_url: str | None
    ) -> None:
        super().__init__(config.name, client, config.timeout)
        self._config = config
        self._external_url = external_url

    async def send(self, batch: Sequence[Notification]) -> SendResult:
        if self._config.format == "alertmanager":
            doc = alertmanager_body(self.name, batch, self._external_url)
        else:
            doc = json_body(self.name, batch)
        body = json.dumps(doc).encode()
        headers = {k: v.get_secret_value() for k, v in self._config.headers.items()}
        if self._config.hmac_secret is not None:
            headers[self._config.signature_header] = signature(
                self._config.hmac_secret.get_secret_value(), body
            )
        response = await post_json(
            self.client,
            self._config.url.get_secret_value(),
            body,
            self.timeout,
            headers,
            count=len(batch),
        )
        if isinstance(response, Failure):
            return SendResult(0, response)
        failure = classify_response(response, len(batch))
        if failure:
            return SendResult(0, failure)
        return SendResult(len(batch), grouped=len(batch) > 1)


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body>`` (the GitHub webhook convention)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def json_body(receiver: str, batch: Sequence[Notification]) -> dict[str, Any]:
    return {
        "version": "1",
        "receiver": receiver,
        "notifications": [
            {
                "id": n.id,
                "check": n.check,
                "probe": n.probe_type,
                "alert": n.kind.value,
                "event": n.event.value,
                "severity": n.severity,
                "status": n.status,
                "reason": n.reason,
                "since": iso(n.since),
                "at": iso(n.created_at),
                "dedup_key": n.dedup_key,
                "labels": n.labels,
                "observations": n.observations,
                **({"note": n.note} if n.note else {}),
                **({"summary": n.summary} if n.summary else {}),
                **({"details": n.details} if n.details else {}),
            }
            for n in batch
        ],
    }


def alertmanager_body(
    receiver: str, batch: Sequence[Notification], external_url: str | None
) -> dict[str, Any]:
    """The Alertmanager webhook body (version "4"), so existing consumers work unchanged."""
    alerts = [_am_alert(n, external_url) for n in batch]
    label_sets = [a["labels"] for a in alerts]
    common = (
        {k: v for k, v in label_sets[0].items() if all(s.get(k) == v for s in label_sets)}
        if label_sets
        else {}
    )
    return {
        "version": "4",
        "groupKey": f"{{}}:{{receiver={json.dumps(receiver)}}}",
        "truncatedAlerts": 0,
        "status": "firing" if any(n.firing for n in batch) else "resolved",
        "receiver": receiver,
        "groupLabels": {},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": external_url or "",
        "alerts": alerts,
    }


def _am_alert(n: Notification, external_url: str | None) -> dict[str, Any]:
    labels = {
        **n.labels,
        "alertname": {
            "target": "CheckFailing",
            "probe_broken": "ProbeBroken",
            "flapping": "CheckFlapping",
            "tool_surface_changed": "ToolSurfaceChanged",
            "location_disagrees": "LocationsDisagree",
        }[n.kind.value],
        "check": n.check,
        "probe": n.probe_type,
        "severity": n.severity,
    }
    description = f"{n.reason}\n{n.summary}" if n.summary else n.reason
    annotations = {"summary": n.title(), "description": description}
    runbook = runbook_url(n.labels)
    if runbook:
        annotations["runbook_url"] = runbook
    return {
        "status": "resolved" if n.event is Event.RESOLVED else "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": iso(n.since),
        "endsAt": iso(n.created_at) if n.event is Event.RESOLVED else "0001-01-01T00:00:00Z",
        "generatorURL": (external_url.rstrip("/") + "/status") if external_url else "",
        "fingerprint": hashlib.sha256(n.dedup_key.encode()).hexdigest()[:16],
    }
