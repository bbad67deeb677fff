"""The server's surface: what it offers the models of its clients, collected for the tool-
surface watch (``tool_surface`` in the params) and handed over as the contract's
:class:`~alivemcp.probe.Surface`.

After tools/list and the optional tools/call, :func:`collect_rest` reads the server's
``instructions`` (from the initialize or server/discover result) and, only when the server
advertises them, every page of ``prompts/list`` and ``resources/list``, with the bounds
tools/list has (:data:`MAX_PAGES` pages, a repeated cursor is a loop). None of this touches the
verdict: a failure is a note, and the run then reports no surface at all (a partial one would
read as removals and page someone). :func:`tool_surface` builds the surface from what was
collected; it is where hostile data (nesting deeper than Python can walk) is caught.

The document of each item holds only the fields the server sent (null ones are left out):

* ``tool``, named by its name: ``name``, ``title``, ``description``, ``inputSchema``,
  ``outputSchema``, ``annotations``;
* ``instructions``, named ``instructions``: ``{"instructions": text}``;
* ``prompt``, named by its name: ``name``, ``title``, ``description``;
* ``resource``, named by its URI: ``uri``, ``name``, ``title``, ``description``.

This module also holds what every paged list of the handshake shares (:data:`MAX_PAGES`,
:func:`cursor_problem`, :func:`reply_result`): tools/list reads its pages with them too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alivemcp.probe import Surface, SurfaceMode, build_surface
from probes.mcp._jsonrpc import json_kind, rpc_error, short
from probes.mcp._model import (
    AuthRejected,
    Down,
    HandshakeFacts,
    HandshakeOptions,
    Send,
    SurfaceParts,
)
from probes.mcp._transport import Reply

__all__ = [
    "MAX_PAGES",
    "collect_rest",
    "cursor_problem",
    "reply_result",
    "tool_surface",
]

#: Pages of one list read per run (tools/list, prompts/list, resources/list).
MAX_PAGES = 20

_TOOL_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
_PROMPT_FIELDS = ("name", "title", "description")
_RESOURCE_FIELDS = ("uri", "name", "title", "description")
#: What a request for the surface may raise besides Down: a 401/403 when its session expired
#: and the new one was refused, and data of a shape nobody foresaw (as in ``mcp_endpoint``).
_FAILURES = (
    Down,
    AuthRejected,
    TypeError,
    LookupError,
    AttributeError,
    ValueError,
    RecursionError,
    ArithmeticError,
)


def cursor_problem(cursor: object, seen: set[str]) -> str | None:
    """What is wrong with a page's nextCursor (None: nothing; an empty one ends the list)."""
    if cursor is not None and not isinstance(cursor, str):
        return f"nextCursor is {json_kind(cursor)}, not a string"
    if cursor and cursor in seen:
        return f"nextCursor {short(cursor, 60)!r} repeats (pagination loops)"
    return None


def reply_result(reply: Reply, phase: str) -> dict[str, Any] | str:
    """The result object of ``reply``, or what is wrong with the reply."""
    if reply.status >= 300 or reply.message is None:
        return f"{phase}: HTTP {reply.status}" + (
            "" if reply.status >= 300 else " without a response"
        )
    if "error" in reply.message:
        return f"{phase}: JSON-RPC error {rpc_error(reply.message)}"
    result = reply.message.get("result")
    if not isinstance(result, dict):
        return f"{phase}: the result is {json_kind(result)}, not an object"
    return result


@dataclass(frozen=True, slots=True)
class _Listing:
    """One list of the surface: its method, the capability that announces it, the result's
    key holding the page, and the field that names each item."""

    method: str
    capability: str
    key: str
    ident: str


_PROMPTS = _Listing("prompts/list", "prompts", "prompts", "name")
_RESOURCES = _Listing("resources/list", "resources", "resources", "uri")


def _advertises(capabilities: object, name: str) -> bool:
    if not isinstance(capabilities, dict):
        return False
    value = capabilities.get(name)
    return isinstance(value, dict) or value is True


