"""Render the Grafana dashboard deploy/grafana/alivemcp-dashboard.json.

    python scripts/gen_dashboard.py            # rewrite the dashboard
    python scripts/gen_dashboard.py --check    # exit 1 if it is out of date

Panels are described here once (title, queries) and laid out on Grafana's 24-column grid.
Probe observations (``alivemcp_probe_<name>``) are looked up in the probe types' ``observables``
declarations: rendering fails when a panel queries one that no built-in probe declares, a
panel's unit defaults to the unit its observations' names carry (``_seconds``, ``_bytes``), and
a panel without its own description shows their declared help. Every query uses only metrics
alivemcp exports (tests/ship/test_dashboard.py checks the names against a real daemon's /metrics
and evaluates every query in a real Prometheus).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import generated_file
from probe_observables import declared_observables, unit_of

from alivemcp.web.metrics import OBSERVATION_PREFIX

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "deploy" / "grafana" / "alivemcp-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
# Selectors every per-check query carries, so the dashboard variables narrow every panel.
SEL = 'probe=~"$probe", check=~"$check"'

STATE_COLOURS = {"up": "green", "degraded": "yellow", "down": "red", "unknown": "purple"}


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    title: str
    kind: str  # stat | timeseries | table | bargauge | row
    queries: list[Query] = field(default_factory=list)
    #: Grafana unit; None: the one the panel's observations share (see _unit), else "short".
    unit: str | None = None
    width: int = 12
    height: int = 8
    description: str = ""
    colour: str | None = None
    thresholds: list[tuple[float | None, str]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def row(title: str) -> Panel:
    return Panel(title, "row", width=24, height=1)


def stat(
    title: str,
    expr: str,
    colour: str,
    description: str = "",
    unit: str = "short",
    thresholds: list[tuple[float | None, str]] | None = None,
) -> Panel:
    return Panel(
        title,
        "stat",
        [Query(expr, instant=True)],
        unit,
        width=4,
        height=4,
        description=description,
        colour=colour,
        thresholds=thresholds,
    )


PANELS: list[Panel] = [
    row("Overview"),
    stat(
        "Up",
        f'sum(alivemcp_check_status{{status="up", {SEL}}})',
        "green",
        "Checks whose last run was up.",
    ),
    stat(
        "Degraded",
        f'sum(alivemcp_check_status{{status="degraded", {SEL}}})',
        "yellow",
        "Working, but slow or partly broken (latency over threshold, a required tool "
        "missing, RTC SLA exceeded, ...).",
    ),
    stat(
        "Down",
        f'sum(alivemcp_check_status{{status="down", {SEL}}})',
        "red",
        "The target failed the probe.",
    ),
    stat(
        "Unknown (probe broken)",
        f'sum(alivemcp_check_status{{status="unknown", {SEL}}})',
        "purple",
        "The prober could not decide: its own credentials, permissions or config. "
        "Never a statement about the target.",
    ),
    stat(
        "Critical alerts firing",
        'sum(alivemcp_alerts_firing{severity="critical"})',
        "red",
        "Alerts alivemcp's own alerting has open (after failures_to_fire, dependencies and "
        "maintenance windows).",
    ),
    stat("Checks configured", "sum(alivemcp_checks_configured)", "blue"),
    Panel(
        "Checks not up",
        "table",
        [
            Query(f'alivemcp_check_status{{status!="up", {SEL}}} == 1', instant=True, table=True),
            Query(
                f"time() - alivemcp_check_status_since_timestamp_seconds{{{SEL}}}",
                instant=True,
                table=True,
            ),
        ],
        width=24,
        height=9,
        description="Every check whose last run was not up, with how long it has been in that "
        "state. The status page (GET / on the daemon) shows the reason.",
        extra={
            "transformations": [
                {"id": "merge", "options": {}},
                {
                    "id": "filterByValue",
                    "options": {
                        "filters": [
                            {
                                "fieldName": "Value #A",
                                "config": {"id": "equal", "options": {"value": 1}},
                            }
                        ],
                        "type": "include",
                        "match": "any",
                    },
                },
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "Value #A": True,
                            "__name__": True,
                            "instance": True,
                            "job": True,
                        },
                        "renameByName": {"Value #B": "in this state for"},
                    },
                },
            ],
            "fieldConfig": {
                "defaults": {"unit": "short"},
                "overrides": [
                    {
                        "matcher": {"id": "byName", "options": "in this state for"},
                        "properties": [{"id": "unit", "value": "s"}],
                    },
                    {
                        "matcher": {"id": "byName", "options": "status"},
                        "properties": [
                            {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                            {
                                "id": "mappings",
                                "value": [
                                    {
                                        "type": "value",
                                        "options": {
                                            s: {"color": c, "index": i}
                                            for i, (s, c) in enumerate(STATE_COLOURS.items())
                                        },
                                    }
                                ],
                            },
                        ],
                    },
                ],
            },
        },
    ),
    Panel(
        "Checks by state",
        "timeseries",
        [Query(f"sum by (status) (alivemcp_check_status{{{SEL}}})", "{{status}}")],
        width=12,
        description="How many checks were in each state over time.",
        extra={"stacked": True},
    ),
    Panel(
        "Slowest checks (last run)",
        "timeseries",
        [Query(f"topk(10, alivemcp_check_duration_seconds{{{SEL}}})", "{{check}}")],
        unit="s",
        width=12,
    ),
    row("MCP endpoints"),
    Panel(
        "MCP handshake phases (p99 across endpoints)",
        "timeseries",
        [
            Query(f"quantile(0.99, alivemcp_probe_{name}_seconds{{{SEL}}})", label)
            for name, label in (
                ("connect", "connect"),
                ("tls", "TLS"),
                ("initialize", "initialize"),
                ("tools_list", "tools/list"),
                ("total", "total"),
            )
        ],
        description="connect, TLS, initialize and tools/list as a real MCP client sees them.",
    ),
    Panel(
        "TLS certificates expiring soonest",
        "bargauge",
        [
            Query(
                f"bottomk(10, alivemcp_probe_tls_cert_expiry_seconds{{{SEL}}})",
                "{{check}}",
                instant=True,
            )
        ],
        thresholds=[(None, "red"), (14 * 86400, "yellow"), (30 * 86400, "green")],
    ),
    Panel(
        "Tools advertised",
        "timeseries",
        [Query(f"alivemcp_probe_tools{{{SEL}}}", "{{check}}")],
        width=12,
        description="A sudden change is schema drift (the tool list changed).",
    ),
    Panel(
        "MCP endpoint latency, slowest 10",
        "timeseries",
        [Query(f"topk(10, alivemcp_probe_total_seconds{{{SEL}}})", "{{check}}")],
    ),
    row("Kafka / MSK"),
    Panel(
        "Canary produce latency (worst partition)",
        "timeseries",
        [
            Query(f"alivemcp_probe_produce_latency_max_seconds{{{SEL}}}", "{{check}} produce"),
            Query(f"alivemcp_probe_roundtrip_latency_max_seconds{{{SEL}}}", "{{check}} round trip"),
        ],
        width=8,
        description="acks=all produce to every partition of the canary topic, and "
        "the time until the canary is read back.",
    ),
    Panel(
        "Canary partitions failing",
        "timeseries",
        [
            Query(f"alivemcp_probe_partitions_failed{{{SEL}}}", "{{check}} failed"),
            Query(f"alivemcp_probe_messages_not_read_back{{{SEL}}}", "{{check}} not read back"),
        ],
        width=8,
    ),
    Panel(
        "Partition health",
        "timeseries",
        [
            Query(f"alivemcp_probe_offline_partitions{{{SEL}}}", "{{check}} offline"),
            Query(f"alivemcp_probe_under_min_isr_partitions{{{SEL}}}", "{{check}} under min ISR"),
            Query(
                f"alivemcp_probe_under_replicated_partitions{{{SEL}}}", "{{check}} under-replicated"
            ),
        ],
        width=8,
        description="Offline and under-min-ISR partitions break producers now; "
        "under-replicated ones are one broker failure away from it.",
    ),
    Panel(
        "Consumer group time lag (worst partition)",
        "timeseries",
        [
            Query(
                f"max by (check, group) (alivemcp_probe_group_max_time_lag_seconds{{{SEL}}})",
                "{{check}} {{group}}",
            )
        ],
        description="Age of the oldest message a group has not consumed.",
    ),
    Panel(
        "Consumer group offset lag",
        "timeseries",
        [
            Query(
                f"max by (check, group) (alivemcp_probe_group_max_offset_lag_messages{{{SEL}}})",
                "{{check}} {{group}}",
            )
        ],
    ),
    row("S3"),
    Panel(
        "Replication lag (canary)",
        "timeseries",
        [Query(f"alivemcp_probe_replication_lag_seconds{{{SEL}}}", "{{check}}")],
        width=8,
        description="Time from the canary's PUT in the source bucket to its "
        "appearance in the destination bucket (the check's `sla` param marks it degraded, "
        "45 s by default).",
        thresholds=[(None, "green"), (45, "yellow")],
    ),
    Panel(
        "Event delivery latency",
        "timeseries",
        [Query(f"alivemcp_probe_delivery_latency_seconds{{{SEL}}}", "{{check}}")],
        width=8,
        description="Upload to the ObjectCreated event arriving on the canary queue.",
    ),
    Panel(
        "Object Lambda / access point reads",
        "timeseries",
        [
            Query(f"alivemcp_probe_transform_latency_seconds{{{SEL}}}", "{{check}} Object Lambda"),
            Query(f"alivemcp_probe_read_latency_seconds{{{SEL}}}", "{{check}} access point"),
        ],
        width=8,
    ),
    row("Firehose"),
    Panel(
        "Firehose data freshness",
        "timeseries",
        [
            Query(f"alivemcp_probe_data_freshness_seconds{{{SEL}}}", "{{check}} metric"),
            Query(f"alivemcp_probe_canary_freshness_seconds{{{SEL}}}", "{{check}} canary"),
            Query(f"alivemcp_probe_canary_pending_seconds{{{SEL}}}", "{{check}} canary pending"),
        ],
        description="Age of the oldest record not yet delivered (CloudWatch DataFreshness) "
        "and the canary record's measured end-to-end time.",
    ),
    Panel(
        "Firehose delivery success and errors",
        "timeseries",
        [
            Query(f"alivemcp_probe_delivery_success_ratio{{{SEL}}}", "{{check}} success ratio"),
            Query(f"alivemcp_probe_new_error_objects{{{SEL}}}", "{{check}} new error objects"),
        ],
        description="Objects newly written under the error prefixes are records Firehose "
        "could not deliver or transform.",
    ),
    row("Kinesis"),
    Panel(
        "Kinesis canary",
        "timeseries",
        [
            Query(f"alivemcp_probe_readback_seconds{{{SEL}}}", "{{check}} read back"),
            Query(f"alivemcp_probe_consumer_latency_seconds{{{SEL}}}", "{{check}} consumer"),
        ],
        description="Time to read each run's canary back from its shard, and for the "
        "consumer's marker to appear (end-to-end mode).",
    ),
    Panel(
        "Kinesis throttling and iterator age",
        "timeseries",
        [
            Query(f"alivemcp_probe_throttled_runs{{{SEL}}}", "{{check}} throttled runs"),
            Query(
                f"alivemcp_probe_consumer_missing_shards{{{SEL}}}",
                "{{check}} shards without marker",
            ),
            Query(f"alivemcp_probe_iterator_age_seconds{{{SEL}}}", "{{check}} iterator age"),
        ],
        description="Consecutive throttled runs (a hot shard), shards whose consumer marker "
        "did not arrive, and CloudWatch GetRecords.IteratorAgeMilliseconds.",
    ),
    row("Managed Flink"),
    Panel(
        "Flink KPUs and idle cost",
        "timeseries",
        [
            Query(f"alivemcp_probe_kpus{{{SEL}}}", "{{check}} KPUs"),
            Query(f"alivemcp_probe_idle_kpu_seconds{{{SEL}}} / 3600", "{{check}} idle KPU-hours"),
            Query(f"alivemcp_probe_idle_cost{{{SEL}}}", "{{check}} idle cost"),
        ],
        description="KPUs billed, and the KPU-hours and cost spent RUNNING with no input.",
    ),
    Panel(
        "Flink restarts and checkpoints",
        "timeseries",
        [
            Query(f"alivemcp_probe_restarts_in_window{{{SEL}}}", "{{check}} restarts"),
            Query(
                f"alivemcp_probe_failed_checkpoints_in_window{{{SEL}}}",
                "{{check}} failed checkpoints",
            ),
            Query(f"alivemcp_probe_application_running{{{SEL}}}", "{{check}} running"),
        ],
        description="Full restarts and failed checkpoints within the restart window (a "
        "restart loop processes nothing), and whether the application is RUNNING.",
    ),
    row("Composite checks (DR readiness)"),
    Panel(
        "Members up",
        "timeseries",
        [
            Query(f"alivemcp_probe_members_up{{{SEL}}}", "{{check}} members up"),
            Query(f"alivemcp_probe_members{{{SEL}}}", "{{check}} members"),
        ],
        description="A composite's members that are up, against how many it has: below "
        "the count, the composite's reason names the failing members.",
    ),
    row("Alert delivery"),
    Panel(
        "Notifications by outcome",
        "timeseries",
        [
            Query(
                "sum by (receiver, outcome) (rate(alivemcp_notifications_total[$__rate_interval]))",
                "{{receiver}} {{outcome}}",
            )
        ],
        unit="ops",
        width=8,
    ),
    Panel(
        "Notification queue",
        "timeseries",
        [
            Query("alivemcp_notification_queue_depth", "{{receiver}} queued"),
            Query(
                "alivemcp_notification_oldest_undelivered_age_seconds", "{{receiver}} oldest (s)"
            ),
        ],
        width=8,
        description="Notifications waiting for their receiver; they survive "
        "restarts and are retried with backoff.",
    ),
    Panel(
        "Receivers rejecting for good",
        "timeseries",
        [Query("increase(alivemcp_notification_permanent_failures_total[1h])", "{{receiver}}")],
        width=8,
        description="Revoked webhooks, invalid routing keys: not retried. Run "
        "`alivemcp alert-test --receiver NAME` after fixing.",
        thresholds=[(None, "green"), (1, "red")],
    ),
    Panel(
        "Alerts firing by severity",
        "timeseries",
        [Query("sum by (severity) (alivemcp_alerts_firing)", "{{severity}}")],
        width=24,
        height=6,
    ),
    row("Prober health"),
    Panel(
        "Scheduling lateness",
        "timeseries",
        [
            Query(
                "histogram_quantile(0.5, sum by (le) "
                "(rate(alivemcp_scheduler_lateness_seconds_bucket[$__rate_interval])))",
                "p50",
            ),
            Query(
                "histogram_quantile(0.99, sum by (le) "
                "(rate(alivemcp_scheduler_lateness_seconds_bucket[$__rate_interval])))",
                "p99",
            ),
        ],
        unit="s",
        width=8,
        description="Actual start minus planned start of probe runs: "
        "rising lateness means the prober is overloaded.",
    ),
    Panel(
        "Runs in flight, skipped and abandoned",
        "timeseries",
        [
            Query("alivemcp_scheduler_runs_in_flight", "in flight"),
            # No skip yet means no series yet: show a zero line rather than "No data".
            Query(
                "sum by (reason) (rate(alivemcp_scheduler_skipped_runs_total"
                "[$__rate_interval])) or on() vector(0)",
                "skipped {{reason}}",
            ),
            Query("alivemcp_scheduler_abandoned_probes", "abandoned"),
        ],
        width=8,
    ),
    Panel(
        "Runs by result",
        "timeseries",
        [
            Query(
                f"sum by (result) (rate(alivemcp_check_runs_total{{{SEL}}}[$__rate_interval]))",
                "{{result}}",
            )
        ],
        unit="ops",
        width=8,
    ),
    Panel(
        "Config and scrape",
        "timeseries",
        [
            Query("alivemcp_config_last_reload_successful", "last reload ok"),
            Query("alivemcp_metrics_render_seconds", "/metrics render (s)"),
            Query(
                "sum by (result) (increase(alivemcp_config_reloads_total[1h]))",
                "reloads {{result}} (1h)",
            ),
        ],
        width=12,
    ),
    Panel(
        "Build",
        "table",
        [Query("alivemcp_build_info", instant=True, table=True)],
        width=12,
        extra={
            "transformations": [
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
                }
            ]
        },
    ),
]


#: Observation unit (from the name's suffix) -> Grafana unit.
_GRAFANA_UNITS = {"seconds": "s", "bytes": "bytes"}
_OBSERVATION = re.compile(re.escape(OBSERVATION_PREFIX) + r"([a-z0-9_]+)")


def _observations(panel: Panel) -> list[str]:
    """Observation names the panel's queries use, in order of appearance."""
    found = [m.group(1) for q in panel.queries for m in _OBSERVATION.finditer(q.expr)]
    return list(dict.fromkeys(found))


