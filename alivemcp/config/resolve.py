"""The checks written in the config file, resolved: targets expanded, each made by the rules
of :mod:`alivemcp.config.rules`, and the names a probe's params read resolved to checks."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from alivemcp.cluster.config import LOCATION_NAME
from alivemcp.config.checks import ResolvedCheck, SharedValues
from alivemcp.config.model import CheckSpec, Config, TargetSpec
from alivemcp.config.registry import Registry
from alivemcp.config.rules import (
    check_interval,
    check_labels,
    check_timeout,
    claim_name,
    find_probe_type,
    label_owners,
    pick_timeout,
    validate_params,
)
from alivemcp.config.secrets import mask_url_secrets
from alivemcp.config.yamlfile import YamlFileError, load_yaml, read_text
from alivemcp.resultsview import ReadableCheck, ReadsChecks, Reference

__all__ = ["check_type_limits", "resolve_checks"]


def resolve_checks(
    config: Config,
    specs: list[tuple[int, CheckSpec]],
    base_dir: Path,
    reg: Registry,
    errors: list[str],
) -> list[ResolvedCheck]:
    resolved: list[ResolvedCheck] = []
    shared = SharedValues()
    seen: dict[str, str] = {}
    owners_of: dict[type[Any], dict[str, str]] = {}  # per probe type, for this load
    # Base name of a multi-target check -> its checks' names, for references to the base name.
    groups: dict[str, list[str]] = {}
    # Names of checks (or multi-target bases) with an error of their own: a reference to them
    # is not reported again as "no check named".
    failed: set[str] = set()
    for index, spec in specs:
        path = f"checks[{index}]"
        errors_before = len(errors)
        probe_cls = find_probe_type(reg, spec.probe, f"{path}.probe", errors)
        if probe_cls is None:
            failed.add(spec.name)
            continue
        labels = {**config.defaults.labels, **spec.labels}
        owners = owners_of.get(probe_cls)
        if owners is None:
            owners = owners_of[probe_cls] = label_owners(probe_cls)
        check_labels(labels, owners, errors, where=f"{path}.labels", own=spec.labels)
        interval = spec.interval or config.defaults.interval
        where = f"{path}.interval" if spec.interval else "defaults.interval"
        if not check_interval(interval, where, errors):
            failed.add(spec.name)
            continue
        timeout = pick_timeout(spec.timeout, config.defaults.timeout, probe_cls, interval)
        where = f"{path}.timeout" if spec.timeout else f"{path}.interval"
        origin = (
            "" if spec.timeout or config.defaults.timeout else f" ({spec.probe}'s default timeout)"
        )
        if not check_timeout(timeout, interval, where, origin, errors):
            failed.add(spec.name)
            continue
        for name, target_labels, overrides, tpath in _expand(
            spec, probe_cls, base_dir, path, errors
        ):
            params = validate_params(
                probe_cls, {**spec.params, **overrides}, f"{tpath}.params", errors
            )
            if params is None or not claim_name(name, tpath, seen, errors):
                continue
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
                    locations=tuple(spec.locations or ()),
                    quorum=spec.quorum or 0,
                )
            )
        if len(errors) > errors_before:
            failed.add(spec.name)
    known = {c.name for c in resolved}
    if config.cluster is not None:
        _no_location_history_names(seen, errors)
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


def check_type_limits(config: Config, reg: Registry, errors: list[str]) -> None:
    known = reg.names()
    for name in config.scheduler.per_probe_type:
        if name not in known:
            hint = difflib.get_close_matches(name, known, n=1)
            more = f"; did you mean {hint[0]!r}?" if hint else f" (known: {', '.join(known)})"
            errors.append(f"scheduler.per_probe_type.{name}: no probe type {name!r}{more}")


def _no_location_history_names(seen: dict[str, str], errors: list[str]) -> None:
    """Cluster mode keeps a location's own results of check ``c`` in history as
    ``c@location``: no check may be named so, or both would share one history."""
    for name, where in seen.items():
        check, at, location = name.rpartition("@")
        if at and check in seen and LOCATION_NAME.fullmatch(location):
            errors.append(
                f"{where}.name: {name!r} is the name history keeps the results of check "
                f"{check!r} from location {location!r} under (cluster mode); rename it"
            )
