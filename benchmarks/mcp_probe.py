"""Benchmark: CPU per full MCP probe, side by side with blackbox_exporter's single POST.

Probes a local fleet at fixed concurrency with a fresh connection per probe (as with
thousands of distinct hosts). Each target is a distinct URL (``?tN``), so the engine builds
one check per target exactly as a ``targets:`` list does, and every probe goes through the
daemon's real path (config validation, runner, shared plumbing).

Servers: the lab's fast stateless-JSON (``/json``) and stateful-SSE (``/sse``) endpoints (an
aiohttp app on uvloop, so the server is not the bottleneck) and the official Python SDK servers
(stateless JSON, stateful SSE; slower, fewer probes); each also over TLS (``--tls``, the
default): a throwaway CA made at run time signs the servers' certificate, and every client
verifies it against that CA (alivemcp through the check's ``tls.ca_file``, blackbox_exporter
through its ``tls_config.ca_file``, the floor client through its SSL context). ``--delays``
adds rows of the lab answering each request some milliseconds later (``/delayed/MS/...``):
the same server and answers, only slower.

Why the ratio rises with the server's latency: with a fast server the client's wake-ups come
back to back and its code runs on a warm CPU; with a slow one the client sleeps between
answers and every wake-up runs cold. Measured on a 2-core VM (schedstat CPU, one probe at a
time): the same full probe cost 0.41 ms against the lab at once and 1.78 ms with 50 ms per
request, the floor client 0.14 and 0.82 ms, with the same system calls and the same five
sleeps per probe. What grows is the price of each user-space instruction after a sleep, so a
client doing four exchanges of interpreted code (about 1.3 million instructions a probe under
callgrind, the floor about 0.2 million) loses more than one doing a single POST in Go.

Columns, per server, medians over ``--rounds``:
* alivemcp: client CPU ms per FULL probe (initialize, notifications/initialized, tools/list,
  DELETE when there is a session), measured with ``os.times()`` in a client subprocess that
  does nothing else (its long-lived objects frozen out of the collector's reach, as the
  daemon does); probes/s; p50/p99 probe latency; RSS per 1,000 targets.
* floor: the same round trips on a fresh connection by the smallest client that can do them
  (raw asyncio protocol, requests prebuilt, only what is needed to find each response's
  end): what the event loop, the kernel and (over TLS) OpenSSL cost by themselves.
* blackbox_exporter (Debian ``prometheus-blackbox-exporter``): ONE JSON-RPC POST (initialize)
  per probe via its ``/probe`` endpoint, CPU of the exporter process from ``/proc``.

Over TLS every target shares one host and port, so alivemcp resumes the TLS session of its
last full handshake (as it does for a fleet probed more often than every
``TLS_RESUME_SECONDS``); the ``TLS, full handshakes`` rows turn resumption off (what a
fleet probed less often costs). blackbox_exporter and the floor never resume.

Run::

    .venv/bin/python benchmarks/mcp_probe.py                # uvloop (default)
    .venv/bin/python benchmarks/mcp_probe.py --no-uvloop    # the stdlib event loop
    .venv/bin/python benchmarks/mcp_probe.py --only lab-json,lab-json-tls --rounds 5
    .venv/bin/python benchmarks/mcp_probe.py --delays 10,50 --only lab-sse,lab-sse-d10,lab-sse-d50
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from alivemcp.testbed import mcp_servers  # noqa: E402

BLACKBOX = shutil.which("prometheus-blackbox-exporter") or shutil.which("blackbox_exporter")
CLK_TCK = os.sysconf("SC_CLK_TCK")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "blackbox", "version": "0.23"},
    },
}


# -- the alivemcp client (runs in its own process) -------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def _client(
    url: str,
    probes: int,
    concurrency: int,
    targets: int,
    ca_file: str | None = None,
    resume: bool = True,
) -> dict[str, Any]:
    import yaml

    from alivemcp.app.daemon import settle_heap
    from alivemcp.config import load_config_text
    from alivemcp.engine.checks import build_handle
    from alivemcp.plumbing import Plumbing
    from alivemcp.plumbing.http import HttpClients

    plumbing = Plumbing()
    if not resume:
        plumbing._http = HttpClients(tls_resume_seconds=0)
    params = {"tls": {"ca_file": ca_file}} if ca_file else {}

    def build(count: int, tag: str) -> list[Any]:
        # A bare query key per target: check names mask query values, not keys.
        urls = [f"{url}?{tag}{i}" for i in range(count)]
        doc = {
            "checks": [
                {
                    "name": "bench",
                    "probe": "mcp_endpoint",
                    "interval": 60,
                    "timeout": 10,
                    "targets": urls,
                    "params": params,
                }
            ]
        }
        loaded = load_config_text(yaml.safe_dump(doc), env={})
        return [build_handle(check, plumbing) for check in loaded.checks]

    async def drive(
        handles: list[Any], count: int, latencies: list[float], statuses: dict[str, int]
    ) -> None:
        next_index = 0

        async def worker() -> None:
            nonlocal next_index
            while next_index < count:
                handle = handles[next_index % len(handles)]
                next_index += 1
                result = await handle.run()
                latencies.append(result.duration_seconds)
                statuses[result.status] = statuses.get(result.status, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    # Warm-up on a few targets (imports, code paths, allocator), then the memory baseline.
    warm = build(50, "w")
    await drive(warm, 200, [], {})
    gc.collect()
    rss_before = _rss_bytes()
    handles = build(targets, "t")
    # One round over every target gives each instance its state (remembered transport).
    await drive(handles, len(handles), [], {})
    settle_heap()  # what the daemon does once its checks are loaded
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    await drive(handles, probes, latencies, statuses)
    cpu, wall = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    gc.collect()
    rss_after = _rss_bytes()
    for handle in handles + warm:
        await handle.teardown()
    await plumbing.aclose()
    latencies.sort()
    return {
        "cpu_ms_per_probe": cpu / probes * 1000,
        "probes_per_s": probes / wall,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "rss_mb_per_1000_targets": (rss_after - rss_before) / targets * 1000 / 2**20,
        "statuses": statuses,
    }


def client_main(args: argparse.Namespace) -> None:
    if args.uvloop:
        import uvloop

        uvloop.install()
    if args.command == "_floor":
        result = asyncio.run(_floor(args.url, args.probes, args.concurrency, args.ca_file))
    else:
        result = asyncio.run(
            _client(
                args.url, args.probes, args.concurrency, args.targets, args.ca_file, args.resume
            )
        )
    print(json.dumps(result))


def run_client(
    url: str,
    probes: int,
    concurrency: int,
    targets: int,
    uvloop: bool,
    ca_file: str | None = None,
    resume: bool = True,
    command: str = "_client",
) -> dict[str, Any]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        command,
        "--url",
        url,
        "--probes",
        str(probes),
        "--concurrency",
        str(concurrency),
        "--targets",
        str(targets),
    ]
    if uvloop:
        argv.append("--uvloop")
    if ca_file:
        argv += ["--ca-file", ca_file]
    if not resume:
        argv.append("--no-resume")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the floor: the smallest client for the same round trips ---------------------------------

_FLOOR_BODIES = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "floor", "version": "0"},
            },
        }
    ).encode(),
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
    b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
)


class _FloorProtocol(asyncio.Protocol):
    """Collects one response at a time; wakes the caller only once it is complete
    (Content-Length reached, or the chunked body's last chunk seen)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.end = -1  # total length of head + body when known
        self.chunked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None and not self.waiter.done() and self._complete():
            self.waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))

    def _complete(self) -> bool:
        if self.end < 0 and not self.chunked:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return False
            head = bytes(self.buffer[:head_end]).lower()
            at = head.find(b"content-length:")
            if at < 0:
                self.chunked = True
            else:
                line_end = head.find(b"\r\n", at)
                self.end = head_end + 4 + int(head[at + 15 : line_end if line_end > 0 else None])
        if self.chunked:
            return self.buffer.endswith(b"\r\n0\r\n\r\n")
        return len(self.buffer) >= self.end

    async def exchange(self, request: bytes) -> bytes:
        self.buffer.clear()
        self.end, self.chunked = -1, False
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        await self.waiter
        return bytes(self.buffer)


