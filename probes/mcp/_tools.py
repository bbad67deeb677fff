"""What every era of the handshake does once the server is initialized: tools/list (every
page), the required tools, the optional tools/call with its expectation, and last, when the
check watches the tool surface, the rest of it (:mod:`probes.mcp._surface`).

These steps never make the server down: what goes wrong is recorded in
``HandshakeFacts.problems`` (the server is then degraded), and the step stops there; what goes
wrong while collecting the rest of the surface is only a note.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from probes.mcp._jsonrpc import json_kind, short
from probes.mcp._model import (
    Down,
    HandshakeFacts,
    HandshakeOptions,
    Send,
    SurfaceParts,
    ToolCallSpec,
    surface_hash,
)
from probes.mcp._surface import MAX_PAGES, collect_rest, cursor_problem, reply_result
from probes.mcp._transport import Reply

__all__ = ["Send", "after_initialize", "json_path"]


async def after_initialize(
    result: Mapping[str, Any], options: HandshakeOptions, facts: HandshakeFacts, send: Send
) -> None:
    """The steps after initialize (or server/discover), whose ``result`` says what the server
    advertises."""
    capabilities = result.get("capabilities")
    advertises = isinstance(capabilities, dict) and "tools" in capabilities
    wanted = options.list_tools and (
        advertises or bool(options.required_tools) or options.call is not None
    )
    facts.surface, facts.tools_cut_short = None, False
    if not advertises:
        facts.notes.append("the server advertises no tools capability")
    if wanted:
        await _list_tools(facts, send)
    if options.required_tools and facts.tools is not None:
        names = {t["name"] for t in facts.tools}
        missing = [n for n in options.required_tools if n not in names]
        if missing:
            facts.problems.append("required tool(s) missing: " + ", ".join(missing))
    if options.call is not None:
        await _call_tool(facts, send, options.call)
    if options.collect_surface and (facts.tools is not None or not wanted):
        # Last, so that a slow or failing prompts/list cannot eat the time of a step that
        # makes the verdict.
        if facts.tools_cut_short:
            facts.surface = SurfaceParts(missing=f"tools/list: more than {MAX_PAGES} pages")
        else:
            await collect_rest(result, facts, send, options)


async def _list_tools(facts: HandshakeFacts, send: Send) -> None:
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    cursors: set[str] = set()
    cursor: str | None = None
    elapsed = 0.0
    for _ in range(MAX_PAGES):
        params = {"cursor": cursor} if cursor else None
        try:
            reply = await send("tools/list", params, "tools/list")
        except Down as exc:
            facts.problems.append(str(exc))
            return
        elapsed += reply.seconds
        result = _result_of(reply, "tools/list", facts)
        if result is None:
            return
        cursor = result.get("nextCursor")
        problem = _page_problem(result.get("tools"), names) or cursor_problem(cursor, cursors)
        if problem is not None:
            facts.problems.append(f"tools/list: {problem}")
            return
        tools.extend(result["tools"])
        if not cursor:
            break
        cursors.add(cursor)
    else:
        facts.notes.append(f"tools/list: stopped after {MAX_PAGES} pages")
        facts.tools_cut_short = True
    try:
        digest = surface_hash(tools)
    except (ValueError, TypeError, RecursionError):
        facts.problems.append("tools/list: an inputSchema cannot be serialized (nested too deeply)")
        return
    facts.phases["tools_list"] = elapsed
    facts.tools = tools
    facts.tools_digest = digest


def _page_problem(page: object, names: set[str]) -> str | None:
    """What is wrong with one page of tools/list (None: nothing); adds its names to ``names``."""
    if not isinstance(page, list):
        return f"the result has no list of named tools (tools is {json_kind(page)})"
    for index, tool in enumerate(page):
        if not isinstance(tool, dict):
            return f"the result has no list of named tools (tool #{index} is {json_kind(tool)})"
        name = tool.get("name")
        if not isinstance(name, str):
            return (
                "the result has no list of named tools "
                f"(tool #{index} has a name that is {json_kind(name)})"
            )
        if name in names:
            return f"tool {short(name, 64)!r} is listed twice"
        names.add(name)
        schema = tool.get("inputSchema")
        if schema is not None and not isinstance(schema, dict):
            return f"tool {short(name, 64)!r} has an inputSchema that is {json_kind(schema)}"
    return None


def _result_of(reply: Reply, phase: str, facts: HandshakeFacts) -> dict[str, Any] | None:
    """The result object, or None after recording the problem."""
    result = reply_result(reply, phase)
    if isinstance(result, str):
        facts.problems.append(result)
        return None
    return result


async def _call_tool(facts: HandshakeFacts, send: Send, call: ToolCallSpec) -> None:
    phase = f"tools/call {call.name}"
    try:
        reply = await send("tools/call", {"name": call.name, "arguments": call.arguments}, phase)
    except Down as exc:
        facts.problems.append(str(exc))
        return
    facts.phases["tools_call"] = reply.seconds
    result = _result_of(reply, phase, facts)
    if result is None:
        return
    problem = _call_problem(result, call)
    if problem is not None:
        facts.problems.append(f"{phase}: {problem}")


def _call_problem(result: Mapping[str, Any], call: ToolCallSpec) -> str | None:
    """What is wrong with a tools/call result, the first thing found (None: nothing): its
    shape, a tool error, then the configured expectation."""
    content = result.get("content")
    if content is not None and not isinstance(content, list):
        return f"content is {json_kind(content)}, not a list"
    if not all(isinstance(c, dict) for c in content or []):
        return "content holds an item that is not an object"
    is_error = result.get("isError")
    if is_error is not None and not isinstance(is_error, bool):
        return f"isError is {json_kind(is_error)}, not a boolean"
    structured = result.get("structuredContent")
    if structured is not None and not isinstance(structured, dict):
        return f"structuredContent is {json_kind(structured)}, not an object"
    texts = [c["text"] for c in content or [] if isinstance(c.get("text"), str)]
    if is_error:
        return f"the tool reported an error: {short(' '.join(texts))}"
    if call.expect_contains is not None:
        haystack = "\n".join(texts)
        if "structuredContent" in result:
            try:
                haystack += "\n" + json.dumps(result["structuredContent"], default=str)
            except (ValueError, RecursionError):
                return "structuredContent cannot be serialized (nested too deeply)"
        if call.expect_contains not in haystack:
            return f"the result does not contain {call.expect_contains!r}"
    if call.expect_json_path is not None:
        found, value = json_path(result, call.expect_json_path)
        if not found:
            return f"{call.expect_json_path} is absent from the result"
        if call.has_expect_value and value != call.expect_value:
            return (
                f"{call.expect_json_path} is {_as_json(value)}, "
                f"expected {_as_json(call.expect_value)}"
            )
    return None


def _as_json(value: object) -> str:
    return short(json.dumps(value, default=str))


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def json_path(document: Any, path: str) -> tuple[bool, Any]:
    """Evaluate a dotted path with list indexes (``structuredContent.sum``,
    ``content[0].text``; a leading ``$.`` is allowed). Returns (found, value)."""
    path = path.removeprefix("$").removeprefix(".")
    value = document
    for match in _PATH_PART.finditer(path):
        key, index = match.group(1), match.group(2)
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        else:
            i = int(index)
            if not isinstance(value, list) or i >= len(value):
                return False, None
            value = value[i]
    return True, value