def _declared_help() -> dict[str, str]:
    """Every observation a built-in probe declares -> its help (the first declaration wins)."""
    helps: dict[str, str] = {}
    for declared in declared_observables().values():
        for observable in declared:
            helps.setdefault(observable.name, observable.help)
    return helps


def _unit(panel: Panel) -> str:
    if panel.unit is not None:
        return panel.unit
    units = {unit_of(name) for name in _observations(panel)}
    only = units.pop() if len(units) == 1 else None
    return _GRAFANA_UNITS.get(only or "", "short")


def _description(panel: Panel, helps: dict[str, str]) -> str:
    if panel.description:
        return panel.description
    return " ".join(f"{name}: {helps[name]}" for name in _observations(panel))


def _thresholds(steps: list[tuple[float | None, str]] | None, colour: str | None) -> dict[str, Any]:
    if steps is None:
        steps = [(None, colour or "green")]
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def _targets(panel: Panel) -> list[dict[str, Any]]:
    out = []
    for i, query in enumerate(panel.queries):
        target: dict[str, Any] = {
            "datasource": DS,
            "expr": query.expr,
            "refId": chr(ord("A") + i),
            "legendFormat": query.legend or "__auto",
            "range": not query.instant,
            "instant": query.instant,
        }
        if query.table:
            target["format"] = "table"
        out.append(target)
    return out


