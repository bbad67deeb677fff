"""Real local servers for the HTTP client tests: a threaded HTTP/1.1 server (optionally TLS,
optionally requiring a client certificate) and a certificate authority to sign for it."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class Request:
    """What the server saw of one request."""

    def __init__(self, method: str, target: str, headers: dict[str, str]) -> None:
        self.method = method
        self.target = target
        self.headers = headers


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpServer.Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        seen = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        self.server.owner.requests.append(seen)
        custom = self.server.owner.respond
        if custom is not None:
            custom(self, seen)
            return
        body = json.dumps(
            {"ok": True, "path": self.path, "host": self.headers.get("Host")}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _any


def _linger(tls_socket: ssl.SSLSocket) -> None:
    """Close after the client did, as servers that linger on close do: closing with the
    client's request unread would send a reset, and some network stacks (gVisor's) then drop
    the TLS alert the client has not read yet."""
    raw = socket.socket(fileno=tls_socket.detach())
    try:
        raw.shutdown(socket.SHUT_WR)
        raw.settimeout(2)
        while raw.recv(65536):
            pass
    except OSError:
        pass
    finally:
        raw.close()


class HttpServer:
    """A real HTTP/1.1 server in a background thread on a loopback address.

    ``tls`` makes it HTTPS (the handshake runs in the connection's own thread);
    ``respond(handler, request)`` replaces the default JSON answer.
    """

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        owner: HttpServer

        def finish_request(self, request: Any, client_address: Any) -> None:
            tls = self.owner.tls
            if tls is not None:
                request = tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                try:
                    request.do_handshake()
                except (ssl.SSLError, OSError):
                    self.owner.handshake_failures += 1
                    _linger(request)
                    return
            super().finish_request(request, client_address)

    class Server6(Server):
        address_family = socket.AF_INET6

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: ssl.SSLContext | None = None,
        respond: Callable[[BaseHTTPRequestHandler, Request], None] | None = None,
    ) -> None:
        self.tls = tls
        self.respond = respond
        self.requests: list[Request] = []
        self.handshake_failures = 0
        cls = self.Server6 if ":" in host else self.Server
        self.server = cls((host, port), _Handler)
        self.server.owner = self
        self.host = host
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/mcp", host: str | None = None) -> str:
        host = host or self.host
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    def __enter__(self) -> HttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Authority:
    """A throw-away certificate authority writing PEM files into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alivemcp test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, name: str, *, hosts: tuple[str, ...] = (), client: bool = False
    ) -> tuple[Path, Path]:
        """A certificate (server for ``hosts``, or client) and its key: (cert_file, key_file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if hosts:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        usage = (
            x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
            if client
            else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = self.directory / f"{name}.crt"
        key_file = self.directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file

    def server_context(
        self,
        *,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        require_client_cert: bool = False,
    ) -> ssl.SSLContext:
        cert_file, key_file = self.issue("server", hosts=hosts)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca_file)
        return context