async def _floor_probe(host: str, port: int, path: str, context: ssl.SSLContext | None) -> None:
    loop = asyncio.get_running_loop()
    transport, conn = await loop.create_connection(
        _FloorProtocol, host, port, ssl=context, server_hostname=host if context else None
    )
    try:
        common = (
            f"Host: {host}:{port}\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Type: application/json\r\n"
        )
        initialize, initialized, tools_list = _FLOOR_BODIES
        answer = await conn.exchange(
            f"POST {path} HTTP/1.1\r\n{common}Content-Length: {len(initialize)}\r\n\r\n".encode()
            + initialize
        )
        head = answer[: answer.find(b"\r\n\r\n")].lower()
        session = b""
        at = head.find(b"mcp-session-id:")
        if at >= 0:
            line_end = head.find(b"\r\n", at)
            session = (
                b"Mcp-Session-Id: "
                + head[at + 15 : line_end if line_end > 0 else None].strip()
                + b"\r\nMCP-Protocol-Version: 2025-11-25\r\n"
            )
        session_text = session.decode()
        for body in (initialized, tools_list):
            answer = await conn.exchange(
                f"POST {path} HTTP/1.1\r\n{common}{session_text}Content-Length: {len(body)}"
                "\r\n\r\n".encode()
                + body
            )
        if b'"tools"' not in answer:
            raise RuntimeError(f"floor client: no tools in {answer[:200]!r}")
        if session:
            await conn.exchange(
                f"DELETE {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{session_text}\r\n".encode()
            )
    finally:
        transport.close()


