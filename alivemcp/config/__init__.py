"""Configuration: one YAML file, validated by pydantic, with errors that name the field.

Loading goes in stages so every error can carry a precise path:
1. YAML parse, then ``${VAR}`` / ``${VAR:-default}`` interpolation on string values.
2. The engine's own model (:class:`Config`), with checks' params still raw mappings.
3. Target expansion (``targets:`` / ``targets_file:``) into one check per target.
4. Each check's params validated by its probe type's ``Params`` model from the registry.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import gc
import hashlib
import json
import os
import re
import threading
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.cluster.config import ClusterConfig
from alivemcp.config.registry import ProbeTypeError, Registry, registry
from alivemcp.config.secrets import ConfigSecrets, mask_url_secrets
from alivemcp.config.yamlfile import YamlFileError, load_yaml, read_text
from alivemcp.durations import Duration, parse_duration
from alivemcp.history.config import HistoryConfig
from alivemcp.outcome import OBSERVATION_PREFIX, engine_label_owners
from alivemcp.probe import ProbeParams
from alivemcp.resultsview import ReadableCheck, ReadsChecks, Reference

__all__ = [
    "CheckSpec",
    "Config",
    "ConfigError",
    "Duration",
    "LoadedConfig",
    "ResolvedCheck",
    "SharedValues",
    "collector_paused",
    "load_config",
    "load_config_text",
    "parse_duration",
    "sharing",
]

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: Shortest check interval: below this a check is a busy loop, not a probe.
MIN_INTERVAL_SECONDS = 0.1
_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    listen: str = Field("0.0.0.0:9464", description="HOST:PORT for /metrics, /status, /healthz.")

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_listen(value)
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

    @model_validator(mode="after")
    def _one_target_source(self) -> CheckSpec:
        if self.targets is not None and self.targets_file is not None:
            raise ValueError("use either targets or targets_file, not both")
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

    @field_validator("checks", mode="before")
    @classmethod
    def _no_checks(cls, value: Any) -> Any:
        # `checks:` with only comments under it parses as null: that is an empty list.
        return [] if value is None else value


#: Size of :meth:`ResolvedCheck.reload_digest`.
RELOAD_DIGEST_BYTES = 16
#: Size of :meth:`ResolvedCheck.fingerprint`.
FINGERPRINT_BYTES = 16


@dataclass(frozen=True, slots=True)
class ResolvedCheck:
    """One concrete check after target expansion and params validation."""

    name: str
    probe_type: str
    interval: float
    timeout: float
    labels: Mapping[str, str]
    params: ProbeParams
    depends_on: tuple[str, ...]
    alert: AlertPolicyOverride | None
    #: The checks whose latest results the probe reads (its params' ``referenced_checks()``),
    #: each name resolved to concrete checks and their intervals.
    reads: tuple[Reference, ...] = ()
    _fingerprint: bytes | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    _reload_digest: bytes | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def fingerprint(self) -> bytes:
        """Equal fingerprints mean a reload can keep the running probe instance. Computed
        once, and kept as a 16-byte digest: a reload compares 100,000 of them, and the
        fields and params it digests were about 450 bytes a check, kept for good."""
        cached = self._fingerprint
        if cached is None:
            fields = repr(
                (
                    self.probe_type,
                    self.interval,
                    self.timeout,
                    sorted(self.labels.items()),
                    # A reader is rebuilt when what its names stand for changes (a target added
                    # to a member, a member's interval), so its view never holds the old
                    # resolution.
                    self.reads,
                )
            )
            # One hash over the fields and the params' text: a digest of the params first, its
            # hex in the fields' repr, then a digest of that took 17.6 us a check against
            # 9.8 us (a reload of 100,000 checks digests every one). The NUL between the two
            # cannot occur in a repr, so no two fields and params give the same input.
            digest = hashlib.blake2b(
                fields.encode("utf-8", "surrogatepass"), digest_size=FINGERPRINT_BYTES
            )
            digest.update(b"\0")
            digest.update(_params_text(self.params))
            cached = digest.digest()
            object.__setattr__(self, "_fingerprint", cached)
        return cached

    def same_as(self, other: ResolvedCheck) -> bool:
        """Whether ``other`` is this check as configured, field for field (the params by
        their digest, secrets included): a reload keeps the running check's objects then."""
        return self is other or (
            self.name == other.name
            and self.fingerprint() == other.fingerprint()
            and self.depends_on == other.depends_on
            and self.alert == other.alert
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The fields in order, not dataclasses' own state (it calls ``fields()`` on every
        # check: a fifth of a second per 100,000 pickled), and unpickled through
        # _unpickled_check, which shares equal values (see sharing()).
        return _unpickled_check, (
            self.name,
            self.probe_type,
            self.interval,
            self.timeout,
            self.labels,
            self.params,
            self.depends_on,
            self.alert,
            self.reads,
            self._fingerprint,
            self._reload_digest,
        )

    def reload_digest(self) -> bytes:
        """16 bytes that change whenever :meth:`same_as` would tell this check from its
        changed self: a config loader in another process is given the running checks' digests
        and sends back which checks it can keep, instead of copies of them (see
        :mod:`alivemcp.app.configload`). Computed once."""
        cached = self._reload_digest
        if cached is None:
            alert = None if self.alert is None else self.alert.model_dump_json()
            text = repr((self.name, self.fingerprint(), self.depends_on, alert))
            cached = hashlib.blake2b(
                text.encode("utf-8", "surrogatepass"), digest_size=RELOAD_DIGEST_BYTES
            ).digest()
            object.__setattr__(self, "_reload_digest", cached)
        return cached


_V = TypeVar("_V")


def _params_text(params: ProbeParams) -> bytes:
    """Every param *including secret values* (``model_dump_json`` masks them, so a changed
    password alone would keep the probe with the old one), as canonical JSON. Only a digest of
    it is kept."""
    text = _PARAMS_JSON.encode(params.model_dump(mode="python"))
    return text.encode("utf-8", "surrogatepass")


class SharedValues:
    """One object for each distinct label set, probe type and duration among the checks of one
    load. A generated config of 100,000 checks repeats a few label sets (the defaults' and a
    team's) and one or two intervals in every check: as copies that was a dict of labels, two
    strings and two floats per check (about 300 bytes with two labels), kept for good and made
    again by a reload. The shared label dicts are read-only like the checks that hold them
    (``ResolvedCheck.labels`` and ``CheckInfo.labels`` are typed ``Mapping``: nothing
    writes to them)."""

    __slots__ = ("_labels", "_values")

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._values: dict[tuple[type, object], object] = {}

    def labels(self, labels: dict[str, str]) -> dict[str, str]:
        return self._labels.setdefault(tuple(labels.items()), labels)

    def value(self, value: _V) -> _V:
        # Keyed by type too: 60 and 60.0 are equal keys, and a float field stays a float.
        return typing.cast(_V, self._values.setdefault((type(value), value), value))


#: While set, unpickled checks share their equal values through it (see :func:`sharing`).
_UNPICKLED_SHARE: contextvars.ContextVar[SharedValues | None] = contextvars.ContextVar(
    "alivemcp_unpickled_share", default=None
)


@contextlib.contextmanager
def sharing(shared: SharedValues) -> Iterator[None]:
    """Checks unpickled meanwhile (in this context) share their label sets and durations
    through ``shared``: pickle shares an object only within one ``loads``, and a reload
    loaded in a child process arrives a frame of checks at a time."""
    token = _UNPICKLED_SHARE.set(shared)
    try:
        yield
    finally:
        _UNPICKLED_SHARE.reset(token)


def _unpickled_check(
    name: str,
    probe_type: str,
    interval: float,
    timeout: float,
    labels: Mapping[str, str],
    params: ProbeParams,
    depends_on: tuple[str, ...],
    alert: AlertPolicyOverride | None,
    reads: tuple[Reference, ...],
    fingerprint: bytes | None,
    reload_digest: bytes | None,
) -> ResolvedCheck:
    shared = _UNPICKLED_SHARE.get()
    if shared is not None:
        probe_type, interval, timeout = (
            shared.value(probe_type),
            shared.value(interval),
            shared.value(timeout),
        )
        if type(labels) is dict:
            labels = shared.labels(labels)
    check = ResolvedCheck(
        name, probe_type, interval, timeout, labels, params, depends_on, alert, reads
    )
    object.__setattr__(check, "_fingerprint", fingerprint)
    object.__setattr__(check, "_reload_digest", reload_digest)
    return check


def _reveal(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes):
        return repr(value.get_secret_value())
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)


