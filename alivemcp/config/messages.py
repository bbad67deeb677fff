"""Validation errors as ``path: message`` lines that name the field as the YAML spells it."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

__all__ = ["format_errors", "join_path", "loc_to_path"]


def join_path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def loc_to_path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else join_path(out, str(part))
    return out or "<root>"


def format_errors(exc: ValidationError, model: type[BaseModel], prefix: str) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        path = loc_to_path(prefix, loc)
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
