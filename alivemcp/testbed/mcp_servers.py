"""Local MCP servers for the tests, the demo and the benchmark, each in its own process.

* Official Python SDK (``mcp`` 2.x ``MCPServer``): stateful streamable HTTP answering with SSE,
  stateless streamable HTTP answering with JSON, the legacy HTTP+SSE transport, an
  OAuth-protected server (bearer tokens, with a client-credentials token endpoint beside it),
  and a resumable one (an event store: its ``poll`` tool closes the event stream before
  answering, as 2025-11-25 allows; its ``ping_client`` tool pings the client first).
* The same three transports from SDK 1.x (``FastMCP``), which cannot share a virtualenv with
  2.x: it lives in ``<repo>/.cache/mcp-sdk1`` (``python -m alivemcp.testbed.mcp_servers
  fetch-sdk1``). Both SDKs' servers: ``alivemcp.testbed.mcp_sdk``.
* The npm reference server ``@modelcontextprotocol/server-everything`` (installed into
  ``<repo>/.cache/npm`` by ``python -m alivemcp.testbed.mcp_servers fetch-npm``).
* The "lab": one small aiohttp app whose paths are well-behaved and misbehaving MCP servers
  (hangs, 500s, HTML, bad JSON, errors, slowness, session expiry, counter-offers, truncated
  streams, oversized bodies, a 2026-07-28-only server, redirects, stream resumption, pings).
  It is also the fast server the benchmark uses, so the server is not the bottleneck. Tests
  can script it: ``POST /_script`` with the raw answers (any bytes) for some methods returns
  a path that answers with them (see :func:`script_lab`), and make a server of a surface
  (tools, instructions, prompts, resources) they then change (:func:`surface_lab`,
  :func:`change_surface_lab`). Its code: ``alivemcp.testbed.mcp_lab``.
* ``sdk-mutable``: an SDK server whose tools change while it runs (:func:`change_sdk_tool`).

Every server binds 127.0.0.1 on a free port; :func:`start_server` waits until it accepts
connections and fails loudly (with the server's stderr) when it does not. Test certificates:
``alivemcp.testbed.mcp_certs``; the subprocess plumbing: ``alivemcp.testbed.mcp_process``.
This module is the front door (everything the tests import is here) and the servers' command
line; it imports only the standard library at the top, as the SDK 1.x virtualenv runs it too.

Command line::

    python -m alivemcp.testbed.mcp_servers fetch-npm
    python -m alivemcp.testbed.mcp_servers fetch-sdk1
    python -m alivemcp.testbed.mcp_servers serve sdk-stateful PORT [CERT_PEM]
    python -m alivemcp.testbed.mcp_servers serve lab PORT [CERT_PEM [CLIENT_CA_PEM]]
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from alivemcp.testbed.mcp_certs import LocalCa, make_test_ca, self_signed_cert
from alivemcp.testbed.mcp_lab import LAB_PATHS
from alivemcp.testbed.mcp_lab.protocol import KNOWN, LAB_TOOLS, MODERN, RESUME_RETRY_MS
from alivemcp.testbed.mcp_process import (
    REPO,
    ServerProcess,
    ServerUnavailable,
    free_port,
    spawn,
)
from alivemcp.testbed.mcp_sdk import (
    CLIENT_ID,
    CLIENT_SECRET,
    MUTABLE_INSTRUCTIONS,
    SDK1_KINDS,
    SDK1_REQUIREMENT,
    SDK1_SERVER_NAME,
    SDK1_VENV,
    SDK_KINDS,
    SDK_PATHS,
    SDK_TLS_KINDS,
    SERVER_NAME,
    SERVER_VERSION,
    STATIC_TOKEN,
    fetch_sdk1,
    sdk1_python,
    serve_sdk,
    serve_sdk1,
)

__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "KNOWN",
    "LAB_PATHS",
    "LAB_TOOLS",
    "MODERN",
    "MUTABLE_INSTRUCTIONS",
    "NPM_PACKAGE",
    "REPO",
    "RESUME_RETRY_MS",
    "SDK1_KINDS",
    "SDK1_REQUIREMENT",
    "SDK1_SERVER_NAME",
    "SDK1_VENV",
    "SDK_KINDS",
    "SDK_PATHS",
    "SERVER_NAME",
    "SERVER_VERSION",
    "STATIC_TOKEN",
    "LocalCa",
    "ServerProcess",
    "ServerUnavailable",
    "change_sdk_tool",
    "change_surface_lab",
    "fetch_npm",
    "fetch_sdk1",
    "free_port",
    "make_test_ca",
    "npm_server_entry",
    "script_lab",
    "self_signed_cert",
    "start_npm_server",
    "start_server",
    "surface_lab",
]

NPM_DIR = REPO / ".cache" / "npm"
NPM_PACKAGE = "@modelcontextprotocol/server-everything"


def start_server(
    kind: str, *, timeout: float = 30.0, tls_cert: Path | None = None, client_ca: Path | None = None
) -> ServerProcess:
    """Start an SDK server (one of :data:`SDK_KINDS`) or the ``lab`` in a subprocess.

    ``tls_cert``: a PEM file holding certificate and key; the server then speaks HTTPS (the
    lab, and the SDK's ``sdk-stateful`` and ``sdk-stateless-json``).
    ``client_ca`` (lab only, with ``tls_cert``): the lab then demands a client certificate
    signed by it (mutual TLS).
    """
    if kind not in (*SDK_KINDS, *SDK1_KINDS, "lab"):
        raise ValueError(f"unknown server kind {kind!r}")
    python = sys.executable
    if kind in SDK1_KINDS:
        python = str(sdk1_python())
        if not Path(python).exists():
            raise ServerUnavailable(
                "the SDK 1.x virtualenv is missing: run `python -m "
                "alivemcp.testbed.mcp_servers fetch-sdk1` (make deps does it)"
            )
    if tls_cert is not None and kind not in ("lab", *SDK_TLS_KINDS):
        raise ValueError(f"{kind} has no TLS variant")
    port = free_port()
    argv = [python, "-m", "alivemcp.testbed.mcp_servers", "serve", kind, str(port)]
    if tls_cert is not None:
        argv.append(str(tls_cert))
        if client_ca is not None:
            argv.append(str(client_ca))
    proc = spawn(kind, argv, port, SDK_PATHS.get(kind, ""), timeout=timeout)
    proc.scheme = "https" if tls_cert is not None else "http"
    return proc


def script_lab(lab: ServerProcess, answers: dict[str, dict[str, Any]]) -> str:
    """A lab URL that answers the given methods with exactly the given bytes.

    ``answers`` maps a method (or ``endpoint``, for a legacy stream's first event) to
    ``{"body": bytes, "content_type": ..., "status": ..., "headers": {...}}``; ``{ID}`` in a
    body becomes the request's id. Any answer marked ``"legacy": True`` (or an ``endpoint``)
    makes it a legacy HTTP+SSE server whose bodies are raw SSE events on the GET stream.
    Other methods get the lab's normal answers.
    """
    import urllib.request

    spec = {
        method: {
            **{k: v for k, v in answer.items() if k != "body"},
            "body": base64.b64encode(answer["body"]).decode(),
        }
        for method, answer in answers.items()
    }
    request = urllib.request.Request(
        lab.base + "/_script", data=json.dumps(spec).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return lab.base + str(json.loads(response.read())["path"])


def _send_json(url: str, payload: Any, method: str = "POST") -> Any:
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def surface_lab(lab: ServerProcess, spec: dict[str, Any]) -> str:
    """A lab URL serving the surface ``spec`` describes (see ``alivemcp.testbed.mcp_lab.surface``
    for its keys: instructions, tools, prompts, resources, paging, raw answers...)."""
    return lab.base + str(_send_json(lab.base + "/_surface", spec)["path"])


def change_surface_lab(url: str, spec: dict[str, Any]) -> None:
    """Give the surface server at ``url`` (from :func:`surface_lab`) a new spec."""
    base, _, token = url.rpartition("/surface/custom/")
    _send_json(f"{base}/_surface/{token}", spec, method="PUT")


def change_sdk_tool(server: ServerProcess, spec: dict[str, Any]) -> list[str]:
    """Change a tool of the running ``sdk-mutable`` server: ``{"name": ..., "description":
    ..., "destructive": bool}`` adds or replaces it, ``{"name": ..., "remove": true}``
    removes it. Returns the tool names it then has."""
    return list(_send_json(server.base + "/control/tool", spec)["tools"])


# -- npm reference server ----------------------------------------------------------------------


def npm_server_entry() -> Path:
    return (
        NPM_DIR
        / "node_modules"
        / "@modelcontextprotocol"
        / "server-everything"
        / "dist"
        / "index.js"
    )


def fetch_npm() -> Path:
    """Install the npm reference server into ``.cache/npm`` (does nothing when present)."""
    entry = npm_server_entry()
    if entry.exists():
        return entry
    npm = shutil.which("npm")
    if npm is None:
        raise ServerUnavailable("npm is not installed: install Node.js 20+ and npm")
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NPM_DIR), NPM_PACKAGE],
        check=True,
    )
    if not entry.exists():
        raise ServerUnavailable(f"npm install finished but {entry} is missing")
    return entry


def start_npm_server(transport: str = "streamableHttp", *, timeout: float = 30.0) -> ServerProcess:
    """Start the npm reference server (``streamableHttp`` or ``sse``)."""
    entry = npm_server_entry()
    if not entry.exists():
        raise ServerUnavailable(
            f"{NPM_PACKAGE} is not installed: run `python -m alivemcp.testbed.mcp_servers "
            "fetch-npm` (make deps does it)"
        )
    node = shutil.which("node")
    if node is None:
        raise ServerUnavailable("node is not installed: install Node.js 20+")
    port = free_port()
    path = "/mcp" if transport == "streamableHttp" else "/sse"
    return spawn(
        f"npm-{transport}",
        [node, str(entry), transport],
        port,
        path,
        env={"PORT": str(port)},
        timeout=timeout,
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["fetch-npm"]:
        print(fetch_npm())
        return 0
    if argv[:1] == ["fetch-sdk1"]:
        print(fetch_sdk1())
        return 0
    if len(argv) in (3, 4, 5) and argv[0] == "serve":
        kind, port = argv[1], int(argv[2])
        if kind == "lab":
            from alivemcp.testbed.mcp_lab.app import serve_lab

            serve_lab(port, *argv[3:])
        elif kind in SDK_KINDS:
            serve_sdk(kind, port, *argv[3:4])
        elif kind in SDK1_KINDS:
            serve_sdk1(kind, port)
        else:
            print(f"unknown server kind {kind!r}", file=sys.stderr)
            return 2
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
