"""JSON-RPC as MCP carries it: messages to bytes and back, strictly, and what a message is.

Everything here judges the server's bytes: a decoded answer that is not the JSON-RPC a request
gets raises :class:`NotMcp` with a sentence that names what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_SERVER_REQUESTS",
    "NotMcp",
    "answer_to_server",
    "encode",
    "is_request_id",
    "json_kind",
    "loads",
    "message_of",
    "response_id",
    "response_to",
    "rpc_error",
    "short",
]

#: Requests of its own a server may send on one response stream (``ping``) before answering.
MAX_SERVER_REQUESTS = 16


class NotMcp(Exception):
    """The server answered, but not with MCP (HTML, bad JSON, no matching response...)."""


def short(value: object, limit: int = 200) -> str:
    """``value`` as text, cut at ``limit`` characters (an ellipsis says it was cut)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def json_kind(value: object) -> str:
    """What a JSON value is, for a reason ("a list", "null"...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def is_request_id(value: object) -> bool:
    """A JSON-RPC id MCP allows: a string or a number (JSON true is not the number 1)."""
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


#: The C encoder ``json.dumps`` ends up in, built directly: ``json.dumps`` with separators
#: makes a new ``JSONEncoder`` and runs its Python set-up for every message (4 per probe run).
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def encode(message: Mapping[str, Any]) -> bytes:
    """``message`` as compact JSON (what ``json.dumps(message, separators=(",", ":"))``
    gives, circular references refused the same way)."""
    if _C_ENCODER is None:  # pragma: no cover - CPython always has the C accelerator
        return _COMPACT.encode(message).encode()
    chunks = _C_ENCODER(
        {},
        _COMPACT.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )(message, 0)
    return "".join(chunks).encode()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


#: A JSON ``\\uXXXX`` escape of a surrogate: only then can a decoded string hold a lone one.
#: (Most bodies have none; escaped emoji pairs do, and then the decoded value is walked, which
#: costs less than a regex that tells pairs from lone halves.)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
#: One decoder for every answer (``json.loads`` with a hook would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _lone_surrogate(value: Any) -> str | None:
    """The first string in ``value`` that is not valid Unicode (iterative: no recursion)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def loads(data: bytes | str, what: str) -> Any:
    """Strict JSON (RFC 8259 / I-JSON): no NaN or Infinity, valid UTF-8, no lone surrogates."""
    try:
        # Network JSON is UTF-8 (RFC 8259): no guessing of UTF-16 or UTF-32.
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise NotMcp(f"{what} is not valid JSON ({exc.msg} at char {exc.pos})") from exc
    except RecursionError as exc:
        raise NotMcp(f"{what} is JSON nested too deeply") from exc
    except ValueError as exc:  # bytes that are not UTF-8, NaN, an integer of 5,000 digits
        detail = "a number over 4300 digits" if "digits" in str(exc) else short(exc)
        raise NotMcp(f"{what} is not valid JSON ({detail})") from exc
    pattern = _SURROGATE_ESCAPE_BYTES if isinstance(data, bytes) else _SURROGATE_ESCAPE
    if pattern.search(data):  # type: ignore[arg-type]
        bad = _lone_surrogate(value)
        if bad is not None:
            shown = bad.encode("ascii", "backslashreplace").decode("ascii")
            raise NotMcp(
                f"{what} holds a string that is not valid Unicode (a lone surrogate: "
                f"{short(shown, 60)!r})"
            )
    return value


def message_of(payload: Any, what: str) -> dict[str, Any]:
    """A decoded JSON-RPC message; a batch or a bare value is not one."""
    if isinstance(payload, list):
        raise NotMcp(
            f"{what} is a JSON array (a batch), not the single response a single request gets"
        )
    if not isinstance(payload, dict):
        raise NotMcp(f"{what} is {json_kind(payload)}, not a JSON-RPC message")
    if "method" not in payload and "result" not in payload and "error" not in payload:
        raise NotMcp(f"{what} is an object without method, result or error: not JSON-RPC")
    return payload


def response_id(message: Mapping[str, Any], what: str) -> Any:
    """The id of a response (None when it has none); raises :class:`NotMcp` for an id MCP
    does not allow."""
    rid = message.get("id")
    if rid is not None and not is_request_id(rid):
        raise NotMcp(
            f"{what} is a JSON-RPC response whose id is {json_kind(rid)} "
            f"({short(json.dumps(rid), 60)}), not a string or number"
        )
    return rid


def response_to(message: dict[str, Any], request_id: int, what: str) -> dict[str, Any] | None:
    """``message`` when it is the response to ``request_id``; None for any other message."""
    if "method" in message:
        return None  # a request or notification from the server
    rid = response_id(message, what)
    if rid is None:
        # JSON-RPC: an error about a request the server could not identify (a parse error).
        return message if "error" in message else None
    return message if rid == request_id and not isinstance(rid, str) else None


def answer_to_server(request: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The method of a server-to-client request and the probe's answer to it: ``ping`` gets
    ``{}`` (the spec requires it), anything else "method not found" (the probe offers no
    client capabilities). Raises :class:`NotMcp` for a request that is not valid JSON-RPC."""
    method, rid = request.get("method"), request.get("id")
    if not isinstance(method, str) or not is_request_id(rid):
        raise NotMcp(
            f"the server sent a request whose method is {json_kind(method)} and "
            f"id is {json_kind(rid)}: not valid JSON-RPC"
        )
    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    if method == "ping":
        answer["result"] = {}
    else:
        answer["error"] = {"code": -32601, "message": f"Method not found: {method[:100]}"}
    return method, answer


def rpc_error(message: Mapping[str, Any]) -> str:
    """A JSON-RPC error response's code and message, for a reason."""
    error = message.get("error")
    if not isinstance(error, dict):
        return f"that is {json_kind(error)}, not an error object"
    code, text = error.get("code"), error.get("message")
    shown_code = (
        str(code)
        if isinstance(code, int) and not isinstance(code, bool)
        else (f"(code is {json_kind(code)})")
    )
    shown_text = short(text) if isinstance(text, str) else f"(message is {json_kind(text)})"
    return f"{shown_code}: {shown_text}"
