"""Render ``docs/reference.md`` from the code: the config models, every probe type's params,
observations and IAM needs, and the metrics alivemcp exports.

    python scripts/gen_reference.py            # rewrite docs/reference.md
    python scripts/gen_reference.py --check    # exit 1 if docs/reference.md is out of date

Nothing here is written by hand twice: field descriptions come from the pydantic models'
``Field(description=...)``, probe summaries and verdict rules from the probe classes, metric
help texts from the metric objects, observations from each probe class's ``observables``
declaration (``scripts/probe_observables.py``), IAM actions from ``deploy/iam/<probe>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import enum
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import generated_file
from probe_observables import REPO, builtin_entry_points, declared_observables, unit_of
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from alivemcp.probe import Observable

OUTPUT = REPO / "docs" / "reference.md"
IAM_DIR = REPO / "deploy" / "iam"

__all__ = ["builtin_entry_points", "main", "probe_observations", "render"]


# -- observations, from the probe classes' declarations ----------------------------------------


def probe_observations() -> dict[str, list[str]]:
    """Probe type -> sorted names of the observations it declares."""
    return {
        name: sorted(o.name for o in declared) for name, declared in declared_observables().items()
    }


def observations_table(declared: Sequence[Observable]) -> list[str]:
    """One row per declared observation: name, unit (its suffix), extra labels, meaning."""
    lines = ["| observation | unit | extra labels | meaning |", "|---|---|---|---|"]
    for o in declared:
        labels = ", ".join(f"`{label}`" for label in o.labels) or "none"
        lines.append(f"| `{o.name}` | {unit_of(o.name)} | {labels} | {_cell(o.help)} |")
    return [*lines, ""]


# -- type and default rendering ----------------------------------------------------------------


def _is_duration(metadata: Iterable[Any]) -> bool:
    """Durations are floats parsed by a before-validator (``30``, ``"30s"``, ``"5m"``)."""
    for item in metadata:
        name = getattr(getattr(item, "func", None), "__name__", "")
        if "duration" in name or "seconds" in name:
            return True
    return False


def type_text(tp: Any, metadata: Iterable[Any] = ()) -> str:
    """A reader's name for an annotation: ``duration``, ``list[string]``, ``"a" | "b"``..."""
    if tp is float and _is_duration(metadata):
        return "duration"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        inner, *meta = args
        return type_text(inner, meta)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        text = " | ".join(dict.fromkeys(parts))
        return text + (" | null" if type(None) in args else "")
    if origin is Literal:
        return " | ".join(json.dumps(getattr(a, "value", a)) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list[{type_text(args[0])}]" if args else "list"
    if origin is dict:
        return f"map[{type_text(args[0])}, {type_text(args[1])}]" if args else "map"
    if tp is SecretStr:
        return "secret string"
    if isinstance(tp, type):
        if issubclass(tp, BaseModel):
            return tp.__name__
        if issubclass(tp, enum.Enum):
            return " | ".join(json.dumps(m.value) for m in tp)
        simple = {
            str: "string",
            int: "integer",
            float: "number",
            bool: "boolean",
            Path: "path",
            dt.datetime: "datetime",
            dt.time: "time (HH:MM)",
        }
        if tp in simple:
            return simple[tp]
        return tp.__name__
    return str(tp).replace("typing.", "")


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    factory = field.default_factory
    value = factory() if factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return ""
    if isinstance(value, BaseModel):
        return "all defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, dt.time):
        value = value.strftime("%H:%M")
    try:
        return f"`{json.dumps(value)}`"
    except TypeError:
        return f"`{value!r}`"


def _rst_to_markdown(text: str) -> str:
    """Docstrings use RST literals (````x````); markdown wants single backticks."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r":(?:class|meth|func|attr):`~?([^`]+)`", r"`\1`", text)


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def nested_models(tp: Any) -> list[type[BaseModel]]:
    """Models reachable from an annotation (through unions, lists, maps)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    out: list[type[BaseModel]] = []
    if typing.get_origin(tp) is Annotated:
        return nested_models(typing.get_args(tp)[0])
    for arg in typing.get_args(tp):
        out += nested_models(arg)
    return out


def model_tables(
    model: type[BaseModel], title: str, level: int, seen: set[type], intro: str = ""
) -> list[str]:
    """A table of the model's fields, then one section per nested model not shown yet."""
    seen.add(model)
    lines = [f"{'#' * level} {title}", ""]
    if intro:
        lines += [intro, ""]
    doc = inspect.getdoc(model)
    if doc and doc != inspect.getdoc(BaseModel) and not doc.startswith("Base for every"):
        lines += [doc, ""]
    if not model.model_fields:
        return [*lines, "No fields.", ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    children: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        description = field.description or ""
        if not description:
            # A section without its own description: the first line of its model's docstring.
            models = nested_models(field.annotation)
            doc = inspect.getdoc(models[0]) if models else None
            if doc and doc != inspect.getdoc(BaseModel):
                description = doc.split("\n\n")[0]
        lines.append(
            f"| `{key}` | {_cell(type_text(field.annotation, field.metadata))} | "
            f"{_cell(default_text(field))} | {_cell(description)} |"
        )
        for child in nested_models(field.annotation):
            if child not in seen and child not in [c for _, c in children]:
                children.append((key, child))
    lines.append("")
    for key, child in children:
        if child in seen:
            continue
        lines += model_tables(child, f"`{key}`: {child.__name__}", min(level + 1, 6), seen)
    return lines


# -- sections ----------------------------------------------------------------------------------


def config_section() -> list[str]:
    from alivemcp.config import Config

    lines = [
        "## Configuration file",
        "",
        'One YAML file (`alivemcp run --config FILE`). Durations accept `30`, `"30s"`, '
        '`"5m"`, `"250ms"`, `"2h"`. Any string may use `${VAR}` or `${VAR:-default}` '
        "from the environment (a missing variable without a default is an error naming it); "
        "write `$$` for a literal `$`. Unknown keys are errors, with the closest valid key "
        "suggested; top-level keys starting with `x-` are ignored (a place for YAML anchors). "
        "`alivemcp probes --schema` prints the JSON schema of the whole file.",
        "",
    ]
    seen: set[type] = set()
    lines += model_tables(Config, "Top level", 3, seen)
    return lines


def _iam_actions(probe_type: str) -> list[str] | None:
    path = IAM_DIR / f"{probe_type}.json"
    if not path.exists():
        return None
    policy = json.loads(path.read_text(encoding="utf-8"))
    actions: list[str] = []
    for statement in policy.get("Statement", []):
        found = statement.get("Action", [])
        actions += [found] if isinstance(found, str) else found
    return sorted(dict.fromkeys(actions))


def probes_section() -> list[str]:
    from alivemcp.config.registry import registry
    from alivemcp.plumbing.aws import AwsSettings
    from alivemcp.plumbing.kafka import KafkaConnection

    reg = registry()
    lines = ["## Probe types", ""]
    builtins = builtin_entry_points()
    # Blocks many probe types embed are described once, at the end of this section.
    shared: list[tuple[type[BaseModel], str]] = [
        (AwsSettings, "the `aws:` block of every AWS probe (identity, region, endpoint)"),
        (KafkaConnection, "the `cluster:` block of every Kafka probe"),
    ]
    for name in builtins:
        lines += [f"### `{name}`", ""]
        try:
            cls = reg.get(name)
        except LookupError as exc:
            lines += [f"Not available in this build: {exc}", ""]
            continue
        if cls.summary:
            lines += [f"**{cls.summary.strip()}**", ""]
        # The probe module's docstring is where each probe explains what it catches and its
        # verdict rules; the class docstring, when it has its own, follows.
        for doc in (sys.modules[cls.__module__].__doc__, cls.__dict__.get("__doc__")):
            if doc:
                lines += [_rst_to_markdown(inspect.cleandoc(doc)), ""]
        facts = []
        if cls.target_param:
            facts.append(f"plain-string `targets:` fill `{cls.target_param}`")
        if cls.default_timeout:
            facts.append(f"default timeout {cls.default_timeout:g}s")
        if cls.max_concurrency:
            facts.append(f"at most {cls.max_concurrency} runs in flight")
        if facts:
            lines += ["Engine facts: " + "; ".join(facts) + ".", ""]
        if cls.observables:
            lines += [
                "Observations (gauges `alivemcp_probe_<observation>` with labels `check`, "
                "`probe`, the check's labels and the extra labels below):",
                "",
            ]
            lines += observations_table(cls.observables)
        actions = _iam_actions(name)
        if actions is None:
            lines += ["IAM: none (no AWS calls).", ""]
        else:
            lines += [
                f"IAM ([`deploy/iam/{name}.json`](../deploy/iam/{name}.json)): "
                + ", ".join(f"`{a}`" for a in actions)
                + ".",
                "",
            ]
        lines += model_tables(cls.Params, f"`{name}` params", 4, {m for m, _ in shared})
    lines += ["### Shared blocks", ""]
    for model, what in shared:
        others = {m for m, _ in shared if m is not model}
        lines += model_tables(model, model.__name__, 4, others, intro=f"Used as {what}.")
    return lines


def metrics_section() -> list[str]:
    from prometheus_client import CollectorRegistry

    from alivemcp.alerting.metrics import AlertingMetrics
    from alivemcp.app.instruments import ConfigMetrics
    from alivemcp.engine.instruments import SchedulerMetrics
    from alivemcp.engine.status import StatusStore
    from alivemcp.web.discovery import DiscoveryCollector
    from alivemcp.web.metrics import OBSERVATION_PREFIX, Metrics

    metrics = Metrics(StatusStore())
    AlertingMetrics(metrics.registry)
    SchedulerMetrics(metrics.registry)
    ConfigMetrics(metrics.registry)
    metrics.registry.register(DiscoveryCollector(list))
    check_text = b"".join(metrics.checks.render(False, metrics.checks.snapshot())).decode()
    rows: list[tuple[str, str, str, str]] = []
    for family, kind, doc in _families(check_text):
        labels = "`check`, `probe`, check labels"
        if family == "alivemcp_check_status":
            labels += ", `status`"
        if family == "alivemcp_check_runs_total":
            labels += ", `result`"
        if family == "alivemcp_check_location_status":
            labels = "`check`, `location`, `status`"
        rows.append((family, kind, labels, doc))
    registry: CollectorRegistry = metrics.registry
    # prometheus-client keeps label names on the metric objects only.
    for collector in list(registry._collector_to_names):
        describe = getattr(collector, "describe", None)
        for metric in (describe() if describe else None) or collector.collect():
            kind = metric.type
            family = metric.name
            if kind == "counter":
                family += "_total"
            if kind == "info":
                family += "_info"
                kind = "gauge"
            labelnames = getattr(collector, "_labelnames", ())
            if metric.type == "info":
                labelnames = ("version", "python")
            labels = ", ".join(f"`{n}`" for n in labelnames) or "none"
            rows.append((family, kind, labels, metric.documentation))
    lines = [
        "## Metrics",
        "",
        "Served at `/metrics` (Prometheus text, or OpenMetrics when asked for). Per-check "
        "families carry `check`, `probe` and every label configured on the check.",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for family, kind, labels, doc in sorted(rows):
        lines.append(f"| `{family}` | {kind} | {labels} | {_cell(doc)} |")
    lines += [
        "",
        f"Probe observations are gauges named `{OBSERVATION_PREFIX}<observation>` with the "
        "check's labels (labelled observations add their own labels). Per probe type:",
        "",
        "| probe type | observation gauges |",
        "|---|---|",
    ]
    for name, obs in probe_observations().items():
        lines.append(f"| `{name}` | " + ", ".join(f"`{OBSERVATION_PREFIX}{o}`" for o in obs) + " |")
    lines.append("")
    return lines


def _families(text: str) -> Iterable[tuple[str, str, str]]:
    helps: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            _, _, name, doc = line.split(" ", 3)
            helps[name] = doc
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            yield name, kind, helps.get(name, "")


def cli_section() -> list[str]:
    """``--help`` of the CLI and each command, as argparse prints it (at 100 columns)."""
    import os

    from alivemcp import cli

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = cli._parser()
        lines = ["## Command line", "", "```text", parser.format_help().rstrip(), "```", ""]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    lines += [
                        f"### `alivemcp {name}`",
                        "",
                        "```text",
                        sub.format_help().rstrip(),
                        "```",
                        "",
                    ]
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return lines


def http_api_section() -> list[str]:
    """The API reference is written by hand (docs/http-api.md): shapes and meanings are not
    in the code in a form worth scraping. Included whole, so the reference is one document."""
    text = (REPO / "docs" / "http-api.md").read_text(encoding="utf-8")
    return ["", *text.rstrip().splitlines(), ""]


def render() -> str:
    lines = [
        "# alivemcp reference",
        "",
        "<!-- Generated by scripts/gen_reference.py from the code; do not edit by hand. "
        "tests/ship/test_reference.py fails when it is out of date. -->",
        "",
        "- [Configuration file](#configuration-file)",
        "- [Probe types](#probe-types)",
        "- [Metrics](#metrics)",
        "- [Command line](#command-line)",
        "- [HTTP API and badges](#http-api-and-badges)",
        "",
    ]
    lines += config_section()
    lines += probes_section()
    lines += metrics_section()
    lines += cli_section()
    lines += http_api_section()
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    return generated_file.main(
        OUTPUT, render, "gen_reference.py", (__doc__ or "").split("\n\n")[0], argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