#: One encoder for every check's params: ``json.dumps`` with options builds one per call
#: (2.6 us a check against 5.0 us).
_PARAMS_JSON = json.JSONEncoder(sort_keys=True, default=_reveal, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: Config
    checks: tuple[ResolvedCheck, ...]
    source: str
    #: Every secret value found while loading (already registered for redaction).
    secrets: frozenset[str] = frozenset()
    #: With ``allow_missing_env``: fields left unchecked because their variable is not set.
    unchecked: tuple[str, ...] = ()


#: Errors a message, a log line or the CLI lists at most. One mistake repeated over a generated
#: file of 100,000 checks is 100,000 errors: listed whole, that was a 27 MB log line, and the
#: first few say what to fix as well as all of them do.
ERRORS_SHOWN = 20


class ConfigError(ValueError):
    """An invalid configuration; ``errors`` are ``path: message`` lines (all of them; the
    message and :meth:`render` list the first :data:`ERRORS_SHOWN` and count the rest)."""

    def __init__(self, errors: list[str], source: str = "config") -> None:
        self.errors = errors
        self.source = source
        super().__init__(f"{source}: " + "; ".join(self.shown()))

    def shown(self) -> list[str]:
        """The first errors, and a line counting the ones left out."""
        shown = self.errors[:ERRORS_SHOWN]
        more = len(self.errors) - len(shown)
        if more:
            shown.append(f"... and {more} more error(s) not shown")
        return shown

    def render(self) -> str:
        lines = [f"{self.source}: invalid configuration ({len(self.errors)} error(s))"]
        lines += [f"  {e}" for e in self.shown()]
        return "\n".join(lines)


def load_config(
    path: str | os.PathLike[str], *, reg: Registry | None = None, allow_missing_env: bool = False
) -> LoadedConfig:
    path = Path(path)
    try:
        text = read_text(path)
    except YamlFileError as exc:
        raise ConfigError([str(exc)], str(path)) from None
    return load_config_text(
        text, source=str(path), base_dir=path.parent, reg=reg, allow_missing_env=allow_missing_env
    )


def load_config_text(
    text: str,
    *,
    source: str = "config",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    reg: Registry | None = None,
    allow_missing_env: bool = False,
) -> LoadedConfig:
    """Load and validate a config, reporting every error it can find in one pass.

    With ``allow_missing_env`` (for CI, where the secrets are not set), a ``${VAR}`` that is
    not set is not an error, and errors about the fields it fills are listed in
    ``LoadedConfig.unchecked`` instead: the rest of the file is still fully checked.
    """
    with collector_paused():
        return _load_config_text(text, source, base_dir, env, reg, allow_missing_env)


_pause_lock = threading.Lock()
_pauses = 0
_resume_collector = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a config loads. A load builds millions of
    objects (YAML nodes, the document, models) that all live until it ends; each young
    collection on the way re-walks the older ones, which at 100,000 checks was half the load.
    What a load throws away is freed by reference counting; the collector resumes after."""
    global _pauses, _resume_collector
    with _pause_lock:
        _pauses += 1
        if _pauses == 1:
            _resume_collector = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume_collector:
                gc.enable()


def _load_config_text(
    text: str,
    source: str,
    base_dir: Path | None,
    env: Mapping[str, str] | None,
    reg: Registry | None,
    allow_missing_env: bool,
) -> LoadedConfig:
    reg = reg or registry()
    env = os.environ if env is None else env
    try:
        raw = load_yaml(text, source)
    except YamlFileError as exc:
        raise ConfigError([str(exc)], source) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(["the top level must be a mapping"], source)
    errors: list[str] = []
    # Top-level keys starting with `x-` hold YAML anchors for reuse (as in Compose files);
    # they are not configuration themselves.
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}
    secrets = ConfigSecrets()
    missing: dict[str, str] = {}
    if "$" in text:  # (every reference and escape has one: without, nothing to walk)
        raw = _interpolate(raw, env, "", errors, secrets, missing)
    config, specs = _validate(raw, errors)
    checks = _resolve_checks(config, specs, base_dir or Path.cwd(), env, reg, errors)
    # The check specs live on as the resolved checks: holding both cost about 1.1 kB a check
    # for the daemon's life (validated models, their dicts and lists).
    config.__dict__["checks"] = []
    del specs
    _check_type_limits(config, reg, errors)
    unchecked: list[str] = []
    if missing:
        # An unset variable is one error, not also one for the empty value it left behind.
        errors, unchecked = _set_aside_missing(errors, missing)
        if not allow_missing_env:
            unset = [f"{p}: environment variable {n} is not set" for p, n in missing.items()]
            errors, unchecked = unset + errors, []
    if errors:
        raise ConfigError(errors, source)
    secrets.add_model(config)
    for check in checks:
        if type(check.params).model_fields:  # (params without fields hold no secret)
            secrets.add_model(check.params)
    # Registered here, at the one place every path (run, reload, check, validate, tests) loads
    # a config through, so no caller can forget to.
    secrets.register()
    return LoadedConfig(
        config=config,
        checks=tuple(checks),
        source=source,
        secrets=frozenset(secrets.values),
        unchecked=tuple(unchecked),
    )


def _validate(raw: dict[str, Any], errors: list[str]) -> tuple[Config, list[tuple[int, CheckSpec]]]:
    """The config and its check specs (with their index); what does not validate is added to
    ``errors``, and the rest goes on, so the checks' params are checked in the same pass: one
    run of `validate` lists every error, not one layer at a time.

    The checks are validated one by one, not as one list: a single validation call runs in
    pydantic's Rust core without letting go of the GIL, and at 100,000 checks that held a
    reloading daemon's event loop (the load runs in a thread) for seconds."""
    raw_checks = raw.get("checks")
    if not isinstance(raw_checks, list):  # absent, null, or wrong: the model says which
        try:
            config = Config.model_validate(raw)
            return config, list(enumerate(config.checks))
        except ValidationError as exc:
            errors.extend(_format_errors(exc, Config, ""))
            return _partial_config(raw)
    try:
        config = Config.model_validate({k: v for k, v in raw.items() if k != "checks"})
    except ValidationError as exc:
        errors.extend(_format_errors(exc, Config, ""))
        config = _partial_config({k: v for k, v in raw.items() if k != "checks"})[0]
    specs: list[tuple[int, CheckSpec]] = []
    for index, item in enumerate(raw_checks):
        try:
            specs.append((index, CheckSpec.model_validate(item)))
        except ValidationError as exc:
            errors.extend(_format_errors(exc, CheckSpec, f"checks[{index}]"))
    return config, specs


def _partial_config(raw: dict[str, Any]) -> tuple[Config, list[tuple[int, CheckSpec]]]:
    """The sections and checks of ``raw`` that validate on their own (defaults elsewhere)."""
    sections: dict[str, Any] = {}
    for name, field in Config.model_fields.items():
        if name == "checks" or name not in raw:
            continue
        try:
            sections[name] = Config.model_validate({name: raw[name]}).__dict__[name]
        except ValidationError:
            if field.default_factory is not None:
                sections[name] = field.default_factory()  # type: ignore[call-arg]
    specs: list[tuple[int, CheckSpec]] = []
    raw_checks = raw.get("checks")
    if isinstance(raw_checks, list):
        for index, item in enumerate(raw_checks):
            try:
                specs.append((index, CheckSpec.model_validate(item)))
            except ValidationError:
                continue
    return Config.model_construct(**sections), specs


def _set_aside_missing(
    errors: list[str], missing: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """Split errors into real ones and those about fields an unset ``${VAR}`` fills."""
    real: list[str] = []
    unchecked = [f"{path}: ${{{name}}} is not set; not checked" for path, name in missing.items()]
    for line in errors:
        where = line.partition(": ")[0]
        # An error at the field itself, inside it, or on the object holding it (a model-level
        # rule such as "bootstrap_servers is empty" is reported on its parent). Inside a
        # tagged union pydantic adds the tag to the path (marker.s3.bucket for the YAML's
        # marker.bucket), so each path is also tried with one segment left out.
        if not any(_covers(p, w) for p in missing for w in _with_one_segment_less(where)):
            real.append(line)
    return real, unchecked


def _covers(missing: str, where: str) -> bool:
    return (
        where == missing
        or where.startswith((missing + ".", missing + "["))
        or missing.startswith((where + ".", where + "["))
    )


def _with_one_segment_less(path: str) -> list[str]:
    parts = path.split(".")
    return [path, *(".".join(parts[:i] + parts[i + 1 :]) for i in range(1, len(parts)))]


# -- interpolation ---------------------------------------------------------------------------


def _interpolate(
    value: Any,
    env: Mapping[str, str],
    path: str,
    errors: list[str],
    secrets: ConfigSecrets,
    missing: dict[str, str],
) -> Any:
    if isinstance(value, str):
        if "$" not in value:
            return value

        def sub(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if name in env:
                secrets.add_variable(name, path, env[name])
                return env[name]
            if default is not None:
                return default
            missing[path or "<root>"] = name
            return ""

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _interpolate(v, env, _join(path, str(k)), errors, secrets, missing)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _interpolate(v, env, f"{path}[{i}]", errors, secrets, missing)
            for i, v in enumerate(value)
        ]
    return value


# -- checks ------------------------------------------------------------------------------------


def _resolve_checks(
    config: Config,
    specs: list[tuple[int, CheckSpec]],
    base_dir: Path,
    env: Mapping[str, str],
    reg: Registry,
    errors: list[str],
) -> list[ResolvedCheck]:
    resolved: list[ResolvedCheck] = []
    shared = SharedValues()
    seen: dict[str, str] = {}
    label_owners: dict[type[Any], dict[str, str]] = {}  # per probe type, for this load
    # Base name of a multi-target check -> its checks' names, for references to the base name.
    groups: dict[str, list[str]] = {}
    # Names of checks (or multi-target bases) with an error of their own: a reference to them
    # is not reported again as "no check named".
    failed: set[str] = set()
    for index, spec in specs:
        path = f"checks[{index}]"
        errors_before = len(errors)
        try:
            probe_cls = reg.get(spec.probe)
        except ProbeTypeError as exc:
            errors.append(f"{path}.probe: {exc}")
            failed.add(spec.name)
            continue
        labels = {**config.defaults.labels, **spec.labels}
        owners = label_owners.get(probe_cls)
        if owners is None:
            owners = label_owners[probe_cls] = _label_owners(probe_cls)
        for label in labels:
            where = f"{path}.labels.{label}" if label in spec.labels else f"defaults.labels.{label}"
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                errors.append(
                    f"{where}: not a usable Prometheus label name "
                    "([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
                )
            elif label in owners:
                errors.append(
                    f"{where}: {owners[label]} already carries a label {label!r} "
                    "(this check's series would have it twice, and Prometheus "
                    "rejects the whole scrape); rename it"
                )
        interval = spec.interval or config.defaults.interval
        if interval < MIN_INTERVAL_SECONDS:
            where = f"{path}.interval" if spec.interval else "defaults.interval"
            errors.append(
                f"{where}: {interval:g}s is shorter than the shortest interval "
                f"allowed ({MIN_INTERVAL_SECONDS:g}s)"
            )
            failed.add(spec.name)
            continue
        timeout = spec.timeout or config.defaults.timeout or probe_cls.default_timeout
        if timeout is None:
            timeout = min(10.0, interval * 0.8)
        if timeout > interval:
            where = "timeout" if spec.timeout else "interval"
            origin = (
                ""
                if spec.timeout or config.defaults.timeout
                else f" ({spec.probe}'s default timeout)"
            )
            errors.append(
                f"{path}.{where}: timeout {timeout:g}s{origin} is longer than the interval "
                f"{interval:g}s (runs of one check never overlap; raise the interval or set a "
                "shorter timeout)"
            )
            failed.add(spec.name)
            continue
        for name, target_labels, overrides, tpath in _expand(
            spec, probe_cls, base_dir, path, errors
        ):
            params_raw = {**spec.params, **overrides}
            try:
                params = probe_cls.Params.model_validate(params_raw)
            except ValidationError as exc:
                errors.extend(_format_errors(exc, probe_cls.Params, f"{tpath}.params"))
                continue
            if name in seen:
                errors.append(f"{tpath}.name: {name!r} is already used by {seen[name]}")
                continue
            seen[name] = tpath
            if spec.targets is not None or spec.targets_file is not None:
                groups.setdefault(spec.name, []).append(name)
            resolved.append(
                ResolvedCheck(
                    name=name,
                    probe_type=shared.value(spec.probe),
                    interval=shared.value(interval),
                    timeout=shared.value(timeout),
                    labels=shared.labels({**labels, **target_labels}),
                    params=params,
                    depends_on=tuple(spec.depends_on),
                    alert=spec.alert,
                )
            )
        if len(errors) > errors_before:
            failed.add(spec.name)
    known = {c.name for c in resolved}
    resolved = _resolve_references(resolved, seen, groups, failed, errors)
    for index, spec in specs:
        for dep in spec.depends_on:
            if dep not in known:
                hint = difflib.get_close_matches(dep, known, n=1)
                more = f"; did you mean {hint[0]!r}?" if hint else ""
                errors.append(f"checks[{index}].depends_on: no check named {dep!r}{more}")
    return resolved


def _resolve_references(
    checks: list[ResolvedCheck],
    paths: Mapping[str, str],
    groups: Mapping[str, list[str]],
    failed: set[str],
    errors: list[str],
) -> list[ResolvedCheck]:
    """Resolve the check names a probe's params read (:class:`ReadsChecks`, e.g. a composite's
    ``members``): each must be a check or a multi-target base name (all its targets); a check
    may not read itself, and readers may not read each other in a cycle."""
    by_name = {c.name: c for c in checks}
    out: list[ResolvedCheck] = []
    edges: dict[str, list[str]] = {}
    reads_checks: dict[type[Any], bool] = {}  # per params type: isinstance of a Protocol is slow
    for check in checks:
        kind = type(check.params)
        reads = reads_checks.get(kind)
        if reads is None:
            reads = reads_checks[kind] = isinstance(check.params, ReadsChecks)
        if not reads:
            out.append(check)
            continue
        path = f"{paths[check.name]}.params"
        references: list[Reference] = []
        reader = typing.cast(ReadsChecks, check.params)
        for field, name in reader.referenced_checks():
            where = f"{path}.{field}"
            targets = [name] if name in by_name else groups.get(name)
            if targets is None:
                if name not in failed and name.partition("/")[0] not in failed:
                    hint = difflib.get_close_matches(name, [*by_name, *groups], n=1)
                    more = f"; did you mean {hint[0]!r}?" if hint else ""
                    errors.append(f"{where}: no check named {name!r}{more}")
                continue
            if check.name in targets:
                what = "is" if name == check.name else "includes"
                errors.append(
                    f"{where}: {name!r} {what} this check itself (a check cannot "
                    "read its own result)"
                )
                continue
            references.append(
                Reference(name, tuple(ReadableCheck(t, by_name[t].interval) for t in targets))
            )
            edges.setdefault(check.name, []).extend(targets)
        out.append(dataclasses.replace(check, reads=tuple(references)))
    for cycle in _cycles(edges):
        errors.append(
            f"{paths[cycle[0]]}.params: checks read each other's results in a cycle: "
            + " -> ".join(cycle)
            + " (no result could ever be fresh)"
        )
    return out


def _cycles(edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Each cycle of the reads graph once, as names with the first repeated at the end."""
    done: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start not in done:
            _visit(edges, start, [start], {start}, done, found)
    return found


def _visit(
    edges: Mapping[str, list[str]],
    node: str,
    stack: list[str],
    on_stack: set[str],
    done: set[str],
    found: list[list[str]],
) -> None:
    # A module function, not a closure: a nested function that calls itself is a reference
    # cycle, and the daemon's heap is frozen out of the collector's reach after a load.
    for nxt in edges.get(node, ()):
        if nxt in on_stack:
            found.append([*stack[stack.index(nxt) :], nxt])
        elif nxt not in done and nxt in edges:
            stack.append(nxt)
            on_stack.add(nxt)
            _visit(edges, nxt, stack, on_stack, done, found)
            on_stack.discard(stack.pop())
    done.add(node)


def _expand(
    spec: CheckSpec, probe_cls: type[Any], base_dir: Path, path: str, errors: list[str]
) -> Iterator[tuple[str, dict[str, str], dict[str, Any], str]]:
    if spec.targets is None and spec.targets_file is None:
        yield spec.name, {}, {}, path
        return
    if spec.targets_file is not None:
        targets = _read_targets_file(base_dir / spec.targets_file, f"{path}.targets_file", errors)
        where = f"{path}.targets_file"
    else:
        targets = list(spec.targets or [])
        where = f"{path}.targets"
    target_param = probe_cls.target_param
    for i, target in enumerate(targets):
        tpath = f"{where}[{i}]"
        if isinstance(target, str):
            if target_param is None:
                errors.append(f"{tpath}: probe type {spec.probe!r} takes no plain-string targets")
                continue
            # The target names the check (and so every label and log line): a URL's query
            # values and userinfo are masked there, while the probe still gets the full URL.
            yield f"{spec.name}/{mask_url_secrets(target)}", {}, {target_param: target}, tpath
        else:
            label = target.name or mask_url_secrets(
                str(target.params.get(target_param, i)) if target_param else str(i)
            )
            labels = {k: mask_url_secrets(v) for k, v in target.labels.items()}
            yield f"{spec.name}/{label}", labels, dict(target.params), tpath


def _read_targets_file(file: Path, path: str, errors: list[str]) -> list[str | TargetSpec]:
    try:
        text = read_text(file)
    except YamlFileError as exc:
        errors.append(f"{path}: {file}: {exc}")
        return []
    if file.suffix in {".yaml", ".yml", ".json"}:
        try:
            data = load_yaml(text, str(file)) or []
            if not isinstance(data, list):
                raise ValueError("must be a list")
            return [t if isinstance(t, str) else TargetSpec.model_validate(t) for t in data]
        except (YamlFileError, ValueError, ValidationError) as exc:
            errors.append(f"{path}: {file} is not a list of targets: {exc}")
            return []
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _label_owners(probe_cls: type[Any]) -> dict[str, str]:
    """Label name → the series of a check of this probe type that already carries it: the
    engine's own families and the probe's declared labelled observations (both from code)."""
    owners = engine_label_owners()
    for observable in probe_cls.observables or ():
        for name in observable.labels:
            owners.setdefault(name, f"{OBSERVATION_PREFIX}{observable.name}")
    return owners


def _check_type_limits(config: Config, reg: Registry, errors: list[str]) -> None:
    known = reg.names()
    for name in config.scheduler.per_probe_type:
        if name not in known:
            hint = difflib.get_close_matches(name, known, n=1)
            more = f"; did you mean {hint[0]!r}?" if hint else f" (known: {', '.join(known)})"
            errors.append(f"scheduler.per_probe_type.{name}: no probe type {name!r}{more}")


# -- error formatting --------------------------------------------------------------------------


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _loc_to_path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else _join(out, str(part))
    return out or "<root>"


def _format_errors(exc: ValidationError, model: type[BaseModel], prefix: str) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        path = _loc_to_path(prefix, loc)
        if err["type"] == "extra_forbidden":
            allowed = _fields_at(model, loc[:-1])
            hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
            message = "unknown field" + (f"; did you mean {hint[0]!r}?" if hint else "")
            if allowed and not hint:
                message += f" (allowed: {', '.join(sorted(allowed))})"
        else:
            message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {message}")
    return lines


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the union member's name in the loc (e.g. 'str', 'TargetSpec'); drop it.
    return isinstance(part, str) and (part[:1].isupper() or part in {"str", "int", "float"})


def _fields_at(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model reached by following ``loc`` from ``model`` (best effort)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            current = field.annotation if field else None
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            tp = models[0] if models else members[0]
        else:
            return tp
