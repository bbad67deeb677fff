"""The config file's own model: the engine's sections and the checks as written.

Each consumer's section is its own module (``alivemcp.alerting.config``,
``alivemcp.history.config``, ``alivemcp.cluster.config``, ``alivemcp.discovery.config``);
:class:`Config` gathers them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.cluster.config import ClusterConfig, check_locations, check_quorum
from alivemcp.discovery.config import DiscoverySource, no_items
from alivemcp.durations import Duration
from alivemcp.history.config import HistoryConfig

__all__ = [
    "CheckSpec",
    "Config",
    "Defaults",
    "LoggingConfig",
    "SchedulerConfig",
    "ServerConfig",
    "TargetSpec",
    "split_listen",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    listen: str = Field("0.0.0.0:9464", description="HOST:PORT for /metrics, /status, /healthz.")
    mcp: bool = Field(
        True,
        description="Serve MCP at /mcp on the same port, for agents: read-only tools "
        "(list_checks, get_check, get_uptime, list_incidents, explain_check, "
        "list_tool_surface_changes) and alivemcp://checks/{name} resources. A change takes "
        "effect on restart.",
    )

    web_config_file: str | None = Field(
        None,
        description="A web config file in the format of Prometheus exporters "
        "(exporter-toolkit): TLS (`tls_server_config`), response headers "
        "(`http_server_config.headers`) and users with bcrypt password hashes "
        "(`basic_auth_users`). Relative to this file's directory; `alivemcp run "
        "--web.config.file` wins over it. Re-read when it or a file it names changes "
        "(certificate rotation without a restart); a broken new version is refused and the "
        "previous one kept. Turning TLS on or off takes a restart.",
    )
    public_paths: list[str] = Field(
        default_factory=list,
        description="Paths served without credentials when the web config has "
        'basic_auth_users, e.g. `["/", "/badge/"]`: an entry ending in `/` is a prefix, '
        "except `/` itself, which is the status page alone. `/healthz` and `/readyz` are "
        "always open; everything else (`/metrics`, `/status`, `/api/`, badges) needs "
        "credentials. Applied on reload.",
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_listen(value)
        return value

    @field_validator("public_paths")
    @classmethod
    def _absolute_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not a path: public paths start with /")
        return value


def split_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class Defaults(_Strict):
    interval: Duration = Field(60.0, description="How often each check runs.")
    timeout: Duration | None = Field(
        None, description="Per-run timeout; default: the probe type's, else min(10s, 80% interval)."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Labels on every check.")


class SchedulerConfig(_Strict):
    max_concurrency: int = Field(1000, ge=1, description="Probe runs in flight at once, overall.")
    per_probe_type: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="Runs in flight at once per probe type (at least 1: 0 would never run).",
    )
    shutdown_grace: Duration = Field(
        10.0,
        description="How long runs in flight at SIGTERM may finish (then canaries are "
        "cleaned up: a whole stop takes up to this plus about 8 s; keep it under 20 s where "
        "Kubernetes allows 30 s).",
    )


class LoggingConfig(_Strict):
    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: console on a TTY, JSON lines otherwise."
    )


class TargetSpec(_Strict):
    """One target of a multi-target check: a name, extra labels and params overrides."""

    name: str | None = Field(None, description="Name suffix (default: the target param).")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Params overriding the check's for this target."
    )


class CheckSpec(_Strict):
    name: str = Field(min_length=1, description="Unique name; with targets, a name prefix.")
    probe: str = Field(description="Probe type (see `alivemcp probes`).")
    interval: Duration | None = Field(None, description="How often it runs (default: defaults).")
    timeout: Duration | None = Field(
        None,
        description="Per-run timeout, at most the interval (default: defaults, then the "
        "probe type's, then min(10s, 80% interval)).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels (metrics, routing), merged over defaults."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="The probe type's params.")
    targets: list[str | TargetSpec] | None = Field(
        None, description="Expand into one check per target (string: fills the target param)."
    )
    targets_file: str | None = Field(
        None, description="File of targets: a YAML list, or one target per line."
    )
    depends_on: list[str] = Field(
        default_factory=list, description="Checks whose firing alerts suppress this one's."
    )
    alert: AlertPolicyOverride | None = Field(None, description="Alert policy overrides.")
    locations: list[str] | None = Field(
        None,
        description="Cluster mode: the locations (cluster.location of the replicas) that probe "
        "this check and vote on its verdict (default: every location seen in the cluster). "
        "Standalone: ignored.",
    )
    quorum: int | None = Field(
        None,
        ge=1,
        description="Cluster mode: how many locations must agree for the check to be down (or "
        "up); default a majority of its locations. At most the number of locations listed.",
    )

    @field_validator("locations")
    @classmethod
    def _location_names(cls, value: list[str] | None) -> list[str] | None:
        return check_locations(value)

    @model_validator(mode="after")
    def _one_target_source(self) -> CheckSpec:
        if self.targets is not None and self.targets_file is not None:
            raise ValueError("use either targets or targets_file, not both")
        check_quorum(self.quorum, self.locations)
        return self


class Config(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig, description="The HTTP server.")
    defaults: Defaults = Field(default_factory=Defaults, description="Defaults for every check.")
    scheduler: SchedulerConfig = Field(
        default_factory=SchedulerConfig, description="Concurrency limits and shutdown grace."
    )
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Log output.")
    data_dir: str = Field(
        "./data",
        description="Where alert state and history are kept; locked by one daemon at "
        "a time (a second daemon on the same data_dir refuses to start).",
    )
    checks: list[CheckSpec] = Field(default_factory=list, description="The checks to run.")
    discovery: list[DiscoverySource] = Field(
        default_factory=no_items,
        description="Sources of checks found while the daemon runs (an MCP registry, "
        "Prometheus http_sd or file_sd), each target made into a check by a template; "
        "refreshed without a reload.",
    )
    alerting: AlertingConfig = Field(
        default_factory=AlertingConfig, description="Receivers, routes and the alert policy."
    )
    history: HistoryConfig = Field(
        default_factory=HistoryConfig,
        description="Uptime history, incidents and latency kept in data_dir/history.sqlite.",
    )
    cluster: ClusterConfig | None = Field(
        None,
        description="Cluster mode: replicas share the checks through a Kafka consumer "
        "group (docs/cluster.md). Absent: standalone, this process probes every check.",
    )

    @field_validator("checks", "discovery", mode="before")
    @classmethod
    def _no_checks(cls, value: Any) -> Any:
        # `checks:` with only comments under it parses as null: that is an empty list.
        return [] if value is None else value
