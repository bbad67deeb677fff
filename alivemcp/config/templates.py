"""A discovery source's template, validated when the config loads and then used to make each
discovered target's check, by the rules of :mod:`alivemcp.config.rules` (probe type, labels,
interval, timeout, params with the target filled in): a discovered target becomes a
:class:`~alivemcp.config.checks.ResolvedCheck` exactly as a hand-written target would.

When the config loads no target is known yet, so the params are checked with a stand-in
target in the probe's target param, and only that field's own errors are set aside.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alivemcp.config.checks import DiscoveredOrigin, ResolvedCheck, SharedValues
from alivemcp.config.model import Config
from alivemcp.config.registry import Registry
from alivemcp.config.rules import (
    check_interval,
    check_labels,
    check_timeout,
    find_probe_type,
    label_owners,
    pick_timeout,
    validate_params,
)
from alivemcp.discovery.config import DiscoverySource
from alivemcp.probe import ProbeParams

__all__ = [
    "DISCOVERY_LABELS",
    "STAND_IN_TARGET",
    "TemplatePlan",
    "check_discovery",
    "plan_template",
]

#: Labels discovery sets itself on the checks it makes (``server``, ``version`` and ``remote``
#: on MCP registry entries only); neither a template nor a source's labels may set them.
DISCOVERY_LABELS = ("discovery", "server", "version", "remote")
#: The target a template's params are checked with before any target is known.
STAND_IN_TARGET = "https://discovery.invalid/"


@dataclass(frozen=True, slots=True)
class _Override:
    pattern: str
    params: Mapping[str, Any]
    labels: Mapping[str, str]


@dataclass(slots=True)
class TemplatePlan:
    """A source's validated template: everything a discovered target's check is made from."""

    source: str
    probe_type: str
    probe_cls: type[Any]
    target_param: str
    interval: float
    timeout: float
    #: The defaults' labels with the template's over them.
    labels: Mapping[str, str]
    params: Mapping[str, Any]
    overrides: tuple[_Override, ...]
    #: Label names the checks' series carry already (the engine's, the probe's, discovery's).
    owners: Mapping[str, str]
    #: The params the template and each override validated to (their secrets are registered).
    validated: tuple[ProbeParams, ...] = ()
    #: Runs at once against one host, for this source's checks (the scheduler enforces it).
    max_per_host: int | None = None
    #: Cluster mode: the template's ``locations`` and ``quorum`` (see ResolvedCheck).
    locations: tuple[str, ...] = ()
    quorum: int = 0
    shared: SharedValues = field(default_factory=SharedValues)

    def make_check(
        self,
        name: str,
        target: str,
        *,
        match: str,
        origin: DiscoveredOrigin,
        identity: Mapping[str, str],
        labels: Mapping[str, str] | None = None,
        extra_params: Mapping[str, Any] | None = None,
        errors: list[str],
    ) -> ResolvedCheck | None:
        """The check for one target, or None with the reasons in ``errors``.

        ``labels``: the source's own labels for the target (a service discovery group's),
        refused when their names are not usable or already taken; ``extra_params``: what the
        source knows of the target (``auth_gated_ok``...), for the params the probe type has;
        ``match``: what the overrides' ``server`` globs are matched against; ``identity``:
        discovery's own labels (``discovery``, and ``server``, ``version``, ``remote``)."""
        given = dict(labels or {})
        if not _usable_labels(given, self.owners, "labels", errors):
            return None
        params = dict(self.params)
        for key, value in (extra_params or {}).items():
            if key in self.probe_cls.Params.model_fields:
                params[key] = value
        merged = {**self.labels, **given}
        for override in self.overrides:
            if fnmatch.fnmatchcase(match, override.pattern):
                params.update(override.params)
                merged.update(override.labels)
        merged.update(identity)
        params[self.target_param] = target
        validated = validate_params(self.probe_cls, params, "params", errors)
        if validated is None:
            return None
        return ResolvedCheck(
            name=name,
            probe_type=self.shared.value(self.probe_type),
            interval=self.shared.value(self.interval),
            timeout=self.shared.value(self.timeout),
            labels=merged,
            params=validated,
            depends_on=(),
            alert=None,
            discovered=dataclasses.replace(origin, max_per_host=self.max_per_host),
            locations=self.locations,
            quorum=self.quorum,
        )


