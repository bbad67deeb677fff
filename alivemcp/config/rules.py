"""The rules that make a check, one function each, shared by the checks written in the config
file (:mod:`alivemcp.config.resolve`) and the targets a discovery source lists
(:mod:`alivemcp.config.templates`): a discovered target becomes a check by exactly the rules a
hand-written one does.

Each rule appends ``path: message`` lines to ``errors`` and says whether the check may go on;
``where`` is the path of the field the message is about (``checks[3].interval``,
``discovery[0].template.labels.team``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from alivemcp.config.messages import format_errors
from alivemcp.config.registry import ProbeTypeError, Registry
from alivemcp.outcome import OBSERVATION_PREFIX, engine_label_owners
from alivemcp.probe import Probe, ProbeParams

__all__ = [
    "LABEL_NAME",
    "MIN_INTERVAL_SECONDS",
    "check_interval",
    "check_labels",
    "check_timeout",
    "claim_name",
    "find_probe_type",
    "label_owners",
    "label_problem",
    "pick_timeout",
    "validate_params",
]

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: Shortest check interval: below this a check is a busy loop, not a probe.
MIN_INTERVAL_SECONDS = 0.1

ProbeType = type[Probe[Any]]


def find_probe_type(reg: Registry, name: str, where: str, errors: list[str]) -> ProbeType | None:
    """Rule 1: the probe type exists (and its plugin loaded)."""
    try:
        return reg.get(name)
    except ProbeTypeError as exc:
        errors.append(f"{where}: {exc}")
        return None


def label_owners(probe_cls: type[Any]) -> dict[str, str]:
    """Label name → the series of a check of this probe type that already carries it: the
    engine's own families and the probe's declared labelled observations (both from code)."""
    owners = engine_label_owners()
    for observable in probe_cls.observables or ():
        for name in observable.labels:
            owners.setdefault(name, f"{OBSERVATION_PREFIX}{observable.name}")
    return owners


def label_problem(label: str, owners: Mapping[str, str]) -> str | None:
    """What is wrong with ``label`` as the name of a check's label, or None."""
    if not LABEL_NAME.match(label) or label.startswith("__"):
        return "not a usable Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
    if label in owners:
        return (
            f"{owners[label]} already carries a label {label!r} (this check's series would "
            "have it twice, and Prometheus rejects the whole scrape); rename it"
        )
    return None


def check_labels(
    labels: Iterable[str],
    owners: Mapping[str, str],
    errors: list[str],
    *,
    where: str,
    own: Collection[str] | None = None,
    inherited_where: str = "defaults.labels",
) -> bool:
    """Rule 2: every label name is usable and not one the check's series carry already.
    A label's path is ``<where>.<label>``, or ``<inherited_where>.<label>`` when ``own`` is
    given and does not hold it (it came from the defaults)."""
    ok = True
    for label in labels:
        problem = label_problem(label, owners)
        if problem is not None:
            at = where if own is None or label in own else inherited_where
            errors.append(f"{at}.{label}: {problem}")
            ok = False
    return ok


def check_interval(interval: float, where: str, errors: list[str]) -> bool:
    """Rule 3: the interval is not shorter than :data:`MIN_INTERVAL_SECONDS`."""
    if interval < MIN_INTERVAL_SECONDS:
        errors.append(
            f"{where}: {interval:g}s is shorter than the shortest interval "
            f"allowed ({MIN_INTERVAL_SECONDS:g}s)"
        )
        return False
    return True


def pick_timeout(
    own: float | None, default: float | None, probe_cls: type[Any], interval: float
) -> float:
    """The check's timeout: its own, else the defaults', else the probe type's, else the
    smaller of 10 s and 80 % of the interval."""
    timeout = own or default or probe_cls.default_timeout
    if timeout is None:
        timeout = min(10.0, interval * 0.8)
    return float(timeout)


def check_timeout(
    timeout: float, interval: float, where: str, origin: str, errors: list[str]
) -> bool:
    """Rule 4: the timeout is at most the interval (runs of one check never overlap).
    ``origin`` says where a timeout nobody set came from (`` (x's default timeout)``)."""
    if timeout > interval:
        errors.append(
            f"{where}: timeout {timeout:g}s{origin} is longer than the interval "
            f"{interval:g}s (runs of one check never overlap; raise the interval or set a "
            "shorter timeout)"
        )
        return False
    return True


def validate_params(
    probe_cls: type[Any],
    raw: Mapping[str, Any],
    where: str,
    errors: list[str],
    *,
    ignore: str | None = None,
) -> ProbeParams | None:
    """Rule 5: the params (with the target, when a target fills the target param) are valid
    for the probe type. ``ignore``: a field whose errors are not reported (a stand-in target
    filled in to check a template before any target is known)."""
    try:
        return probe_cls.Params.model_validate(raw)  # type: ignore[no-any-return]
    except ValidationError as exc:
        lines = format_errors(exc, probe_cls.Params, where)
        if ignore is not None:
            own = (f"{where}.{ignore}:", f"{where}.{ignore}.", f"{where}.{ignore}[")
            lines = [line for line in lines if not line.startswith(own)]
        errors.extend(lines)
        return None


def claim_name(name: str, where: str, seen: dict[str, str], errors: list[str]) -> bool:
    """Rule 6: no two checks share a name; ``seen`` maps the names taken to where."""
    if name in seen:
        errors.append(f"{where}.name: {name!r} is already used by {seen[name]}")
        return False
    seen[name] = where
    return True
