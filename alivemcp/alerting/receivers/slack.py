"""Slack incoming webhook: Block Kit messages; a batch becomes one grouped message.

Every text that can come from a target (reasons, a tool surface's summary, check names made
from a registry, notes) goes through :func:`~alivemcp.hygiene.untrusted.slack_escape`: no
mention, channel ping, link or formatting in a message comes from anyone but us."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from alivemcp.alerting.config import SlackReceiverConfig
from alivemcp.alerting.model import Notification
from alivemcp.alerting.receivers.base import (
    Failure,
    Receiver,
    SendResult,
    classify_response,
    post_json,
)
from alivemcp.alerting.receivers.render import (
    emoji,
    iso,
    observation_lines,
    runbook_url,
    summary_counts,
    truncate,
)
from alivemcp.hygiene.untrusted import slack_escape

__all__ = ["SlackReceiver", "slack_message"]

#: Slack allows 50 blocks; a grouped message lists this many and counts the rest.
_GROUP_LINES = 20
_SECTION_LIMIT = 3000
# Slack answers these for a revoked/archived/forbidden webhook: retrying cannot help.
_PERMANENT = frozenset({400, 403, 404, 410})


class SlackReceiver(Receiver):
    type_name = "slack"

    def __init__(
        self, config: SlackReceiverConfig, client: httpx.AsyncClient, external_url: str | None
    ) -> None:
        super().__init__(config.name, client, config.timeout)
        self._url = config.webhook_url
        self._external_url = external_url

    async def send(self, batch: Sequence[Notification]) -> SendResult:
        body = json.dumps(slack_message(batch, self._external_url)).encode()
        response = await post_json(
            self.client, self._url.get_secret_value(), body, self.timeout, count=len(batch)
        )
        if isinstance(response, Failure):
            return SendResult(0, response)
        failure = classify_response(response, len(batch), _PERMANENT)
        if failure:
            return SendResult(0, failure)
        return SendResult(len(batch), grouped=len(batch) > 1)


def slack_message(batch: Sequence[Notification], external_url: str | None) -> dict[str, Any]:
    if len(batch) == 1:
        return _single(batch[0], external_url)
    return _grouped(batch, external_url)


def _single(n: Notification, external_url: str | None) -> dict[str, Any]:
    title = f"{emoji(n)} {n.title()}"
    blocks: list[dict[str, Any]] = [
        _section(f"*{_safe(title)}*\n{_safe(truncate(n.reason, 1500))}"),
        {
            "type": "section",
            "fields": [
                _mrkdwn(f"*Check*\n`{_safe(truncate(n.check, 200))}`"),
                _mrkdwn(f"*Probe*\n{n.probe_type}"),
                _mrkdwn(f"*Status*\n{n.status}"),
                _mrkdwn(f"*Since*\n{iso(n.since)}"),
            ],
        },
    ]
    if n.summary:
        blocks.append(_section("*What changed*\n" + _safe(truncate(n.summary, 2500))))
    obs = observation_lines(n.observations)
    if obs:
        blocks.append(_section("*Observations*\n```" + "\n".join(obs) + "```"))
    links = []
    runbook = runbook_url(n.labels)
    if runbook:
        links.append(f"<{runbook}|Runbook>")
    if external_url:
        links.append(f"<{external_url.rstrip('/')}/status|Status page>")
    if n.note:
        links.append(_safe(truncate(n.note, 300)))
    if links:
        blocks.append({"type": "context", "elements": [_mrkdwn(" · ".join(links))]})
    return {"text": _safe(f"{n.title()}: {truncate(n.reason, 300)}"), "blocks": blocks}


def _grouped(batch: Sequence[Notification], external_url: str | None) -> dict[str, Any]:
    summary = summary_counts(batch)
    lines = [
        f"{emoji(n)} *{_safe(truncate(n.check, 120))}* "
        f"{_safe(n.title().split(': ', 1)[-1])} [{n.severity}] — {_safe(truncate(n.reason, 150))}"
        for n in batch[:_GROUP_LINES]
    ]
    blocks: list[dict[str, Any]] = [_section(f"*{summary}*")]
    # Several lines per section keeps the block count low; each section stays under Slack's
    # 3,000-character limit.
    chunk: list[str] = []
    for line in lines:
        if sum(len(x) + 1 for x in chunk) + len(line) > _SECTION_LIMIT - 100:
            blocks.append(_section("\n".join(chunk)))
            chunk = []
        chunk.append(line)
    if chunk:
        blocks.append(_section("\n".join(chunk)))
    more = len(batch) - _GROUP_LINES
    footer = [f"…and {more} more"] if more > 0 else []
    if external_url:
        footer.append(f"<{external_url.rstrip('/')}/status|Status page>")
    if footer:
        blocks.append({"type": "context", "elements": [_mrkdwn(" · ".join(footer))]})
    return {"text": summary, "blocks": blocks}


def _safe(text: str) -> str:
    return slack_escape(text)


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(truncate(text, _SECTION_LIMIT))}


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}