async def collect_rest(
    result: Mapping[str, Any], facts: HandshakeFacts, send: Send, options: HandshakeOptions
) -> None:
    """Everything of the surface but the tools, into ``facts.surface``; ``result`` is the
    initialize (or server/discover) result. A failed list is noted and leaves the surface
    marked incomplete (``missing``); the verdict is not touched."""
    parts = SurfaceParts()
    facts.surface = parts
    instructions = result.get("instructions")
    if isinstance(instructions, str):
        parts.instructions = instructions
    capabilities = result.get("capabilities")
    for listing, into in ((_PROMPTS, parts.prompts), (_RESOURCES, parts.resources)):
        if not _advertises(capabilities, listing.capability):
            continue
        if not options.collect_lists:
            parts.failed.add(listing.key)  # not read this run: the last lists stand in
            parts.skipped = True
            continue
        started = time.perf_counter()
        try:
            failure = await _read_all(listing, send, into)
        finally:
            parts.seconds += time.perf_counter() - started
        if failure is not None:
            into.clear()
            parts.failed.add(listing.key)
            parts.missing = parts.missing or failure
            facts.notes.append(f"{listing.method} failed: {failure}")


async def _read_all(listing: _Listing, send: Send, into: list[dict[str, Any]]) -> str | None:
    """Every page of ``listing`` into ``into``; returns what went wrong (None: nothing)."""
    method = listing.method
    idents: set[str] = set()
    cursors: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = {"cursor": cursor} if cursor else None
        try:
            reply = await send(method, params, method)
        except _FAILURES as exc:
            text = str(exc)
            if isinstance(exc, Down | AuthRejected):
                return text if text.startswith(method) else f"{method}: {text}"
            return f"{method}: the answer could not be read ({type(exc).__name__}: {short(text)})"
        result = reply_result(reply, method)
        if isinstance(result, str):
            return result
        cursor = result.get("nextCursor")
        problem = _page_problem(result.get(listing.key), listing, idents) or cursor_problem(
            cursor, cursors
        )
        if problem is not None:
            return f"{method}: {problem}"
        into.extend(result[listing.key])
        if not cursor:
            return None
        cursors.add(cursor)
    return f"{method}: more than {MAX_PAGES} pages"


def _page_problem(page: object, listing: _Listing, idents: set[str]) -> str | None:
    """What is wrong with one page (None: nothing); adds its items' names to ``idents``."""
    if not isinstance(page, list):
        return f"{listing.key} is {json_kind(page)}, not a list"
    for index, item in enumerate(page):
        if not isinstance(item, dict):
            return f"{listing.key} #{index} is {json_kind(item)}, not an object"
        ident = item.get(listing.ident)
        if not isinstance(ident, str):
            return f"{listing.key} #{index} has a {listing.ident} that is {json_kind(ident)}"
        if ident in idents:
            # Which of the two counts would depend on the order: not a surface to pin.
            return f"{listing.ident} {short(ident, 64)!r} is listed twice"
        idents.add(ident)
    return None


def _document(item: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {key: item[key] for key in fields if item.get(key) is not None}


def tool_surface(
    facts: HandshakeFacts, mode: SurfaceMode, carried: dict[str, list[dict[str, Any]]]
) -> Surface | str:
    """The run's surface, or why it has none: the tools could not be listed, a list failed
    or was cut short with nothing to carry over, or a document cannot be put in canonical form.

    ``carried``: the prompts and resources of the last run that read them whole. A list that
    fails this run is taken from there, so a server cannot hide a change of its tools by
    making prompts/list fail (a surface-less run alerts nobody), and a passing failure of
    prompts/list does not read as prompts removed. It updates ``carried`` after a whole run."""
    parts = facts.surface
    if parts is None:
        return "tools/list failed"
    if parts.missing is not None and not parts.failed:
        return parts.missing  # the tools themselves were cut short
    for key in parts.failed:
        if key not in carried:
            return parts.missing or f"{key} failed"
        getattr(parts, key).extend(carried[key])
    for key in ("prompts", "resources"):
        if key not in parts.failed:
            carried[key] = list(getattr(parts, key))
    items: list[tuple[str, str, Mapping[str, Any]]] = [
        ("tool", tool["name"], _document(tool, _TOOL_FIELDS)) for tool in facts.tools or []
    ]
    if parts.instructions is not None:
        items.append(("instructions", "instructions", {"instructions": parts.instructions}))
    items.extend(("prompt", p["name"], _document(p, _PROMPT_FIELDS)) for p in parts.prompts)
    items.extend(("resource", r["uri"], _document(r, _RESOURCE_FIELDS)) for r in parts.resources)
    try:
        return build_surface(items, mode)
    except (ValueError, TypeError, RecursionError) as exc:
        return f"the surface cannot be put in canonical form ({type(exc).__name__})"
