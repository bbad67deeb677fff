"""The lab: well-behaved and misbehaving MCP servers, one path each, in one small aiohttp app.

It is also the fast server the benchmark uses, so the server is not the bottleneck. Tests can
script it: ``POST /_script`` with the raw answers for some methods returns a path that answers
with them (``alivemcp.testbed.mcp_servers.script_lab``). ``GET /_stats`` counts the requests
seen per method and path, so tests see what a client actually sent.

The modules, one per family of behaviour, each handler a top-level function:

* :mod:`.protocol`: the well-behaved answers (standard library only).
* :mod:`.state`: what the servers remember (sessions, streams, scripts) and the helpers that
  read a request and write a JSON answer.
* :mod:`.healthy`: correct servers, fast, slow, delayed or drifting (``/json``, ``/sse``...).
* :mod:`.hostile`: hangs, errors and garbage (``/hang``, ``/html``, ``/huge``...).
* :mod:`.gated`: what stands in a client's way: a bearer challenge, a 2026-07-28-only server,
  expiring sessions, redirects.
* :mod:`.legacy`: the legacy HTTP+SSE transport (``/legacy``...).
* :mod:`.streams`: 2025-11-25's stream features: resumption and server-to-client pings.
* :mod:`.scripted`: the scripted answers of the hostile-server tests.
* :mod:`.surface`: servers whose tools, instructions, prompts and resources are the point
  (reordered, re-paged, changing on demand or after a while, flooding); ``POST /_surface``
  makes one from a spec, ``PUT /_surface/TOKEN`` changes it.
* :mod:`.app`: the route table, the request counter, and :func:`~.app.serve_lab`.

This module and :mod:`.protocol` import only the standard library (the SDK servers' module,
which runs without aiohttp, reads them); the others need aiohttp.
"""

from __future__ import annotations

from alivemcp.testbed.mcp_lab.protocol import RESUME_RETRY_MS

__all__ = ["LAB_PATHS"]

#: Path → what that server does (and the verdict the probe documents for it).
LAB_PATHS = {
    "/json": "stateless streamable HTTP answering in JSON (fast; benchmark target)",
    "/sse": "stateful streamable HTTP answering in SSE with LF, ids, a priming event and a "
    "notification before each response (fast; benchmark target)",
    "/hang": "sends headers, then never sends the body",
    "/error500": "answers every request with HTTP 500",
    "/html": "answers 200 text/html (a web page, not MCP)",
    "/badjson": "answers 200 application/json with a body that is not JSON",
    "/initerror": "answers initialize with a JSON-RPC error",
    "/slow": "a correct server that takes 0.6 s per request",
    "/delayed/MS/json": "/json answering each request after MS milliseconds (up to 5000; "
    "benchmark target for a server with latency)",
    "/delayed/MS/sse": "/sse answering each request after MS milliseconds (likewise)",
    "/expire": "stateful; every other tools/list finds its session expired (404)",
    "/expire400": "the same, answering 400 like the npm reference server",
    "/counteroffer": "counter-offers an unknown protocol version",
    "/midclose": "starts an SSE response and closes the connection before the response",
    "/huge": "answers initialize with a 12 MiB JSON body",
    "/badtools": "initialize fine, tools/list result is not a list",
    "/noinitialized": "initialize fine, notifications/initialized gets HTTP 500",
    "/modern": "a 2026-07-28-only server: -32022 to initialize, server/discover, tools/list",
    "/bearer": "401 with a Bearer challenge for every request",
    "/legacy": "legacy HTTP+SSE (GET stream with an endpoint event, POST replies on stream)",
    "/drift": "stateless JSON whose tools/list gains and loses a tool on alternate calls",
    "/legacy-foreign": "legacy HTTP+SSE whose endpoint event names another host",
    "/legacy-ping": "legacy HTTP+SSE that pings the client before each response and answers "
    "only after the client's answer",
    "/redir": "307 to /redir/, a stateful SSE server (a proxy adding the trailing slash)",
    "/redir-foreign": "307 to the same server under another host name (another origin)",
    "/redir301": "301 to /json (only 307/308 keep the method and body)",
    "/redir-loop/N": "307 to /redir-loop/N+1, forever",
    "/resume": "stateful SSE that ends every response stream after an event with an id and "
    f"retry: {RESUME_RETRY_MS} ms, twice, before the response; resumed with GET and "
    "Last-Event-ID (a GET sooner than the retry delay gets 429)",
    "/ping-first": "stateful SSE that pings the client on each response stream and answers "
    "only after the client's answer",
    "/surface/shuffle": "stateless JSON with instructions, six tools, three prompts and three "
    "resources, reordered, re-paged, re-indented and its numbers spelled differently (1, 1.0, "
    "1E0) on every call: the same surface every time",
    "/surface/rich": "stateless JSON with instructions, the two tools, three prompts (two per "
    "page) and two resources",
    "/surface/flood": "stateless JSON listing 10,000 tools in one page",
    "/surface/later/SECONDS": "stateless JSON whose echo tool's description turns into a "
    "poisoned one SECONDS after the path's first request",
    "/surface/custom/TOKEN": "the surface server of a spec posted to /_surface (changed with "
    "PUT /_surface/TOKEN)",
}
