"""The official MCP SDK's servers, as the tests and the benchmark run them.

* SDK 2.x (``MCPServer``): stateful streamable HTTP answering with SSE, stateless streamable
  HTTP answering with JSON, the legacy HTTP+SSE transport, an OAuth-protected server (bearer
  tokens, with a client-credentials token endpoint beside it), and a resumable one (an event
  store: its ``poll`` tool closes the event stream before answering, as 2025-11-25 allows; its
  ``ping_client`` tool pings the client first).
* SDK 2.x ``sdk-mutable``: stateful streamable HTTP with instructions, a prompt and a resource,
  whose tools change while it runs: ``POST /control/tool`` (see :func:`_add_surface_controls`).
* SDK 1.x (``FastMCP``) with the same three transports. It cannot share a virtualenv with 2.x:
  :func:`fetch_sdk1` makes ``<repo>/.cache/mcp-sdk1`` for it.

:func:`serve_sdk` and :func:`serve_sdk1` run in the server's own process (started by
``alivemcp.testbed.mcp_servers``). This module imports only the standard library at the top:
the SDK 1.x virtualenv has ``mcp`` 1.x and nothing else of ours.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from alivemcp.testbed.mcp_lab.protocol import RESUME_RETRY_MS
from alivemcp.testbed.mcp_process import REPO

__all__ = [
    "CLIENT_ID",
    "CLIENT_SECRET",
    "MUTABLE_INSTRUCTIONS",
    "SDK1_KINDS",
    "SDK1_SERVER_NAME",
    "SDK_KINDS",
    "SDK_PATHS",
    "SDK_TLS_KINDS",
    "SERVER_NAME",
    "SERVER_VERSION",
    "STATIC_TOKEN",
    "fetch_sdk1",
    "sdk1_python",
    "serve_sdk",
    "serve_sdk1",
]

SERVER_NAME = "alivemcp-test"
SERVER_VERSION = "1.2.3"
#: Credentials the auth-protected SDK server accepts.
STATIC_TOKEN = "static-token-9f8e7d6c"
CLIENT_ID = "prober"
CLIENT_SECRET = "prober-secret-5a4b3c"

SDK_KINDS = (
    "sdk-stateful",
    "sdk-stateless-json",
    "sdk-legacy-sse",
    "sdk-auth",
    "sdk-resumable",
    "sdk-mutable",
)
SDK1_KINDS = ("sdk1-stateful", "sdk1-stateless-json", "sdk1-legacy-sse")
SDK1_VENV = REPO / ".cache" / "mcp-sdk1"
SDK1_REQUIREMENT = "mcp>=1.30,<2"
SDK1_SERVER_NAME = "alivemcp-test-v1"
#: Path of the MCP endpoint for each SDK kind.
SDK_PATHS = {
    "sdk-stateful": "/mcp",
    "sdk-stateless-json": "/mcp",
    "sdk-legacy-sse": "/sse",
    "sdk-auth": "/mcp",
    "sdk-resumable": "/mcp",
    "sdk-mutable": "/mcp",
    "sdk1-stateful": "/mcp",
    "sdk1-stateless-json": "/mcp",
    "sdk1-legacy-sse": "/sse",
}

#: The instructions of the ``sdk-mutable`` server.
MUTABLE_INSTRUCTIONS = "Echo and add. Never call a tool the user did not ask for."

#: SDK servers that can speak HTTPS (``start_server(tls_cert=...)``).
SDK_TLS_KINDS = ("sdk-stateful", "sdk-stateless-json")


def _add_tools(server: Any) -> None:
    """The two tools every SDK test server offers (the same on SDK 1.x and 2.x)."""

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"sum": a + b}


# -- SDK 1.x in its own virtualenv --------------------------------------------------------------


def sdk1_python() -> Path:
    return SDK1_VENV / "bin" / "python"


def fetch_sdk1() -> Path:
    """Create ``.cache/mcp-sdk1`` with SDK 1.x (does nothing when it is already there)."""
    python = sdk1_python()
    check = [str(python), "-c", "import mcp.server.fastmcp"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(SDK1_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", SDK1_REQUIREMENT], check=True)
    return python


def serve_sdk1(kind: str, port: int) -> None:
    from mcp.server.fastmcp import (  # type: ignore[attr-defined]  # 1.x API, SDK 1.x venv
        FastMCP,
    )

    server = FastMCP(
        SDK1_SERVER_NAME,
        host="127.0.0.1",
        port=port,
        stateless_http=kind == "sdk1-stateless-json",
        json_response=kind == "sdk1-stateless-json",
    )

    _add_tools(server)

    server.run("sse" if kind == "sdk1-legacy-sse" else "streamable-http")


# -- official SDK servers (run in the child process) -------------------------------------------


def _sdk_server(kind: str, port: int) -> Any:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from pydantic import AnyHttpUrl

    issued: set[str] = set()
    counters = {"tokens_issued": 0}

    class Verifier:
        async def verify_token(self, token: str) -> AccessToken | None:
            if token == STATIC_TOKEN or token in issued:
                return AccessToken(token=token, client_id=CLIENT_ID, scopes=["mcp"])
            return None

    base = f"http://127.0.0.1:{port}"
    options: dict[str, Any] = {}
    if kind == "sdk-auth":
        options = {
            "token_verifier": Verifier(),
            "auth": AuthSettings(
                issuer_url=AnyHttpUrl(base),
                resource_server_url=AnyHttpUrl(f"{base}/mcp"),
                validate_token_resource=False,
            ),
        }
    if kind == "sdk-mutable":
        options = {"instructions": MUTABLE_INSTRUCTIONS}
    server = MCPServer(SERVER_NAME, version=SERVER_VERSION, **options)

    _add_tools(server)

    if kind == "sdk-auth":
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        @server.custom_route("/oauth/token", methods=["POST"])
        async def token(request: Request) -> JSONResponse:
            form = await request.form()
            if (
                form.get("grant_type") != "client_credentials"
                or form.get("client_id") != CLIENT_ID
                or form.get("client_secret") != CLIENT_SECRET
            ):
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            value = "cc-" + secrets.token_hex(12)
            issued.add(value)
            counters["tokens_issued"] += 1
            return JSONResponse({"access_token": value, "token_type": "Bearer", "expires_in": 3600})

        @server.custom_route("/oauth/broken", methods=["POST"])
        async def broken(request: Request) -> JSONResponse:
            return JSONResponse({"error": "server_error"}, status_code=500)

        @server.custom_route("/oauth/stats", methods=["GET"])
        async def stats(request: Request) -> JSONResponse:
            return JSONResponse(counters)

    return server


def _event_store() -> Any:
    """An in-memory event store for SDK 2.x: what makes its streams resumable."""
    from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

    class MemoryEventStore(EventStore):
        def __init__(self) -> None:
            self.events: list[tuple[str, str, Any]] = []  # (event id, stream id, message)

        async def store_event(self, stream_id: str, message: Any) -> str:
            event_id = str(len(self.events) + 1)
            self.events.append((event_id, stream_id, message))
            return event_id

        async def replay_events_after(
            self, last_event_id: str, send_callback: EventCallback
        ) -> str | None:
            ids = [event[0] for event in self.events]
            if last_event_id not in ids:
                return None
            stream_id = self.events[ids.index(last_event_id)][1]
            for event_id, stream, message in self.events[ids.index(last_event_id) + 1 :]:
                if stream == stream_id and message is not None:
                    await send_callback(EventMessage(message, event_id))
            return stream_id

    return MemoryEventStore()


def _add_resumable_tools(server: Any) -> None:
    """Tools that use 2025-11-25's stream features: closing the stream early, pinging."""
    import anyio
    from mcp.server.mcpserver import Context
    from mcp.shared.message import ServerMessageMetadata
    from mcp_types import EmptyResult, PingRequest

    async def poll(ctx: Context) -> str:
        """Close the event stream, then answer (the client must resume to get it)."""
        await ctx.close_sse_stream()
        await anyio.sleep(0.3)
        return "polled"

    async def ping_client(ctx: Context) -> str:
        """Ping the client on this request's stream; answer only once it answered."""
        with anyio.fail_after(5):
            await ctx.session.send_request(
                PingRequest(),
                EmptyResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        return "pong received"

    for tool in (poll, ping_client):
        # This module's annotations are strings (PEP 563) naming a local import: the SDK
        # finds the Context parameter by its type, so give it the real objects.
        tool.__annotations__ = {"ctx": Context, "return": str}
        server.tool()(tool)


def _add_surface_controls(server: Any) -> None:
    """``sdk-mutable``: a prompt, a resource, and ``POST /control/tool`` with
    ``{"name": ..., "description": ..., "destructive": bool}`` (the tool is added, or replaced
    by one with that description and a ``destructiveHint``) or ``{"name": ..., "remove":
    true}``: the tools change while the server runs, as in a rug pull."""
    from mcp_types import ToolAnnotations
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @server.prompt()
    def review(code: str) -> str:
        """Review a piece of code."""
        return f"Review this code:\n{code}"

    @server.resource("resource://notes", name="notes", description="The server's notes.")
    def notes() -> str:
        return "nothing yet"

    names = {"echo", "add"}  # what _add_tools registered

    @server.custom_route("/control/tool", methods=["POST"])
    async def control_tool(request: Request) -> JSONResponse:
        spec = await request.json()
        name = str(spec["name"])
        if name in names:
            server.remove_tool(name)
            names.discard(name)
        if not spec.get("remove"):

            def replacement(text: str) -> str:
                return text

            server.add_tool(
                replacement,
                name=name,
                description=str(spec.get("description", "")),
                annotations=ToolAnnotations(destructiveHint=bool(spec.get("destructive"))),
            )
            names.add(name)
        return JSONResponse({"tools": sorted(names)})


def serve_sdk(kind: str, port: int, cert: str | None = None) -> None:
    server = _sdk_server(kind, port)
    if cert is not None:
        # What MCPServer.run("streamable-http") does, with the certificate given to uvicorn.
        import uvicorn

        app = server.streamable_http_app(
            stateless_http=kind == "sdk-stateless-json",
            json_response=kind == "sdk-stateless-json",
            host="127.0.0.1",
        )
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ssl_certfile=cert,
            ssl_keyfile=cert,
        )
        asyncio.run(uvicorn.Server(config).serve())
    elif kind == "sdk-legacy-sse":
        server.run("sse", host="127.0.0.1", port=port)
    elif kind == "sdk-resumable":
        _add_resumable_tools(server)
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=port,
            event_store=_event_store(),
            retry_interval=RESUME_RETRY_MS,
        )
    elif kind == "sdk-mutable":
        _add_surface_controls(server)
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=port,
            stateless_http=kind == "sdk-stateless-json",
            json_response=kind == "sdk-stateless-json",
        )
