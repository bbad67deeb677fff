"""Local MCP servers for the tests, the demo and the benchmark, each in its own process.

* Official Python SDK (``mcp`` 2.x ``MCPServer``): stateful streamable HTTP answering with SSE,
  stateless streamable HTTP answering with JSON, the legacy HTTP+SSE transport, an
  OAuth-protected server (bearer tokens, with a client-credentials token endpoint beside it),
  and a resumable one (an event store: its ``poll`` tool closes the event stream before
  answering, as 2025-11-25 allows; its ``ping_client`` tool pings the client first).
* The same three transports from SDK 1.x (``FastMCP``), which cannot share a virtualenv with
  2.x: it lives in ``<repo>/.cache/mcp-sdk1`` (``python -m alivemcp.testbed.mcp_servers
  fetch-sdk1``).
* The npm reference server ``@modelcontextprotocol/server-everything`` (installed into
  ``<repo>/.cache/npm`` by ``python -m alivemcp.testbed.mcp_servers fetch-npm``).
* The "lab": one small aiohttp app whose paths are well-behaved and misbehaving MCP servers
  (hangs, 500s, HTML, bad JSON, errors, slowness, session expiry, counter-offers, truncated
  streams, oversized bodies, a 2026-07-28-only server, redirects, stream resumption, pings).
  It is also the fast server the benchmark uses, so the server is not the bottleneck. Tests
  can script it: ``POST /_script`` with the raw answers (any bytes) for some methods returns
  a path that answers with them (see :func:`script_lab`).

Every server binds 127.0.0.1 on a free port; :func:`start_server` waits until it accepts
connections and fails loudly (with the server's stderr) when it does not.

Command line::

    python -m alivemcp.testbed.mcp_servers fetch-npm
    python -m alivemcp.testbed.mcp_servers fetch-sdk1
    python -m alivemcp.testbed.mcp_servers serve sdk-stateful PORT [CERT_PEM]
    python -m alivemcp.testbed.mcp_servers serve lab PORT [CERT_PEM [CLIENT_CA_PEM]]
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LAB_PATHS",
    "NPM_PACKAGE",
    "SDK1_KINDS",
    "SDK_KINDS",
    "LocalCa",
    "ServerProcess",
    "ServerUnavailable",
    "fetch_npm",
    "fetch_sdk1",
    "free_port",
    "make_test_ca",
    "npm_server_entry",
    "script_lab",
    "self_signed_cert",
    "start_npm_server",
    "start_server",
]

REPO = Path(__file__).resolve().parents[2]
NPM_DIR = REPO / ".cache" / "npm"
NPM_PACKAGE = "@modelcontextprotocol/server-everything"

SERVER_NAME = "alivemcp-test"
SERVER_VERSION = "1.2.3"
#: Credentials the auth-protected SDK server accepts.
STATIC_TOKEN = "static-token-9f8e7d6c"
CLIENT_ID = "prober"
CLIENT_SECRET = "prober-secret-5a4b3c"

SDK_KINDS = ("sdk-stateful", "sdk-stateless-json", "sdk-legacy-sse", "sdk-auth", "sdk-resumable")
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
    "sdk1-stateful": "/mcp",
    "sdk1-stateless-json": "/mcp",
    "sdk1-legacy-sse": "/sse",
}


class ServerUnavailable(RuntimeError):
    """A local server could not be started (missing tool, crash, never listened)."""


@dataclass
class ServerProcess:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    path: str = ""
    scheme: str = "http"
    _stopped: bool = field(default=False, repr=False)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + self.path

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                # A stand-in with open streams may linger in a graceful shutdown; 2 s is plenty
                # for one that is going to exit, and nothing of value is lost by killing it.
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(proc: ServerProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", proc.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    log = proc.log_path.read_text(errors="replace")[-3000:] if proc.log_path.exists() else ""
    proc.stop()
    raise ServerUnavailable(
        f"{proc.name} did not listen on 127.0.0.1:{proc.port} within {timeout:g}s "
        f"(exit code {proc.process.returncode}); its output:\n{log}"
    )


def _spawn(
    name: str,
    argv: list[str],
    port: int,
    path: str,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> ServerProcess:
    log_fd, log_name = tempfile.mkstemp(prefix=f"alivemcp-{name}-", suffix=".log")
    try:
        process = subprocess.Popen(
            argv,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=REPO,
        )
    finally:
        os.close(log_fd)
    proc = ServerProcess(name, port, process, Path(log_name), path)
    _wait_listening(proc, timeout)
    return proc


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
        python = str(_sdk1_python())
        if not Path(python).exists():
            raise ServerUnavailable(
                "the SDK 1.x virtualenv is missing: run `python -m "
                "alivemcp.testbed.mcp_servers fetch-sdk1` (make deps does it)"
            )
    if tls_cert is not None and kind not in ("lab", *_SDK_TLS_KINDS):
        raise ValueError(f"{kind} has no TLS variant")
    port = free_port()
    argv = [python, "-m", "alivemcp.testbed.mcp_servers", "serve", kind, str(port)]
    if tls_cert is not None:
        argv.append(str(tls_cert))
        if client_ca is not None:
            argv.append(str(client_ca))
    proc = _spawn(kind, argv, port, SDK_PATHS.get(kind, ""), timeout=timeout)
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


def self_signed_cert(directory: Path, days: int) -> Path:
    """A certificate for 127.0.0.1 valid for ``days`` (certificate and key in one PEM)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ServerUnavailable("openssl is not installed (needed to make a test certificate)")
    pem = directory / f"lab-{days}d.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            str(days),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(pem.with_suffix(".key")),
            "-out",
            str(pem.with_suffix(".crt")),
        ],
        check=True,
        capture_output=True,
    )
    pem.write_bytes(pem.with_suffix(".crt").read_bytes() + pem.with_suffix(".key").read_bytes())
    return pem


