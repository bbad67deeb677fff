"""How one ``mcp_endpoint`` run becomes its result, in three steps: :func:`observe` gathers
what was measured, :func:`decide` makes the verdict (the handshake's own, then what latency and
the certificate add to it), :func:`build_details` writes what the status API shows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from alivemcp.plumbing.http import ConnectionTimings
from alivemcp.probe import Findings, LabeledObservation, ProbeResult, Status
from probes.mcp._model import HandshakeFacts

__all__ = ["Observed", "Verdict", "build_details", "decide", "observe"]

_LABEL_MAX = 64
#: Tool names listed in the details at most (a server may list hundreds).
_MAX_LISTED_TOOLS = 200


@dataclass(frozen=True, slots=True)
class Observed:
    """What one run measured."""

    values: dict[str, float]
    labeled: list[LabeledObservation]
    #: Days until the server certificate expires (negative: expired; None: not known).
    cert_expiry_days: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The run's findings (their worst status is the verdict) and the reason of an ``up``."""

    findings: Findings
    ok_reason: str


def _server_facts(f: HandshakeFacts) -> dict[str, str | None]:
    """What the server says it is (the labels of ``mcp_server_info``)."""
    return {
        "transport": f.era.value if f.era else None,
        "protocol_version": f.protocol_version,
        "server_name": f.server_name,
        "server_version": f.server_version,
        "tools_hash": f.tools_hash(),
    }


def observe(f: HandshakeFacts, timings: ConnectionTimings, elapsed: float) -> Observed:
    """The run's observations: connection set-up, each phase, the tools and the server."""
    values: dict[str, float] = {"total_seconds": elapsed}
    connect = (timings.dns_seconds or 0.0) + (timings.connect_seconds or 0.0)
    setup = connect + (timings.tls_seconds or 0.0)
    if timings.connect_seconds is not None:
        values["connect_seconds"] = connect
    if timings.tls_seconds is not None:
        values["tls_seconds"] = timings.tls_seconds
    expiry_days: float | None = None
    if timings.cert_not_after is not None:
        expiry_seconds = timings.cert_not_after - time.time()
        expiry_days = expiry_seconds / 86400.0
        values["tls_cert_expiry_seconds"] = expiry_seconds
    if "initialize" in f.phases:
        # The first request also opened the connection: report the server's share.
        values["initialize_seconds"] = max(0.0, f.phases["initialize"] - setup)
    for phase in ("tools_list", "tools_call"):
        if phase in f.phases:
            values[f"{phase}_seconds"] = f.phases[phase]
    if f.tools is not None:
        values["tools"] = float(len(f.tools))
    labeled: list[LabeledObservation] = []
    if f.protocol_version is not None:
        labels = {k: (v or "")[:_LABEL_MAX] for k, v in _server_facts(f).items()}
        labeled.append(LabeledObservation("mcp_server_info", 1.0, labels))
    return Observed(values, labeled, expiry_days)


def decide(
    result: ProbeResult,
    f: HandshakeFacts,
    observed: Observed,
    *,
    elapsed: float,
    degraded_latency: float,
    tls_expiry_days: float,
    tools_changed_from: str | None,
) -> Verdict:
    """The handshake's verdict (``result``), then what latency and the certificate add to it:
    every problem is named (worst first) through the contract's findings builder.
    ``tools_changed_from``: the tools hash of an earlier run, when this run's differs."""
    findings = Findings()
    ok_reason = result.reason
    expiry_days = observed.cert_expiry_days
    expiring = expiry_days is not None and expiry_days < tls_expiry_days
    expiry = f"TLS certificate expires in {expiry_days:.1f} days" if expiring else ""
    if result.status is Status.UP and f.protocol_version is not None:
        ok_reason = _summary(f)
        if elapsed > degraded_latency:
            findings.add(
                Status.DEGRADED,
                f"slow: the handshake took {elapsed:.2f}s (degraded_latency {degraded_latency:g}s)",
            )
        if expiring:
            findings.add(Status.DEGRADED, expiry)
    else:
        findings.add(result.status, result.reason)
        if result.status is Status.DEGRADED and expiring:
            findings.add(Status.DEGRADED, expiry)
    if tools_changed_from is not None and findings.status is Status.UP:
        ok_reason += f" (tools changed: hash {tools_changed_from} -> {f.tools_hash()})"
    return Verdict(findings, ok_reason)


def build_details(
    result: ProbeResult,
    f: HandshakeFacts,
    status: Status,
    *,
    list_tools: bool,
    tools_changed_from: str | None,
) -> dict[str, Any]:
    """The run's details: the handshake's own, what the server is, and how the run went.
    ``list_tools``: name the tools (only on the first run and when they change: every string
    in details is redacted on every run, and a server may list hundreds of tools)."""
    details: dict[str, Any] = dict(result.details or {})
    details.update({k: v for k, v in _server_facts(f).items() if v is not None})
    if list_tools and f.tools is not None:
        details["tools"] = [str(t.get("name"))[:_LABEL_MAX] for t in f.tools[:_MAX_LISTED_TOOLS]]
        if tools_changed_from is not None:
            details["tools_changed_from"] = tools_changed_from
    if f.delete_status is not None:
        details["delete_status"] = f.delete_status
    if f.resumptions:
        details["sse_resumptions"] = f.resumptions
    if f.redirected_to is not None:
        details["redirected_to"] = f.redirected_to
    if f.notes:
        details["notes"] = f.notes
    if f.problems and status is not Status.DEGRADED:
        details["problems"] = f.problems
    return details


def _summary(f: HandshakeFacts) -> str:
    server = " ".join(x for x in (f.server_name, f.server_version) if x) or "unnamed server"
    era = f.era.value if f.era else "?"
    tools = f", {len(f.tools)} tools" if f.tools is not None else ""
    extra = f" ({'; '.join(f.notes)})" if f.notes else ""
    return f"MCP {f.protocol_version} over {era}: {server}{tools}{extra}"