def plan_template(
    source: DiscoverySource, index: int, config: Config, reg: Registry, errors: list[str]
) -> TemplatePlan | None:
    """Validate ``discovery[index]``'s template by the rules of a hand-written check; its plan,
    or None with the errors added to ``errors``."""
    path = f"discovery[{index}].template"
    template = source.template
    before = len(errors)
    probe_cls = find_probe_type(reg, template.probe, f"{path}.probe", errors)
    if probe_cls is None:
        return None
    target_param = probe_cls.target_param
    if target_param is None:
        errors.append(
            f"{path}.probe: probe type {template.probe!r} takes no targets (each discovered "
            "target fills the probe's target param)"
        )
        return None
    owners = label_owners(probe_cls)
    for label in DISCOVERY_LABELS:
        if label in owners:
            errors.append(
                f"{path}.probe: {owners[label]} already carries a label {label!r}, which "
                "discovery sets on the checks it makes"
            )
    labels = {**config.defaults.labels, **template.labels}
    _usable_labels(labels, owners, f"{path}.labels", errors, own=template.labels)
    interval = template.interval or config.defaults.interval
    if not check_interval(
        interval, f"{path}.interval" if template.interval else "defaults.interval", errors
    ):
        return None
    timeout = pick_timeout(template.timeout, config.defaults.timeout, probe_cls, interval)
    where = f"{path}.timeout" if template.timeout else f"{path}.interval"
    origin = (
        ""
        if template.timeout or config.defaults.timeout
        else f" ({template.probe}'s default timeout)"
    )
    if not check_timeout(timeout, interval, where, origin, errors):
        return None
    validated = _check_params(probe_cls, target_param, path, template.params, {}, errors)
    overrides: list[_Override] = []
    for j, override in enumerate(template.overrides):
        opath = f"{path}.overrides[{j}]"
        _usable_labels(override.labels, owners, f"{opath}.labels", errors)
        if validated:  # (else the template's own errors would be repeated for each override)
            validated += _check_params(
                probe_cls, target_param, opath, template.params, override.params, errors
            )
        overrides.append(_Override(override.match.server, override.params, override.labels))
    if len(errors) > before:
        return None
    return TemplatePlan(
        source=source.name,
        probe_type=template.probe,
        probe_cls=probe_cls,
        target_param=target_param,
        interval=interval,
        timeout=timeout,
        labels=labels,
        params=template.params,
        overrides=tuple(overrides),
        owners=owners,
        validated=tuple(validated),
        max_per_host=source.max_per_host,
        locations=tuple(template.locations or ()),
        quorum=template.quorum or 0,
    )


def _check_params(
    probe_cls: type[Any],
    target_param: str,
    path: str,
    base: Mapping[str, Any],
    over: Mapping[str, Any],
    errors: list[str],
) -> list[ProbeParams]:
    """The template's params (``base``), or those with an override's (``over``) over them,
    validated with a stand-in target; [] when they are not valid."""
    if target_param in (over or base):
        errors.append(
            f"{path}.params.{target_param}: filled by each discovered target; remove it here"
        )
    raw = {**base, **over, target_param: STAND_IN_TARGET}
    params = validate_params(probe_cls, raw, f"{path}.params", errors, ignore=target_param)
    return [] if params is None or target_param in (over or base) else [params]


def _usable_labels(
    labels: Mapping[str, str],
    owners: Mapping[str, str],
    where: str,
    errors: list[str],
    *,
    own: Mapping[str, str] | None = None,
) -> bool:
    """The label rule of a hand-written check, and none of discovery's own labels."""
    ok = True
    for label in labels:
        if label in DISCOVERY_LABELS:
            at = where if own is None or label in own else "defaults.labels"
            errors.append(
                f"{at}.{label}: set by discovery on every check it makes "
                f"({', '.join(DISCOVERY_LABELS)}); choose another name"
            )
            ok = False
    rest = [label for label in labels if label not in DISCOVERY_LABELS]
    return check_labels(rest, owners, errors, where=where, own=own) and ok


def check_discovery(
    config: Config, check_names: Sequence[str], reg: Registry, errors: list[str]
) -> list[TemplatePlan]:
    """The ``discovery:`` section's rules beyond its model: unique source names, none a
    hand-written check's name or prefix (discovered checks are named ``<source>/...``), and
    every template valid. Returns the plans of the valid sources."""
    plans: list[TemplatePlan] = []
    seen: dict[str, int] = {}
    prefixes = {name.partition("/")[0]: name for name in check_names}
    for index, source in enumerate(config.discovery):
        if source.name in seen:
            errors.append(
                f"discovery[{index}].name: {source.name!r} is already used by "
                f"discovery[{seen[source.name]}]"
            )
        else:
            seen[source.name] = index
        clash = prefixes.get(source.name)
        if clash is not None:
            errors.append(
                f"discovery[{index}].name: {source.name!r} would name discovered checks "
                f"'{source.name}/...', and the check {clash!r} already uses that name; rename "
                "one of them"
            )
        plan = plan_template(source, index, config, reg, errors)
        if plan is not None:
            plans.append(plan)
    return plans
