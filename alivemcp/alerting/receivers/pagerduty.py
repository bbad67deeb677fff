"""PagerDuty Events API v2: one event per notification, keyed by a stable dedup_key per check.

A storm (more than ``group_threshold`` new triggers waiting at once) pages once: one trigger
for the group, whose members resolve silently until the last one resolves the group. The
membership is persisted with the alert state, so this survives restarts.
Reminders are not sent: PagerDuty's own escalation policies re-notify.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from alivemcp.alerting.config import PagerDutyReceiverConfig
from alivemcp.alerting.model import Event, Notification
from alivemcp.alerting.receivers.base import (
    Failure,
    Receiver,
    SendResult,
    classify_response,
    post_json,
)
from alivemcp.alerting.receivers.render import iso, runbook_url, truncate

__all__ = ["PagerDutyReceiver"]

_SUMMARY_LIMIT = 1024
_SEVERITY_ORDER = ("info", "warning", "error", "critical")
_GROUP_DETAIL_LIMIT = 100
_MAX_KEY = 255  # PagerDuty's dedup_key limit


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_KEY


class PagerDutyReceiver(Receiver):
    type_name = "pagerduty"
    # A repeated trigger or resolve carries the same dedup_key: PagerDuty folds it into the
    # incident it already has.
    repeats_are_harmless = True

    def __init__(
        self,
        config: PagerDutyReceiverConfig,
        client: httpx.AsyncClient,
        external_url: str | None,
    ) -> None:
        super().__init__(config.name, client, config.timeout)
        self._config = config
        self._external_url = external_url

    # groups: {group_key: [member dedup keys]}, member_of: {member dedup key: group_key}
    @property
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = self.state.data.setdefault("groups", {})
        return groups

    @property
    def _member_of(self) -> dict[str, str]:
        member_of: dict[str, str] = self.state.data.setdefault("member_of", {})
        return member_of

    def restore_state(self, data: Any) -> None:
        """Saved groups must be well-typed and agree with ``member_of`` both ways: a member
        pointing at a group that does not list it would make its resolve fail forever."""
        if not isinstance(data, dict):
            raise ValueError("receiver state: not an object")
        groups = data.get("groups", {})
        member_of = data.get("member_of", {})
        if not isinstance(groups, dict) or not all(
            _is_key(key)
            and isinstance(members, list)
            and members
            and all(_is_key(m) for m in members)
            for key, members in groups.items()
        ):
            raise ValueError("groups: not a map of group keys to lists of dedup keys")
        if not isinstance(member_of, dict) or not all(
            _is_key(k) and _is_key(v) for k, v in member_of.items()
        ):
            raise ValueError("member_of: not a map of dedup keys to group keys")
        expected = {m: key for key, members in groups.items() for m in members}
        if expected != member_of or sum(len(m) for m in groups.values()) != len(expected):
            raise ValueError("groups and member_of disagree")
        self.state.data = {
            "groups": {k: list(v) for k, v in groups.items()},
            "member_of": dict(member_of),
        }

    async def send(self, batch: Sequence[Notification]) -> SendResult:
        """Skip what needs no request, then make at most one request and return: each event
        is acknowledged (and persisted) on its own, and the worker spaces the requests."""
        skipped = 0
        for index, n in enumerate(batch):
            grouped_into = self._member_of.get(n.dedup_key)
            after: Callable[[], None] | None = None
            if n.event is Event.REMINDER or (n.event is Event.FIRING and grouped_into):
                skipped += 1
                continue
            if n.event is Event.RESOLVED and grouped_into:
                keys = self._groups.get(grouped_into, [])
                if len(keys) > 1:
                    keys.remove(n.dedup_key)
                    del self._member_of[n.dedup_key]
                    skipped += 1
                    continue
                body = self._resolve_body(grouped_into)
                after = self._forget_group(grouped_into)
            elif n.event is Event.FIRING and self._storm(batch, index):
                members = [
                    m
                    for m in batch[index:]
                    if m.event is Event.FIRING and m.dedup_key not in self._member_of
                ]
                group_key = f"alivemcp/group/{n.id}"
                body = self._group_trigger_body(group_key, members)
                after = self._remember_group(group_key, members)
            elif n.event is Event.RESOLVED:
                body = self._resolve_body(n.dedup_key)
            else:
                body = self._trigger_body(n)
            failure = await self._post(body)
            if failure is not None:
                return SendResult(index, failure, skipped=skipped)
            if after is not None:
                after()
            if n.event is Event.TEST:
                # Close the test incident right away: a test should not leave anyone paged.
                await self._post(self._resolve_body(n.dedup_key))
            return SendResult(
                index + 1,
                skipped=skipped,
                grouped=body["dedup_key"] != n.dedup_key and body["event_action"] == "trigger",
            )
        return SendResult(len(batch), skipped=skipped)

    def _storm(self, batch: Sequence[Notification], start: int) -> bool:
        new_triggers = sum(
            1
            for n in batch[start:]
            if n.event is Event.FIRING and n.dedup_key not in self._member_of
        )
        return new_triggers > self._config.group_threshold

    def _remember_group(self, group_key: str, members: list[Notification]) -> Callable[[], None]:
        def record() -> None:
            self._groups[group_key] = [m.dedup_key for m in members]
            for m in members:
                self._member_of[m.dedup_key] = group_key

        return record

    def _forget_group(self, group_key: str) -> Callable[[], None]:
        def forget() -> None:
            for key in self._groups.pop(group_key, []):
                self._member_of.pop(key, None)

        return forget

    async def _post(self, body: dict[str, Any]) -> Failure | None:
        response = await post_json(
            self.client, self._config.url, json.dumps(body).encode(), self.timeout, count=1
        )
        if isinstance(response, Failure):
            return response
        # 400 is an event PagerDuty will never accept; 401/403/404 a key or URL that is wrong.
        return classify_response(response, 1)

    def _trigger_body(self, n: Notification) -> dict[str, Any]:
        details: dict[str, Any] = {
            "reason": n.reason,
            "status": n.status,
            "probe": n.probe_type,
            "since": iso(n.since),
            "alert": n.kind.value,
            "labels": n.labels,
            "observations": n.observations,
        }
        if n.note:
            details["note"] = n.note
        if n.summary:
            details["summary"] = n.summary
        if n.details:
            details["details"] = n.details
        body = self._envelope("trigger", n.dedup_key)
        body["payload"] = {
            "summary": truncate(f"{n.title()} - {n.reason}", _SUMMARY_LIMIT),
            "source": self._config.source,
            "severity": n.severity if n.severity in _SEVERITY_ORDER else "error",
            "timestamp": iso(n.created_at),
            "component": n.check,
            "group": n.probe_type,
            "class": n.kind.value,
            "custom_details": details,
        }
        links = []
        runbook = runbook_url(n.labels)
        if runbook:
            links.append({"href": runbook, "text": "Runbook"})
        if self._external_url:
            links.append({"href": self._external_url.rstrip("/") + "/status", "text": "Status"})
        if links:
            body["links"] = links
        return body

    def _group_trigger_body(self, group_key: str, members: list[Notification]) -> dict[str, Any]:
        names = ", ".join(m.check for m in members[:20])
        more = f" (+{len(members) - 20} more)" if len(members) > 20 else ""
        severity = max(
            (m.severity for m in members if m.severity in _SEVERITY_ORDER),
            key=_SEVERITY_ORDER.index,
            default="error",
        )
        body = self._envelope("trigger", group_key)
        body["payload"] = {
            "summary": truncate(f"{len(members)} checks firing: {names}{more}", _SUMMARY_LIMIT),
            "source": self._config.source,
            "severity": severity,
            "timestamp": iso(members[0].created_at),
            "class": "group",
            "custom_details": {
                "checks": [
                    {
                        "check": m.check,
                        "severity": m.severity,
                        "status": m.status,
                        "reason": truncate(m.reason, 300),
                    }
                    for m in members[:_GROUP_DETAIL_LIMIT]
                ],
                "total": len(members),
            },
        }
        return body

    def _resolve_body(self, key: str) -> dict[str, Any]:
        return self._envelope("resolve", key)

    def _envelope(self, action: str, key: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "routing_key": self._config.routing_key.get_secret_value(),
            "event_action": action,
            "dedup_key": key,
            "client": "alivemcp",
        }
        if self._external_url:
            body["client_url"] = self._external_url
        return body
