"""Whatever an MCP server sends, the verdict blames the server (``down``, or ``degraded`` for a
broken tools/list or tools/call), never the prober (``unknown``).

Each row is a raw answer (any bytes) the lab serves for one method; the other methods get the
lab's normal answers. ``{ID}`` in a body becomes the request's id.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from alivemcp.testbed.mcp_servers import ServerProcess, script_lab
from tests.support import run_check

JSON = "application/json"
SSE = "text/event-stream"
GOOD_INIT: dict[str, Any] = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "hostile", "version": "1"},
}
TOOL = {"name": "echo", "inputSchema": {"type": "object"}}


def response(
    result: Any = None, *, raw_result: str | None = None, raw_id: str = "{ID}", **changes: Any
) -> bytes:
    """A JSON-RPC response body; ``raw_result`` is pasted in verbatim (NaN, surrogates...)."""
    if raw_result is None:
        raw_result = json.dumps({**GOOD_INIT, **changes} if result is None else result)
    return f'{{"jsonrpc":"2.0","id":{raw_id},"result":{raw_result}}}'.encode()


def init_with(**fields: str) -> bytes:
    """An initialize response whose named fields hold the given raw JSON text."""
    parts = {key: json.dumps(value) for key, value in GOOD_INIT.items()}
    parts.update(fields)
    return response(raw_result="{" + ",".join(f'"{k}":{v}' for k, v in parts.items()) + "}")


def event(data: bytes | str, *, extra: str = "") -> bytes:
    text = data.decode() if isinstance(data, bytes) else data
    return f"{extra}event: message\ndata: {text}\n\n".encode()


def tools(page: Any) -> bytes:
    return response({"tools": page})


DEEP = 100_000

# name, method, content type, body, status, words the reason must contain
CASES: list[tuple[str, str, str, bytes, str, str]] = [
    (
        "protocolVersion-list",
        "initialize",
        JSON,
        response(protocolVersion=[]),
        "down",
        "initialize: protocolVersion is a list, not a string",
    ),
    (
        "protocolVersion-number",
        "initialize",
        JSON,
        response(protocolVersion=5),
        "down",
        "protocolVersion is a number",
    ),
    (
        "protocolVersion-null",
        "initialize",
        JSON,
        response(protocolVersion=None),
        "down",
        "protocolVersion is null",
    ),
    (
        "protocolVersion-100k",
        "initialize",
        JSON,
        response(protocolVersion="2025-" + "9" * 100_000),
        "down",
        "unknown protocol version",
    ),
    (
        "serverInfo-list",
        "initialize",
        JSON,
        response(serverInfo=["x"]),
        "down",
        "initialize: serverInfo is a list, not an object",
    ),
    (
        "serverInfo-name-number",
        "initialize",
        JSON,
        response(serverInfo={"name": 7}),
        "down",
        "serverInfo.name is a number, not a string",
    ),
    (
        "serverInfo-name-lone-surrogate",
        "initialize",
        JSON,
        init_with(serverInfo='{"name":"\\udc80","version":"1"}'),
        "down",
        "not valid Unicode (a lone surrogate",
    ),
    (
        "capabilities-list",
        "initialize",
        JSON,
        response(capabilities=[]),
        "down",
        "initialize: capabilities is a list, not an object",
    ),
    (
        "capabilities-tools-string",
        "initialize",
        JSON,
        response(capabilities={"tools": "yes"}),
        "down",
        "capabilities.tools is a string",
    ),
    (
        "result-null",
        "initialize",
        JSON,
        response(raw_result="null"),
        "down",
        "initialize: the result is null, not an object",
    ),
    (
        "result-list",
        "initialize",
        JSON,
        response(raw_result="[]"),
        "down",
        "the result is a list, not an object",
    ),
    (
        "no-result-no-error",
        "initialize",
        JSON,
        b'{"jsonrpc":"2.0","id":{ID}}',
        "down",
        "without method, result or error",
    ),
    ("id-list", "initialize", JSON, response(raw_id="[1]"), "down", "whose id is a list ([1])"),
    ("id-object", "initialize", JSON, response(raw_id="{}"), "down", "whose id is an object"),
    ("id-true", "initialize", JSON, response(raw_id="true"), "down", "whose id is a boolean"),
    (
        "id-huge",
        "initialize",
        JSON,
        response(raw_id="1" + "0" * 30),
        "down",
        "not a JSON-RPC response to request 1",
    ),
    (
        "id-5000-digits",
        "initialize",
        JSON,
        response(raw_id="1" * 5000),
        "down",
        "the response body is not valid JSON",
    ),
    ("nested-1e5", "initialize", JSON, b"[" * DEEP + b"]" * DEEP, "down", "JSON nested too deeply"),
    (
        "nested-1e5-in-result",
        "initialize",
        JSON,
        init_with(serverInfo='{"name":' + "[" * DEEP + "]" * DEEP + "}"),
        "down",
        "JSON nested too deeply",
    ),
    (
        "NaN",
        "initialize",
        JSON,
        init_with(protocolVersion="NaN"),
        "down",
        "NaN is not a JSON value",
    ),
    (
        "Infinity",
        "initialize",
        JSON,
        init_with(capabilities='{"tools":{"n":Infinity}}'),
        "down",
        "Infinity is not a JSON value",
    ),
    (
        "minus-Infinity",
        "initialize",
        JSON,
        init_with(protocolVersion="-Infinity"),
        "down",
        "-Infinity is not a JSON value",
    ),
    (
        "invalid-utf8",
        "initialize",
        JSON,
        init_with(serverInfo='{"name":"\xff\xfe"}').replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe"),
        "down",
        "the response body is not valid JSON",
    ),
    ("batch", "initialize", JSON, b"[" + response() + b"]", "down", "a JSON array (a batch)"),
    (
        "bare-string",
        "initialize",
        JSON,
        b'"hello"',
        "down",
        "the response body is a string, not a JSON-RPC message",
    ),
    (
        "error-list",
        "initialize",
        JSON,
        b'{"jsonrpc":"2.0","id":{ID},"error":[1]}',
        "down",
        "initialize returned JSON-RPC error that is a list, not an error object",
    ),
    (
        "error-odd-fields",
        "initialize",
        JSON,
        b'{"jsonrpc":"2.0","id":{ID},"error":{"code":{"a":1},"message":5}}',
        "down",
        "error (code is an object): (message is a number)",
    ),
    ("no-content-type", "initialize", "", response(), "down", "neither JSON nor an event stream"),
    # SSE answers
    (
        "sse-id-list",
        "initialize",
        SSE,
        event(response(raw_id="[1]")),
        "down",
        "an SSE event's data is a JSON-RPC response whose id is a list",
    ),
    (
        "sse-batch",
        "initialize",
        SSE,
        event(b"[" + response() + b"]"),
        "down",
        "a JSON array (a batch)",
    ),
    (
        "sse-NaN",
        "initialize",
        SSE,
        event(init_with(protocolVersion="NaN")),
        "down",
        "NaN is not a JSON value",
    ),
    (
        "sse-number",
        "initialize",
        SSE,
        event("42"),
        "down",
        "an SSE event's data is a number, not a JSON-RPC message",
    ),
    (
        "sse-request-with-list-id",
        "initialize",
        SSE,
        event('{"jsonrpc":"2.0","id":[1],"method":"ping"}') + event(response()),
        "down",
        "the server sent a request whose method is a string and id is a list",
    ),
    (
        "sse-ends-without-response",
        "initialize",
        SSE,
        event('{"jsonrpc":"2.0","method":"notifications/message"}'),
        "down",
        "the event stream ended without a response to request 1",
    ),
    (
        "sse-unsendable-event-id",
        "initialize",
        SSE,
        "id: caf\u00e9\ndata: \n\n".encode(),
        "down",
        "cannot be sent back as Last-Event-ID",
    ),
    (
        "sse-retry-a-minute",
        "initialize",
        SSE,
        b"id: 1\nretry: 60000\ndata: \n\n",
        "down",
        "the server asked to resume it after 60s, later than the request's timeout allows",
    ),
    # headers
    (
        "session-id-with-space",
        "initialize",
        JSON,
        response(),
        "down",
        "the Mcp-Session-Id header 'a b' is not visible ASCII",
    ),
    (
        "huge-auth-challenge",
        "initialize",
        "text/plain",
        b"no",
        "down",
        "authentication required: HTTP 401",
    ),
    # tools/list: degraded
    (
        "tools-object",
        "tools/list",
        JSON,
        tools({}),
        "degraded",
        "tools/list: the result has no list of named tools (tools is an object)",
    ),
    ("tool-not-object", "tools/list", JSON, tools([1]), "degraded", "(tool #0 is a number)"),
    (
        "tool-without-name",
        "tools/list",
        JSON,
        tools([{"inputSchema": {}}]),
        "degraded",
        "(tool #0 has a name that is null)",
    ),
    (
        "tool-name-number",
        "tools/list",
        JSON,
        tools([{"name": 5}]),
        "degraded",
        "(tool #0 has a name that is a number)",
    ),
    (
        "tool-names-twice",
        "tools/list",
        JSON,
        tools([TOOL, {"name": "echo", "inputSchema": {"type": "object", "required": ["x"]}}]),
        "degraded",
        "tools/list: tool 'echo' is listed twice",
    ),
    (
        "tool-schema-string",
        "tools/list",
        JSON,
        tools([{"name": "a", "inputSchema": "{}"}]),
        "degraded",
        "tool 'a' has an inputSchema that is a string",
    ),
    (
        "tools-cursor-object",
        "tools/list",
        JSON,
        response({"tools": [TOOL], "nextCursor": {}}),
        "degraded",
        "tools/list: nextCursor is an object, not a string",
    ),
    (
        "tools-cursor-loops",
        "tools/list",
        JSON,
        response({"tools": [], "nextCursor": "again"}),
        "degraded",
        "tools/list: nextCursor 'again' repeats",
    ),
    (
        "tools-result-null",
        "tools/list",
        JSON,
        response(raw_result="null"),
        "degraded",
        "tools/list: the result is null, not an object",
    ),
    (
        "tools-name-lone-surrogate",
        "tools/list",
        JSON,
        response(raw_result='{"tools":[{"name":"\\ud800x"}]}'),
        "degraded",
        "tools/list: not MCP: the response body holds a string that is not valid Unicode",
    ),
    (
        "tools-schema-nested-1e5",
        "tools/list",
        JSON,
        response(
            raw_result='{"tools":[{"name":"a","inputSchema":{"x":'
            + "[" * DEEP
            + "]" * DEEP
            + "}}]}"
        ),
        "degraded",
        "JSON nested too deeply",
    ),
    # tools/call (with a deep check configured): degraded
    (
        "call-content-object",
        "tools/call",
        JSON,
        response({"content": {}}),
        "degraded",
        "tools/call echo: content is an object, not a list",
    ),
    (
        "call-content-item-number",
        "tools/call",
        JSON,
        response({"content": [1]}),
        "degraded",
        "tools/call echo: content holds an item that is not an object",
    ),
    (
        "call-structuredContent-list",
        "tools/call",
        JSON,
        response({"content": [], "structuredContent": [1]}),
        "degraded",
        "tools/call echo: structuredContent is a list, not an object",
    ),
    (
        "call-isError-string",
        "tools/call",
        JSON,
        response({"content": [], "isError": "yes"}),
        "degraded",
        "tools/call echo: isError is a string, not a boolean",
    ),
]
EXTRA_HEADERS = {
    "session-id-with-space": {"Mcp-Session-Id": "a b"},
    "huge-auth-challenge": {
        "WWW-Authenticate": 'Bearer resource_metadata="' + "x" * 20_000 + '", error=[1]'
    },
}
STATUS = {"huge-auth-challenge": 401}

# Legacy HTTP+SSE: raw events on the GET stream.
LEGACY_CASES: list[tuple[str, str, bytes, str]] = [
    (
        "legacy-message-id-list",
        "initialize",
        event(response(raw_id="[1]")),
        "an SSE event's data is a JSON-RPC response whose id is a list ([1])",
    ),
    (
        "legacy-message-batch",
        "initialize",
        event(b"[" + response() + b"]"),
        "a JSON array (a batch)",
    ),
    (
        "legacy-message-NaN",
        "initialize",
        event(init_with(protocolVersion="NaN")),
        "NaN is not a JSON value",
    ),
    (
        "legacy-endpoint-bad-ipv6",
        "endpoint",
        b"event: endpoint\ndata: http://[::1\n\n",
        "the endpoint event is not a usable URL: 'http://[::1'",
    ),
    (
        "legacy-endpoint-space",
        "endpoint",
        b"event: endpoint\ndata: /m sg\n\n",
        "the endpoint event is not a usable URL",
    ),
    (
        "legacy-endpoint-not-ascii",
        "endpoint",
        "event: endpoint\ndata: /messages/\u4e00\n\n".encode(),
        "the endpoint event is not a usable URL",
    ),
    (
        "legacy-endpoint-other-scheme",
        "endpoint",
        b"event: endpoint\ndata: javascript:x\n\n",
        "the endpoint event names another origin",
    ),
    (
        "legacy-endpoint-bad-port",
        "endpoint",
        b"event: endpoint\ndata: http://127.0.0.1:99999/m\n\n",
        "the endpoint event is not a usable URL",
    ),
]


@pytest.mark.parametrize(
    ("name", "method", "ctype", "body", "status", "words"), CASES, ids=[c[0] for c in CASES]
)
async def test_hostile_answer_blames_the_server(
    lab: ServerProcess, name: str, method: str, ctype: str, body: bytes, status: str, words: str
) -> None:
    url = script_lab(
        lab,
        {
            method: {
                "body": body,
                "content_type": ctype,
                "status": STATUS.get(name, 200),
                "headers": EXTRA_HEADERS.get(name, {}),
            }
        },
    )
    params: dict[str, Any] = {"url": url, "request_timeout": 3}
    if method == "tools/call":
        params["call"] = {"name": "echo", "arguments": {"text": "x"}}
    result = await run_check("mcp_endpoint", params, timeout=8)
    assert (result.status, words in result.reason) == (status, True), result.reason
    assert "unexpected" not in result.reason  # each of these is named, not caught generically


@pytest.mark.parametrize(
    ("name", "method", "body", "words"), LEGACY_CASES, ids=[c[0] for c in LEGACY_CASES]
)
async def test_hostile_legacy_stream_blames_the_server(
    lab: ServerProcess, name: str, method: str, body: bytes, words: str
) -> None:
    url = script_lab(lab, {method: {"body": body, "legacy": True}})
    result = await run_check("mcp_endpoint", {"url": url, "request_timeout": 3}, timeout=8)
    assert (result.status, words in result.reason) == ("down", True), result.reason


async def test_an_unforeseen_surprise_is_down_and_logged(
    lab: ServerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The safety net: an exception nobody foresaw while reading the server's data is the
    server's fault (down, with the step), and its traceback is logged for the prober's owners
    in case it is a probe bug."""
    import probes.mcp.handshake as handshake

    def surprised(result: Any, phase: str) -> None:
        raise KeyError("tools")

    monkeypatch.setattr(handshake, "_check_capabilities", surprised)
    with caplog.at_level(logging.WARNING, logger="probes.mcp_endpoint"):
        result = await run_check("mcp_endpoint", {"url": lab.base + "/json"})
    assert result.status == "down"
    assert result.reason == (
        "server sent something unexpected during initialize: KeyError: 'tools'"
    )
    assert (result.details or {})["unexpected_error"].startswith("KeyError at test_mcp_hostile")
    (record,) = [r for r in caplog.records if "KeyError" in r.getMessage()]
    assert record.exc_info is not None and "probe bug" in record.getMessage()


async def test_a_legacy_reader_that_dies_fails_the_request_at_once(
    lab: ServerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The legacy stream's reader catches only what the server can cause (its transport's
    HttpError; its bytes become NotMcp where they are read). Anything else it dies of reaches
    the waiting request at once, not at its timeout, and goes through the probe's one safety
    net (logged with its traceback) like any other surprise."""
    import probes.mcp.wire as wire

    def broken(self: Any, data: str) -> None:
        raise KeyError("jsonrpc")

    monkeypatch.setattr(wire.LegacySseChannel, "_deliver", broken)
    url = script_lab(lab, {"initialize": {"body": event(response()), "legacy": True}})
    with caplog.at_level(logging.WARNING, logger="probes.mcp_endpoint"):
        result = await run_check("mcp_endpoint", {"url": url, "request_timeout": 6}, timeout=12)
    assert result.status == "down", result.reason
    assert result.reason == (
        "server sent something unexpected during initialize: KeyError: 'jsonrpc'"
    )
    assert result.duration_seconds < 3, result  # the reader's death, not the request timeout
    assert [r for r in caplog.records if "KeyError" in r.getMessage() and r.exc_info]