@dataclass(frozen=True)
class LocalCa:
    """A throwaway certificate authority and a server certificate it signed."""

    #: The CA certificate (PEM): what a client verifies the server with.
    ca_file: Path
    #: The server's certificate and key in one PEM (for ``start_server(tls_cert=...)``).
    server_pem: Path


def make_test_ca(
    directory: Path,
    *,
    days: int = 30,
    name: str = "alivemcp-test-ca",
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> LocalCa:
    """A new CA (ECDSA P-256) and a server certificate for ``hosts`` (IP addresses and DNS
    names) signed by it, valid for ``days``, written under ``directory``. Nothing is trusted
    anywhere: a client trusts it only by being given ``ca_file``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days + 1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_file = directory / f"{name}.crt"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    server_pem = directory / f"{name}-server.pem"
    server_pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return LocalCa(ca_file, server_pem)


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
    return _spawn(
        f"npm-{transport}",
        [node, str(entry), transport],
        port,
        path,
        env={"PORT": str(port)},
        timeout=timeout,
    )


# -- SDK 1.x in its own virtualenv --------------------------------------------------------------


def _sdk1_python() -> Path:
    return SDK1_VENV / "bin" / "python"


def fetch_sdk1() -> Path:
    """Create ``.cache/mcp-sdk1`` with SDK 1.x (does nothing when it is already there)."""
    python = _sdk1_python()
    check = [str(python), "-c", "import mcp.server.fastmcp"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(SDK1_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", SDK1_REQUIREMENT], check=True)
    return python


def _serve_sdk1(kind: str, port: int) -> None:
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


#: The ``retry`` (milliseconds) the resumable servers ask clients to wait before resuming.
RESUME_RETRY_MS = 100


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


#: SDK servers that can speak HTTPS (``start_server(tls_cert=...)``).
_SDK_TLS_KINDS = ("sdk-stateful", "sdk-stateless-json")


def _serve_sdk(kind: str, port: int, cert: str | None = None) -> None:
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
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=port,
            stateless_http=kind == "sdk-stateless-json",
            json_response=kind == "sdk-stateless-json",
        )


# -- the lab: well-behaved and misbehaving MCP servers in one aiohttp app ----------------------

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
}

LAB_TOOLS = [
    {
        "name": "echo",
        "description": "Echo",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "add",
        "description": "Add",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        },
    },
]
MODERN = "2026-07-28"
KNOWN = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def _lab_app() -> Any:
    from aiohttp import web

    sessions: set[str] = set()
    expiry = {"next": True}
    #: Requests seen per (method, path): lets tests see what a client actually sent.
    seen: dict[str, int] = {}
    legacy_queues: dict[str, asyncio.Queue[bytes]] = {}
    legacy_pinging: set[str] = set()
    background: set[asyncio.Task[None]] = set()
    pongs: dict[str, asyncio.Event] = {}

    def result_for(message: dict[str, Any], *, version: str | None = None) -> dict[str, Any]:
        method = message.get("method")
        params = message.get("params") or {}
        if method == "initialize":
            offered = params.get("protocolVersion")
            result: Any = {
                "protocolVersion": version or (offered if offered in KNOWN else KNOWN[-1]),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "alivemcp-lab", "version": "0.9"},
            }
        elif method == "server/discover":
            result = {
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "alivemcp-lab-modern", "version": "2.0"},
            }
        elif method == "tools/list":
            result = {"tools": LAB_TOOLS}
        elif method == "tools/call":
            args = params.get("arguments") or {}
            if params.get("name") == "echo":
                result = {"content": [{"type": "text", "text": str(args.get("text", ""))}]}
            else:
                total = int(args.get("a", 0)) + int(args.get("b", 0))
                result = {
                    "content": [{"type": "text", "text": str(total)}],
                    "structuredContent": {"sum": total},
                }
        elif method == "ping":
            result = {}
        else:
            return {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "error": {"code": -32601, "message": "Method not found"},
            }
        return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}

    def json_reply(
        payload: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        return web.Response(
            body=json.dumps(payload).encode(),
            status=status,
            content_type="application/json",
            headers=headers,
        )

    async def read_message(request: web.Request) -> dict[str, Any] | None:
        try:
            message = json.loads(await request.read())
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    async def fast_json(request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            return web.Response(status=405)
        message = await read_message(request)
        if message is None:
            return json_reply(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
                400,
            )
        if "id" not in message:
            return web.Response(status=202)
        return json_reply(result_for(message))

    async def fast_sse(request: web.Request) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "DELETE":
            sessions.discard(session or "")
            return web.Response(status=200)
        message = await read_message(request)
        if message is None:
            return web.Response(status=400)
        headers: dict[str, str] = {}
        if message.get("method") == "initialize":
            session = secrets.token_hex(8)
            sessions.add(session)
            headers["Mcp-Session-Id"] = session
        elif session not in sessions:
            return web.Response(status=404)
        if "id" not in message:
            return web.Response(status=202)
        reply = json.dumps(result_for(message))
        body = (
            "id: 0\ndata: \n\n"
            'event: message\nid: 1\ndata: {"jsonrpc":"2.0","method":"notifications/message",'
            '"params":{"level":"info","data":"hello"}}\n\n'
            f"event: message\nid: 2\ndata: {reply}\n\n"
        )
        return web.Response(body=body.encode(), content_type="text/event-stream", headers=headers)

    async def hang(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await asyncio.sleep(3600)
        return response

    async def error500(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="internal error")

    async def html(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")

    async def badjson(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=b'{"jsonrpc": "2.0", "id": 1, "result": {',
            status=200,
            content_type="application/json",
        )

    async def initerror(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        return json_reply(
            {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "error": {"code": -32603, "message": "database unavailable"},
            }
        )

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.6)
        return await fast_json(request)

    async def delayed(request: web.Request) -> web.StreamResponse:
        try:
            milliseconds = int(request.match_info["ms"])
        except ValueError:
            return web.Response(status=404)
        if not 0 <= milliseconds <= 5000:
            return web.Response(status=404)
        await asyncio.sleep(milliseconds / 1000)
        return await (fast_sse if request.match_info["shape"] == "sse" else fast_json)(request)

    async def expire(request: web.Request) -> web.StreamResponse:
        # /expire answers a forgotten session with 404 (the spec), /expire400 with 400 (as the
        # npm reference server does).
        gone = 400 if request.path == "/expire400" else 404
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "DELETE":
            return web.Response(status=404 if session not in sessions else 200)
        message = await read_message(request) or {}
        if message.get("method") == "initialize":
            session = secrets.token_hex(8)
            sessions.add(session)
            return json_reply(result_for(message), headers={"Mcp-Session-Id": session})
        if session not in sessions:
            return web.Response(status=gone)
        if message.get("method") == "tools/list":
            # Every other tools/list finds its session expired: a client that initializes
            # again gets through on its second session.
            expiry["next"] = not expiry["next"]
            if not expiry["next"]:
                sessions.discard(session)
                return web.Response(status=gone, text="session not found")
        if "id" not in message:
            return web.Response(status=202)
        return json_reply(result_for(message))

    async def counteroffer(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        if "id" not in message:
            return web.Response(status=202)
        return json_reply(result_for(message, version="2099-01-01"))

    async def midclose(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'event: message\ndata: {"jsonrpc":"2.0","id":1,"res')
        assert request.transport is not None
        request.transport.close()
        return response

    async def huge(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        reply = result_for(message)
        reply["result"]["padding"] = "x" * (12 * 1024 * 1024)
        return json_reply(reply)

    async def badtools(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        if request.method == "DELETE" or "id" not in message:
            return web.Response(status=202)
        if message.get("method") == "tools/list":
            return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": "none"}})
        return json_reply(result_for(message))

    async def noinitialized(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        if request.method == "DELETE":
            return web.Response(status=204)
        if "id" not in message:
            return web.Response(status=500, text="boom")
        return json_reply(result_for(message))

    drift = {"extra": False}

    async def drifting(request: web.Request) -> web.StreamResponse:
        message = await read_message(request) or {}
        if request.method != "POST":
            return web.Response(status=405)
        if message.get("method") != "tools/list":
            return await _fast(message)
        drift["extra"] = not drift["extra"]
        tools = LAB_TOOLS + (
            [{"name": "deploy", "inputSchema": {"type": "object"}}] if drift["extra"] else []
        )
        return json_reply({"jsonrpc": "2.0", "id": message.get("id"), "result": {"tools": tools}})

    async def _fast(message: dict[str, Any]) -> web.StreamResponse:
        if "id" not in message:
            return web.Response(status=202)
        return json_reply(result_for(message))

    async def modern(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        message = await read_message(request) or {}
        version = request.headers.get("MCP-Protocol-Version")
        meta = (message.get("params") or {}).get("_meta") or {}
        if (
            version != MODERN
            or meta.get("io.modelcontextprotocol/protocolVersion") != MODERN
            or request.headers.get("Mcp-Method") != message.get("method")
        ):
            return json_reply(
                {
                    "jsonrpc": "2.0",
                    "id": message.get("id"),
                    "error": {
                        "code": -32022,
                        "message": "Unsupported protocol version",
                        "data": {"supported": [MODERN], "requested": version},
                    },
                },
                400,
            )
        if message.get("method") in ("initialize", "ping"):
            return json_reply(
                {
                    "jsonrpc": "2.0",
                    "id": message.get("id"),
                    "error": {"code": -32601, "message": "Method not found"},
                },
                404,
            )
        return json_reply(result_for(message))

    async def bearer(request: web.Request) -> web.StreamResponse:
        base = f"http://{request.host}"
        return web.Response(
            status=401,
            text="unauthorized",
            headers={
                "WWW-Authenticate": f'Bearer error="invalid_token", error_description="missing", '
                f'resource_metadata="{base}/.well-known/oauth-protected-resource"'
            },
        )

    async def legacy_stream(request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return web.Response(status=405)
        session = secrets.token_hex(8)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        legacy_queues[session] = queue
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        endpoint = (
            f"/legacy/messages?sid={session}"
            if request.path != "/legacy-foreign"
            else "http://192.0.2.1/collect"
        )  # /legacy-foreign: another host
        if request.path == "/legacy-ping":
            legacy_pinging.add(session)
        await response.write(f"event: endpoint\r\ndata: {endpoint}\r\n\r\n".encode())
        try:
            while True:
                await response.write(await queue.get())
        finally:
            legacy_queues.pop(session, None)

    async def legacy_post(request: web.Request) -> web.StreamResponse:
        sid = request.query.get("sid", "")
        queue = legacy_queues.get(sid)
        if queue is None:
            return web.Response(status=404)
        message = await read_message(request) or {}
        if "method" not in message and str(message.get("id")) in pongs:
            pongs[str(message.get("id"))].set()  # the client answered our ping
            seen["pong received"] = seen.get("pong received", 0) + 1
        elif "id" in message:
            payload = json.dumps(result_for(message))
            answer = f"event: message\r\ndata: {payload}\r\n\r\n".encode()
            if sid in legacy_pinging:
                task = asyncio.create_task(ping_then(queue, answer))
                background.add(task)
                task.add_done_callback(background.discard)
            else:
                queue.put_nowait(answer)
        return web.Response(status=202, text="Accepted")

    async def ping_then(queue: asyncio.Queue[bytes], answer: bytes) -> None:
        ping_id = "srv-ping-" + secrets.token_hex(4)
        pongs[ping_id] = asyncio.Event()
        ping = json.dumps({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
        queue.put_nowait(f"event: message\r\ndata: {ping}\r\n\r\n".encode())
        try:
            await asyncio.wait_for(pongs[ping_id].wait(), 5)
        except TimeoutError:
            return  # never answered: neither is the client
        finally:
            pongs.pop(ping_id, None)
        queue.put_nowait(answer)

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        key = f"{request.method} {request.path}"
        seen[key] = seen.get(key, 0) + 1
        response: web.StreamResponse = await handler(request)
        return response

    async def stats(request: web.Request) -> web.StreamResponse:
        return json_reply(seen)

    # -- redirects
    async def redirect(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/redir":
            location = "/redir/"
        elif path == "/redir-foreign":
            location = f"http://localhost:{request.url.port}/json"
        elif path == "/redir301":
            return web.Response(status=301, headers={"Location": "/json"})
        else:
            hop = int(request.match_info.get("hop", "0"))
            location = f"/redir-loop/{hop + 1}"
        return web.Response(status=307, headers={"Location": location})

    # -- 2025-11-25 resumption: each response stream ends early (twice) after an event id
    resumable: dict[str, dict[str, Any]] = {}

    def resume_problem(request: web.Request, state: dict[str, Any]) -> str | None:
        if "text/event-stream" not in request.headers.get("Accept", ""):
            return "Accept lacks text/event-stream"
        if request.headers.get("Mcp-Session-Id") != state["session"]:
            return "wrong or missing Mcp-Session-Id"
        if (
            state["method"] != "initialize"
            and request.headers.get("MCP-Protocol-Version") not in KNOWN
        ):
            return "missing MCP-Protocol-Version"
        if time.monotonic() - state["closed_at"] < RESUME_RETRY_MS / 1000 * 0.9:
            return "resumed before the retry delay"
        return None

    async def resume(request: web.Request) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "DELETE":
            sessions.discard(session or "")
            return web.Response(status=200)
        if request.method == "GET":
            stream, _, stage = request.headers.get("Last-Event-ID", "").rpartition("-")
            state = resumable.get(stream)
            if state is None or str(state["stage"]) != stage:
                return web.Response(status=404, text="unknown Last-Event-ID")
            problem = resume_problem(request, state)
            if problem is not None:
                seen[f"resume refused: {problem}"] = seen.get(f"resume refused: {problem}", 0) + 1
                return web.Response(status=429 if "retry" in problem else 400, text=problem)
            state["stage"] += 1
            state["closed_at"] = time.monotonic()
            if state["stage"] == 1:  # a notification, then the stream ends again
                body = (
                    f"id: {stream}-1\ndata: "
                    '{"jsonrpc":"2.0","method":'
                    '"notifications/message","params":{"level":"info","data":"working"}}'
                    "\n\n"
                )
            else:
                body = f"id: {stream}-2\ndata: {state['reply']}\n\n"
                resumable.pop(stream)
            return web.Response(body=body.encode(), content_type="text/event-stream")
        message = await read_message(request)
        if message is None:
            return web.Response(status=400)
        headers: dict[str, str] = {}
        if message.get("method") == "initialize":
            session = secrets.token_hex(8)
            sessions.add(session)
            headers["Mcp-Session-Id"] = session
        elif session not in sessions:
            return web.Response(status=404)
        if "id" not in message:
            return web.Response(status=202)
        stream = secrets.token_hex(6)
        resumable[stream] = {
            "session": session,
            "method": message.get("method"),
            "stage": 0,
            "reply": json.dumps(result_for(message)),
            "closed_at": time.monotonic(),
        }
        body = f"id: {stream}-0\nretry: {RESUME_RETRY_MS}\ndata: \n\n"
        return web.Response(body=body.encode(), content_type="text/event-stream", headers=headers)

    # -- the server pings the client before answering

    async def ping_first(request: web.Request) -> web.StreamResponse:
        session = request.headers.get("Mcp-Session-Id")
        if request.method == "DELETE":
            sessions.discard(session or "")
            return web.Response(status=200)
        message = await read_message(request)
        if message is None:
            return web.Response(status=400)
        if "method" not in message:  # the client's answer to our ping
            waiter = pongs.get(str(message.get("id")))
            if waiter is None or message.get("result") != {} or (session not in sessions):
                return web.Response(status=400, text="unexpected answer")
            waiter.set()
            return web.Response(status=202)
        headers: dict[str, str] = {}
        if message.get("method") == "initialize":
            session = secrets.token_hex(8)
            sessions.add(session)
            headers["Mcp-Session-Id"] = session
        elif session not in sessions:
            return web.Response(status=404)
        if "id" not in message:
            return web.Response(status=202)
        ping_id = "srv-ping-" + secrets.token_hex(4)
        pongs[ping_id] = asyncio.Event()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        ping = json.dumps({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
        await response.write(f"event: message\ndata: {ping}\n\n".encode())
        try:
            await asyncio.wait_for(pongs[ping_id].wait(), 5)
        except TimeoutError:
            return response  # no answer to our ping: end the stream without a response
        finally:
            pongs.pop(ping_id, None)
        seen["pong received"] = seen.get("pong received", 0) + 1
        reply = json.dumps(result_for(message))
        await response.write(f"event: message\ndata: {reply}\n\n".encode())
        return response

    # -- scripted answers (the hostile-server tests)
    scripts: dict[str, dict[str, Any]] = {}

    async def add_script(request: web.Request) -> web.StreamResponse:
        spec = json.loads(await request.read())
        token = secrets.token_hex(6)
        scripts[token] = {
            method: {
                "status": int(answer.get("status", 200)),
                "content_type": answer.get("content_type", "application/json"),
                "body": base64.b64decode(answer["body"]),
                "headers": answer.get("headers", {}),
            }
            for method, answer in spec.items()
        }
        legacy = "endpoint" in spec or any("legacy" in a for a in spec.values())
        return json_reply({"path": f"/scripted-legacy/{token}" if legacy else f"/scripted/{token}"})

    def scripted_answer(script: dict[str, Any], message: dict[str, Any]) -> bytes | None:
        answer = script.get(str(message.get("method")))
        if answer is None:
            return None
        body: bytes = answer["body"]
        return body.replace(b"{ID}", json.dumps(message.get("id")).encode())

    async def scripted(request: web.Request) -> web.StreamResponse:
        script = scripts.get(request.match_info["token"])
        if script is None:
            return web.Response(status=404)
        if request.method != "POST":
            return web.Response(status=405)
        message = await read_message(request) or {}
        body = scripted_answer(script, message)
        if body is None:
            return await _fast(message)
        answer = script[str(message.get("method"))]
        return web.Response(
            body=body,
            status=answer["status"],
            headers={"Content-Type": answer["content_type"], **answer["headers"]},
        )

    async def scripted_legacy(request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        script = scripts.get(token)
        if script is None or request.method != "GET":
            return web.Response(status=404 if script is None else 405)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        legacy_queues[token] = queue
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        endpoint = script.get("endpoint")
        await response.write(
            endpoint["body"]
            if endpoint
            else f"event: endpoint\ndata: /scripted-legacy/{token}/messages\n\n".encode()
        )
        try:
            while True:
                await response.write(await queue.get())
        finally:
            legacy_queues.pop(token, None)

    async def scripted_legacy_post(request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        queue, script = legacy_queues.get(token), scripts.get(token)
        if queue is None or script is None:
            return web.Response(status=404)
        message = await read_message(request) or {}
        if "id" in message and "method" in message:
            body = scripted_answer(script, message)
            if body is None:
                body = f"event: message\ndata: {json.dumps(result_for(message))}\n\n".encode()
            queue.put_nowait(body)
        return web.Response(status=202, text="Accepted")

    app = web.Application(client_max_size=1024 * 1024, middlewares=[count])
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_script", add_script)
    app.router.add_route("*", "/scripted/{token}", scripted)
    app.router.add_route("*", "/scripted-legacy/{token}", scripted_legacy)
    app.router.add_post("/scripted-legacy/{token}/messages", scripted_legacy_post)
    app.router.add_route("*", "/redir-loop/{hop}", redirect)
    app.router.add_route("*", "/delayed/{ms}/{shape:json|sse}", delayed)
    routes = {
        "/json": fast_json,
        "/sse": fast_sse,
        "/hang": hang,
        "/error500": error500,
        "/html": html,
        "/badjson": badjson,
        "/initerror": initerror,
        "/slow": slow,
        "/expire": expire,
        "/expire400": expire,
        "/counteroffer": counteroffer,
        "/midclose": midclose,
        "/huge": huge,
        "/badtools": badtools,
        "/noinitialized": noinitialized,
        "/modern": modern,
        "/bearer": bearer,
        "/legacy": legacy_stream,
        "/drift": drifting,
        "/legacy-foreign": legacy_stream,
        "/legacy-ping": legacy_stream,
        "/redir": redirect,
        "/redir/": fast_sse,
        "/redir-foreign": redirect,
        "/redir301": redirect,
        "/resume": resume,
        "/ping-first": ping_first,
    }
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    app.router.add_route("POST", "/legacy/messages", legacy_post)
    return app


def _serve_lab(port: int, cert: str | None = None, client_ca: str | None = None) -> None:
    import ssl

    from aiohttp import web

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass
    context = None
    if cert is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
    web.run_app(
        _lab_app(),
        host="127.0.0.1",
        port=port,
        print=None,
        access_log=None,
        handle_signals=True,
        ssl_context=context,
    )


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
            _serve_lab(port, *argv[3:])
        elif kind in SDK_KINDS:
            _serve_sdk(kind, port, *argv[3:4])
        elif kind in SDK1_KINDS:
            _serve_sdk1(kind, port)
        else:
            print(f"unknown server kind {kind!r}", file=sys.stderr)
            return 2
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