def _panel_json(
    panel: Panel, panel_id: int, x: int, y: int, helps: dict[str, str]
) -> dict[str, Any]:
    grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
    if panel.kind == "row":
        return {
            "type": "row",
            "title": panel.title,
            "id": panel_id,
            "gridPos": grid,
            "collapsed": False,
            "panels": [],
        }
    body: dict[str, Any] = {
        "type": panel.kind,
        "title": panel.title,
        "id": panel_id,
        "gridPos": grid,
        "datasource": DS,
        "targets": _targets(panel),
        "fieldConfig": {
            "defaults": {
                "unit": _unit(panel),
                "thresholds": _thresholds(panel.thresholds, panel.colour),
            },
            "overrides": [],
        },
        "options": {},
    }
    description = _description(panel, helps)
    if description:
        body["description"] = description
    if panel.kind == "stat":
        body["fieldConfig"]["defaults"]["color"] = {
            "mode": "fixed",
            "fixedColor": panel.colour or "green",
        }
        body["options"] = {
            "colorMode": "background",
            "graphMode": "none",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "value",
        }
    elif panel.kind == "timeseries":
        custom: dict[str, Any] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "spanNulls": True,
        }
        if panel.extra.get("stacked"):
            custom["stacking"] = {"mode": "normal", "group": "A"}
            custom["fillOpacity"] = 60
        body["fieldConfig"]["defaults"]["custom"] = custom
        body["fieldConfig"]["defaults"]["color"] = {"mode": "palette-classic"}
        if panel.title == "Checks by state":
            body["fieldConfig"]["overrides"] = [
                {
                    "matcher": {"id": "byName", "options": s},
                    "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": c}}],
                }
                for s, c in STATE_COLOURS.items()
            ]
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "bargauge":
        body["options"] = {
            "orientation": "horizontal",
            "displayMode": "gradient",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }
    elif panel.kind == "table":
        body["options"] = {"showHeader": True, "cellHeight": "sm"}
    for key, value in panel.extra.items():
        if key == "fieldConfig":
            body["fieldConfig"]["overrides"] = value.get("overrides", [])
        elif key != "stacked":
            body[key] = value
    return body


