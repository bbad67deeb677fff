"""Configuration: one YAML file, validated by pydantic, with errors that name the field.

Loading goes in stages so every error can carry a precise path:
1. YAML parse, then ``${VAR}`` / ``${VAR:-default}`` interpolation on string values.
2. The engine's own model (:class:`Config`), with checks' params still raw mappings.
3. Target expansion (``targets:`` / ``targets_file:``) into one check per target.
4. Each check's params validated by its probe type's ``Params`` model from the registry.
5. Each discovery source's template validated by the same rules (its targets come later).

The pieces: :mod:`.model` (the file's model), :mod:`.checks` (:class:`ResolvedCheck`),
:mod:`.rules` (the rules that make a check), :mod:`.resolve` (the hand-written checks),
:mod:`.templates` (discovery templates), :mod:`.messages` (errors that name the field).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from alivemcp.config.checks import (
    FINGERPRINT_BYTES,
    RELOAD_DIGEST_BYTES,
    DiscoveredOrigin,
    ResolvedCheck,
    SharedValues,
    sharing,
)
from alivemcp.config.messages import format_errors, join_path
from alivemcp.config.model import (
    CheckSpec,
    Config,
    Defaults,
    LoggingConfig,
    SchedulerConfig,
    ServerConfig,
    TargetSpec,
    split_listen,
)
from alivemcp.config.registry import Registry, registry
from alivemcp.config.resolve import check_type_limits, resolve_checks
from alivemcp.config.rules import MIN_INTERVAL_SECONDS
from alivemcp.config.secrets import ConfigSecrets
from alivemcp.config.templates import check_discovery
from alivemcp.config.yamlfile import YamlFileError, load_yaml, read_text
from alivemcp.durations import Duration, parse_duration
from alivemcp.hygiene.collector import collector_paused

__all__ = [
    "FINGERPRINT_BYTES",
    "MIN_INTERVAL_SECONDS",
    "RELOAD_DIGEST_BYTES",
    "CheckSpec",
    "Config",
    "ConfigError",
    "Defaults",
    "DiscoveredOrigin",
    "Duration",
    "LoadedConfig",
    "LoggingConfig",
    "ResolvedCheck",
    "SchedulerConfig",
    "ServerConfig",
    "SharedValues",
    "TargetSpec",
    "collector_paused",
    "load_config",
    "load_config_text",
    "parse_duration",
    "sharing",
    "split_listen",
]

_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


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
    checks = resolve_checks(config, specs, base_dir or Path.cwd(), reg, errors)
    # The check specs live on as the resolved checks: holding both cost about 1.1 kB a check
    # for the daemon's life (validated models, their dicts and lists).
    config.__dict__["checks"] = []
    del specs
    check_type_limits(config, reg, errors)
    plans = check_discovery(config, [c.name for c in checks], reg, errors)
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
    for plan in plans:  # a template's credentials (in its params or an override's)
        for params in plan.validated:
            secrets.add_model(params)
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
            errors.extend(format_errors(exc, Config, ""))
            return _partial_config(raw)
    try:
        config = Config.model_validate({k: v for k, v in raw.items() if k != "checks"})
    except ValidationError as exc:
        errors.extend(format_errors(exc, Config, ""))
        config = _partial_config({k: v for k, v in raw.items() if k != "checks"})[0]
    specs: list[tuple[int, CheckSpec]] = []
    for index, item in enumerate(raw_checks):
        try:
            specs.append((index, CheckSpec.model_validate(item)))
        except ValidationError as exc:
            errors.extend(format_errors(exc, CheckSpec, f"checks[{index}]"))
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
            k: _interpolate(v, env, join_path(path, str(k)), errors, secrets, missing)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _interpolate(v, env, f"{path}[{i}]", errors, secrets, missing)
            for i, v in enumerate(value)
        ]
    return value