async def _floor(url: str, probes: int, concurrency: int, ca_file: str | None) -> dict[str, Any]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port, path = parts.hostname or "", parts.port or 80, parts.path
    context = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None

    async def drive(count: int) -> None:
        started = 0

        async def worker() -> None:
            nonlocal started
            while started < count:
                started += 1
                await _floor_probe(host, port, path, context)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    await drive(200)  # warm-up
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    await drive(probes)
    cpu, wall = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    return {"cpu_ms_per_probe": cpu / probes * 1000, "probes_per_s": probes / wall}


# -- blackbox_exporter -------------------------------------------------------------------------


class Blackbox:
    def __init__(self, workdir: Path, ca_file: str | None = None) -> None:
        if BLACKBOX is None:
            raise SystemExit(
                "blackbox_exporter is not installed: "
                "apt-get install -y prometheus-blackbox-exporter"
            )
        self.port = mcp_servers.free_port()
        config = workdir / "blackbox.yml"
        http: dict[str, Any] = {
            "method": "POST",
            "headers": {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
            "body": json.dumps(INITIALIZE),
            "valid_status_codes": [200],
            "preferred_ip_protocol": "ip4",
        }
        modules = {"jsonrpc": {"prober": "http", "timeout": "5s", "http": http}}
        if ca_file:
            # Certificate verified against the run's CA (insecure_skip_verify stays false).
            modules["jsonrpc_tls"] = {
                "prober": "http",
                "timeout": "5s",
                "http": {**http, "fail_if_not_ssl": True, "tls_config": {"ca_file": ca_file}},
            }
        config.write_text(json.dumps({"modules": modules}))
        self.process = subprocess.Popen(
            [
                BLACKBOX,
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        import socket

        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise SystemExit("blackbox_exporter did not start")

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    async def run(self, url: str, probes: int, concurrency: int) -> dict[str, Any]:
        from urllib.parse import quote

        import aiohttp

        module = "jsonrpc_tls" if url.startswith("https:") else "jsonrpc"
        probe_url = f"http://127.0.0.1:{self.port}/probe?module={module}&target=" + quote(
            url, safe=""
        )
        ok = 0
        latencies: list[float] = []
        async with aiohttp.ClientSession() as session:

            async def one() -> None:
                nonlocal ok
                started = time.perf_counter()
                async with session.get(probe_url) as resp:
                    body = await resp.text()
                latencies.append(time.perf_counter() - started)
                ok += "probe_success 1" in body

            async def worker(count: int) -> None:
                for _ in range(count):
                    await one()

            for _ in range(50):  # warm-up
                await one()
            latencies.clear()
            ok = 0
            cpu0, wall0 = self.cpu_seconds(), time.perf_counter()
            share = probes // concurrency
            await asyncio.gather(*(worker(share) for _ in range(concurrency)))
            cpu, wall = self.cpu_seconds() - cpu0, time.perf_counter() - wall0
        done = share * concurrency
        latencies.sort()
        return {
            "cpu_ms_per_probe": cpu / done * 1000,
            "probes_per_s": done / wall,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
            "success": ok / done,
        }

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


# -- driver ------------------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    name: str
    url: str
    probes: int
    ca_file: str | None = None
    resume: bool = True
    ours: list[dict[str, Any]] = field(default_factory=list)
    floor: list[dict[str, Any]] = field(default_factory=list)
    theirs: list[dict[str, Any]] = field(default_factory=list)


STATE = {"JSON": "stateless", "SSE": "stateful"}


def _fleet(args: argparse.Namespace, workdir: Path, servers: list[Any]) -> list[Row]:
    """Start the servers the run needs; the rows to measure, in order."""
    wanted = set(args.only.split(",")) if args.only else None
    kinds = [
        ("lab", "lab", "JSON", "/json", args.probes),
        ("lab", "lab", "SSE", "/sse", args.probes),
    ]
    if args.sdk:
        kinds += [
            ("sdk", "sdk-stateless-json", "JSON", "", args.sdk_probes),
            ("sdk", "sdk-stateful", "SSE", "", args.sdk_probes),
        ]
    variants: list[tuple[str, str | None, bool]] = [("", None, True)]
    ca = None
    if args.tls:
        ca = mcp_servers.make_test_ca(workdir / "ca")
        variants += [("-tls", str(ca.ca_file), True), ("-tls-full", str(ca.ca_file), False)]
    started: dict[tuple[str, bool], Any] = {}

    def server_for(kind: str, tls: bool) -> Any:
        """The server of ``kind`` (over TLS or not), started once for all its rows."""
        if (kind, tls) not in started:
            cert = ca.server_pem if tls and ca is not None else None
            started[(kind, tls)] = mcp_servers.start_server(kind, tls_cert=cert)
            servers.append(started[(kind, tls)])
        return started[(kind, tls)]

    rows = []
    for family, kind, shape, path, probes in kinds:
        for suffix, ca_file, resume in variants:
            key = f"{family}-{shape.lower()}{suffix}"
            if wanted is not None and key not in wanted:
                continue
            tls = ca_file is not None
            server = server_for(kind, tls)
            label = {"lab": "lab", "sdk": "SDK"}[family]
            over = "" if not tls else " TLS" if resume else " TLS full"
            rows.append(
                Row(
                    key,
                    f"{label} {STATE[shape]} {shape}{over}",
                    server.base + (path or server.path),
                    probes,
                    ca_file,
                    resume,
                )
            )
    # The lab again with latency, plain HTTP only: how the ratio moves with the server's speed
    # alone (the SDK servers are slower AND answer differently).
    for ms in [int(ms) for ms in args.delays.split(",") if ms]:
        for shape in ("JSON", "SSE"):
            key = f"lab-{shape.lower()}-d{ms}"
            if wanted is None or key in wanted:
                rows.append(
                    Row(
                        key,
                        f"lab {STATE[shape]} {shape} +{ms} ms",
                        server_for("lab", False).base + f"/delayed/{ms}/{shape.lower()}",
                        args.sdk_probes,
                    )
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    for command in ("_client", "_floor"):
        client = sub.add_parser(command)
        client.add_argument("--url", required=True)
        client.add_argument("--probes", type=int, required=True)
        client.add_argument("--concurrency", type=int, required=True)
        client.add_argument("--targets", type=int, required=True)
        client.add_argument("--uvloop", action="store_true")
        client.add_argument("--ca-file")
        client.add_argument("--no-resume", dest="resume", action="store_false")
    parser.add_argument("--probes", type=int, default=3000, help="probes per round (lab)")
    parser.add_argument("--sdk-probes", type=int, default=600, help="probes per round (SDK)")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--targets", type=int, default=2000, help="distinct targets")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-uvloop", dest="uvloop", action="store_false")
    parser.add_argument(
        "--no-sdk", dest="sdk", action="store_false", help="only the fast lab servers"
    )
    parser.add_argument("--no-tls", dest="tls", action="store_false", help="plain HTTP only")
    parser.add_argument(
        "--only",
        help="comma-separated rows, e.g. lab-json,sdk-sse-tls "
        "(lab|sdk)-(json|sse)[-tls|-tls-full], lab-(json|sse)-dMS",
    )
    parser.add_argument(
        "--delays",
        default="",
        help="comma-separated milliseconds: rows of "
        "the lab answering each request that much later (plain HTTP, "
        "--sdk-probes probes), e.g. 10,50",
    )
    args = parser.parse_args()
    if args.command in ("_client", "_floor"):
        client_main(args)
        return

    workdir = Path(tempfile.mkdtemp(prefix="alivemcp-bench-"))
    servers: list[Any] = []
    blackbox = None
    try:
        rows = _fleet(args, workdir, servers)
        ca_files = {row.ca_file for row in rows if row.ca_file}
        blackbox = Blackbox(workdir, next(iter(ca_files), None))
        print(
            f"# concurrency {args.concurrency}, {args.targets} targets, {args.rounds} rounds "
            f"(medians), event loop: {'uvloop' if args.uvloop else 'asyncio'}, "
            f"cores: {os.cpu_count()}, load: {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        for _ in range(args.rounds):
            for row in rows:  # rounds outermost: a burst of load hits every row alike
                row.ours.append(
                    run_client(
                        row.url,
                        row.probes,
                        args.concurrency,
                        args.targets,
                        args.uvloop,
                        row.ca_file,
                        row.resume,
                    )
                )
                row.floor.append(
                    run_client(
                        row.url,
                        row.probes,
                        args.concurrency,
                        args.targets,
                        args.uvloop,
                        row.ca_file,
                        command="_floor",
                    )
                )
                row.theirs.append(asyncio.run(blackbox.run(row.url, row.probes, args.concurrency)))
        load = os.getloadavg()[0]
    finally:
        if blackbox is not None:
            blackbox.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def med(items: list[dict[str, Any]], key: str) -> float:
        return statistics.median(item[key] for item in items)

    print(
        f"{'server':<24} {'probes':>6} | {'alivemcp full probe':^44} | {'floor':^7} | "
        f"{'blackbox 1 POST':^27} | {'CPU ratio':^13}"
    )
    print(
        f"{'':<24} {'':>6} | {'CPU ms':>7} {'probes/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'MB/1k tg':>9} | {'CPU ms':>7} | {'CPU ms':>7} {'probes/s':>8} {'p50 ms':>8} | "
        f"{'ours':>6} {'floor':>6}"
    )
    for row in rows:
        ours, theirs = med(row.ours, "cpu_ms_per_probe"), med(row.theirs, "cpu_ms_per_probe")
        floor = med(row.floor, "cpu_ms_per_probe")
        print(
            f"{row.name:<24} {row.probes:>6} | {ours:>7.3f} "
            f"{med(row.ours, 'probes_per_s'):>8.0f} {med(row.ours, 'p50_ms'):>7.2f} "
            f"{med(row.ours, 'p99_ms'):>7.2f} {med(row.ours, 'rss_mb_per_1000_targets'):>9.2f}"
            f" | {floor:>7.3f} | {theirs:>7.3f} {med(row.theirs, 'probes_per_s'):>8.0f} "
            f"{med(row.theirs, 'p50_ms'):>8.2f} | {ours / theirs:>5.2f}x {floor / theirs:>5.2f}x"
        )
        statuses = row.ours[-1]["statuses"]
        success = min(t["success"] for t in row.theirs)
        if set(statuses) != {"up"} or success < 1:
            print(
                f"  ! not all probes succeeded: alivemcp {statuses}, blackbox success {success:.3f}"
            )
    print(f"# load at the end: {load:.2f}")
    if rows:
        first = med(rows[0].ours, "cpu_ms_per_probe")
        print(
            f"# 50,000 endpoints every 60 s at {first:.3f} ms each ({rows[0].name}): "
            f"{50_000 / 60 * first / 1000:.2f} cores"
        )


if __name__ == "__main__":
    main()
