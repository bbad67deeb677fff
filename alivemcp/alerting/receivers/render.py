"""Text shared by the receivers' message formats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from alivemcp.alerting.model import AlertKind, Event, Notification

__all__ = ["iso", "observation_lines", "runbook_url", "summary_counts", "truncate"]


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def runbook_url(labels: Mapping[str, str]) -> str | None:
    for key in ("runbook_url", "runbook"):
        value = labels.get(key)
        if value and value.startswith(("http://", "https://")):
            return value
    return None


def observation_lines(observations: Mapping[str, float], limit: int = 10) -> list[str]:
    items = sorted(observations.items())
    lines = [f"{name} = {value:g}" for name, value in items[:limit]]
    if len(items) > limit:
        lines.append(f"(+{len(items) - limit} more)")
    return lines


def summary_counts(batch: Sequence[Notification]) -> str:
    firing = sum(1 for n in batch if n.firing)
    resolved = sum(1 for n in batch if n.event is Event.RESOLVED)
    parts = []
    if firing:
        parts.append(f"{firing} firing")
    if resolved:
        parts.append(f"{resolved} resolved")
    return f"{len(batch)} alert notifications: " + ", ".join(parts or ["test"])


def emoji(n: Notification) -> str:
    if n.event is Event.TEST:
        return ":white_check_mark:"
    if n.event is Event.RESOLVED:
        return ":large_green_circle:"
    if n.kind is AlertKind.PROBE_BROKEN:
        return ":wrench:"
    if n.kind is AlertKind.FLAPPING:
        return ":repeat:"
    if n.kind is AlertKind.TOOL_SURFACE:
        return ":lock:"
    if n.kind is AlertKind.LOCATION_DISAGREES:
        return ":globe_with_meridians:"
    return ":red_circle:" if n.severity in ("critical", "error") else ":large_yellow_circle:"
