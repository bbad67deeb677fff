"""Describing probe types and the config file: ``alivemcp probes [--schema]``."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from alivemcp.config import Config
from alivemcp.config.registry import registry

__all__ = ["config_json_schema", "describe_probe_types", "params_rows"]


def params_rows(model: type[BaseModel]) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) for each field of a params model."""
    rows = []
    for name, field in model.model_fields.items():
        annotation = type_name(field.annotation)
        if field.is_required():
            default = "required"
        else:
            value = (
                field.default_factory()  # type: ignore[call-arg]
                if field.default_factory is not None
                else field.default
            )
            if isinstance(value, BaseModel):
                default = f"{type(value).__name__}()"
            else:
                default = repr(getattr(value, "value", value))
        rows.append((name, annotation, default, field.description or ""))
    return rows


def type_name(annotation: Any) -> str:
    """``float | None``, ``list[str]``, ``KafkaConnection``: a type as a user reads it."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if annotation is type(None):
        return "None"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(map(type_name, args))}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def describe_probe_types() -> str:
    reg = registry()
    lines: list[str] = []
    for name in reg.names():
        cls = reg.get(name)
        lines.append(f"{name}: {cls.summary or cls.__doc__ or ''}".rstrip())
        if cls.target_param:
            lines.append(f"  targets fill: {cls.target_param}")
        for field, annotation, default, description in params_rows(cls.Params):
            lines.append(f"  {field} ({annotation}, {default}): {description}".rstrip(": "))
        lines.append("")
    for name, error in reg.broken().items():
        lines.append(f"{name}: FAILED TO LOAD: {error}")
    return "\n".join(lines).rstrip() + "\n"


def config_json_schema() -> dict[str, Any]:
    """The whole config's JSON schema, as the loader reads a file.

    Beyond pydantic's model schema: each check's ``params`` is tied to its probe type (with
    the target param optional when ``targets``/``targets_file`` fill it), top-level ``x-``
    keys hold YAML anchors, and any number or boolean may be written as a ``${VAR}``
    reference (interpolation happens before validation).
    """
    schema = Config.model_json_schema()
    defs = schema.setdefault("$defs", {})
    branches = []
    reg = registry()
    for name in reg.names():
        probe_cls = reg.get(name)
        params_schema = probe_cls.Params.model_json_schema(ref_template="#/$defs/{model}")
        for def_name, definition in params_schema.pop("$defs", {}).items():
            defs.setdefault(def_name, definition)
        def_name = f"params_{name}"
        defs[def_name] = params_schema
        is_probe = {"properties": {"probe": {"const": name}}, "required": ["probe"]}
        # A params model with required fields needs a `params:` mapping (absent means {}).
        full = {
            "properties": {"params": {"$ref": f"#/$defs/{def_name}"}},
            **({"required": ["params"]} if params_schema.get("required") else {}),
        }
        target = probe_cls.target_param
        if target is None or target not in params_schema.get("required", []):
            branches.append({"if": is_probe, "then": full})
            continue
        # With targets, each target fills the target param: the check's own params may omit it.
        targeted = {
            **params_schema,
            "required": [r for r in params_schema["required"] if r != target],
        }
        defs[f"{def_name}_targeted"] = targeted
        has_targets = {"anyOf": [{"required": ["targets"]}, {"required": ["targets_file"]}]}
        branches.append(
            {
                "if": is_probe,
                "then": {
                    "if": has_targets,
                    "then": {"properties": {"params": {"$ref": f"#/$defs/{def_name}_targeted"}}},
                    "else": full,
                },
            }
        )
    check = defs.get("CheckSpec")
    if check is not None:
        check["properties"]["probe"]["enum"] = reg.names()
        check["allOf"] = branches
    schema["patternProperties"] = {"^x-": {"description": "YAML anchors for reuse; ignored."}}
    _allow_env_references(schema)
    return schema


_ENV_REFERENCE = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"}


def _allow_env_references(node: Any) -> None:
    """Let every number, integer or boolean also be a ``${VAR}`` string, as the loader does."""
    if isinstance(node, list):
        for item in node:
            _allow_env_references(item)
        return
    if not isinstance(node, dict):
        return
    for value in node.values():
        _allow_env_references(value)
    kind = node.get("type")
    if kind in ("number", "integer", "boolean"):
        keep = {k: node.pop(k) for k in list(node) if k not in ("title", "description", "default")}
        node["anyOf"] = [keep, dict(_ENV_REFERENCE)]