def _layout(panels: list[Panel]) -> list[dict[str, Any]]:
    helps = _declared_help()
    undeclared = [(p.title, name) for p in panels for name in _observations(p) if name not in helps]
    if undeclared:
        raise LookupError(
            "panels query observations no built-in probe declares: "
            + ", ".join(f"{OBSERVATION_PREFIX}{name} ({title})" for title, name in undeclared)
        )
    out = []
    x = y = 0
    line_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        if panel.kind == "row" or x + panel.width > 24:
            y += line_height
            x, line_height = 0, 0
        out.append(_panel_json(panel, panel_id, x, y, helps))
        if panel.kind == "row":
            y += panel.height
            continue
        x += panel.width
        line_height = max(line_height, panel.height)
    return out


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "regex": "",
        "hide": 0,
        "options": [],
    }


def dashboard() -> dict[str, Any]:
    return {
        "uid": "alivemcp-overview",
        "title": "alivemcp",
        "description": "MCP endpoints and the AWS data plane behind them, as alivemcp's probes "
        "see them; and the prober's own health.",
        "tags": ["alivemcp", "mcp", "uptime"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                    "options": [],
                },
                _variable("probe", "Probe type", "label_values(alivemcp_check_up, probe)"),
                _variable(
                    "check", "Check", 'label_values(alivemcp_check_up{probe=~"$probe"}, check)'
                ),
            ]
        },
        "panels": _layout(PANELS),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def all_queries() -> list[str]:
    """Every PromQL expression the dashboard runs: panels and template variables."""
    exprs = [q.expr for p in PANELS for q in p.queries]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            # Grafana's label_values(SELECTOR, LABEL): the selector is the PromQL part.
            match = re.fullmatch(r"label_values\((.*),\s*[a-zA-Z_]\w*\)", var["definition"])
            exprs.append(match.group(1) if match else var["definition"])
    return exprs


def main(argv: list[str] | None = None) -> int:
    return generated_file.main(
        OUTPUT, render, "gen_dashboard.py", (__doc__ or "").split("\n\n")[0], argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
