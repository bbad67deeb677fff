"""Benchmark: the probe's own HTTP/1.1 client against aiohttp on an MCP handshake's requests.

The question it answers: does owning an HTTP client still pay? Both clients do exactly the
same HTTP work per probe, on a FRESH connection per probe (as for a fleet of distinct hosts)
kept alive for the probe's requests: POST initialize, POST notifications/initialized,
POST tools/list and, when the server gave a session id, DELETE it (3 requests on the lab's
stateless ``/json``, 4 on its stateful ``/sse``); every body is read whole and the session id
taken from the headers. No MCP parsing: that is the same whatever the client.

* own: ``HttpClients.probe_session()`` per probe (the daemon's path), closed after the probe.
  Over TLS twice: resuming sessions (the default; every target here is one host, so every
  handshake after the first resumes) and with resumption off (full handshakes, as aiohttp).
* aiohttp: a ``ClientSession`` (with its own connector) per probe, closed after the probe;
  one shared SSL context for all probes, as the own client has.

Over TLS both verify the server's certificate against a CA made at run time. CPU per probe is
``os.times()`` of a client subprocess that does nothing else; medians over ``--rounds``, the
clients alternating within each round.

Run::

    .venv/bin/python benchmarks/http_clients.py
    .venv/bin/python benchmarks/http_clients.py --probes 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from alivemcp.testbed import mcp_servers  # noqa: E402

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
).encode()
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
TOOLS_LIST = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CLIENTS = ("own", "own-full-tls", "aiohttp")


async def _own_probe(clients: Any, url: str, ca_file: str | None) -> None:
    from alivemcp.plumbing.http import read_capped

    session = clients.probe_session(ca_file=ca_file, proxy="direct")
    try:
        headers = dict(HEADERS)
        async with session.request(
            "POST", url, timeout=10, headers=headers, body=INITIALIZE
        ) as response:
            await read_capped(response)
            session_id = response.headers.get("mcp-session-id")
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        for body in (INITIALIZED, TOOLS_LIST):
            async with session.request(
                "POST", url, timeout=10, headers=headers, body=body
            ) as response:
                await read_capped(response)
        if session_id:
            async with session.request(
                "DELETE", url, timeout=10, headers={"Mcp-Session-Id": session_id}
            ) as response:
                await read_capped(response)
        if response.status >= 300:
            raise RuntimeError(f"own client: HTTP {response.status}")
    finally:
        await session.aclose()


async def _aiohttp_probe(aiohttp: Any, url: str, context: ssl.SSLContext | bool) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        headers = dict(HEADERS)
        async with session.post(url, data=INITIALIZE, headers=headers) as response:
            await response.read()
            session_id = response.headers.get("mcp-session-id")
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        for body in (INITIALIZED, TOOLS_LIST):
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
        if session_id:
            async with session.delete(url, headers={"Mcp-Session-Id": session_id}) as response:
                await response.read()
        if response.status >= 300:
            raise RuntimeError(f"aiohttp: HTTP {response.status}")


async def _measure(
    kind: str, url: str, probes: int, concurrency: int, ca_file: str | None
) -> dict[str, float]:
    if kind == "aiohttp":
        import aiohttp

        context: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=ca_file) if url.startswith("https:") else False
        )

        def one() -> Any:
            return _aiohttp_probe(aiohttp, url, context)
    else:
        from alivemcp.plumbing.http import HttpClients

        clients = HttpClients(environ={}, tls_resume_seconds=0 if kind == "own-full-tls" else 300)

        def one() -> Any:
            return _own_probe(clients, url, ca_file)

    async def drive(count: int) -> None:
        started = 0

        async def worker() -> None:
            nonlocal started
            while started < count:
                started += 1
                await one()

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    await drive(200)  # warm-up: imports, code paths, the allocator
    times0, wall0 = os.times(), time.perf_counter()
    await drive(probes)
    times1, wall1 = os.times(), time.perf_counter()
    cpu = (times1.user + times1.system) - (times0.user + times0.system)
    return {"cpu_ms": cpu / probes * 1000, "probes_per_s": probes / (wall1 - wall0)}


def _run(
    kind: str, url: str, probes: int, concurrency: int, ca_file: str | None
) -> dict[str, float]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "_measure",
        kind,
        url,
        str(probes),
        str(concurrency),
        ca_file or "",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    if sys.argv[1:2] == ["_measure"]:
        kind, url, probes, concurrency, ca_arg = sys.argv[2:7]
        import uvloop

        uvloop.install()
        print(
            json.dumps(
                asyncio.run(_measure(kind, url, int(probes), int(concurrency), ca_arg or None))
            )
        )
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=3000, help="probes per round")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="alivemcp-clients-"))
    ca = mcp_servers.make_test_ca(workdir)
    plain = mcp_servers.start_server("lab")
    tls = mcp_servers.start_server("lab", tls_cert=ca.server_pem)
    schemes: list[tuple[str, Any, str | None]] = [
        ("http", plain, None),
        ("https", tls, str(ca.ca_file)),
    ]
    rows = [
        (f"{name} {scheme}", server.base + path, ca_file)
        for name, path in (("3 requests (/json)", "/json"), ("4 requests (/sse)", "/sse"))
        for scheme, server, ca_file in schemes
    ]
    print(
        f"# uvloop, concurrency {args.concurrency}, {args.probes} probes x {args.rounds} "
        f"rounds (medians), cores: {os.cpu_count()}, load: {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for _ in range(args.rounds):
            for name, url, ca_file in rows:
                for kind in CLIENTS:
                    if kind == "own-full-tls" and ca_file is None:
                        continue
                    results.setdefault((name, kind), []).append(
                        _run(kind, url, args.probes, args.concurrency, ca_file)
                    )
        load = os.getloadavg()[0]
    finally:
        plain.stop()
        tls.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def med(name: str, kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, kind)])

    print(
        f"{'handshake':<26} | {'own CPU ms':>10} {'own full TLS':>12} | {'aiohttp CPU ms':>14}"
        f" | {'own/aiohttp':>11} {'full TLS/aiohttp':>16}"
    )
    for name, _, ca_file in rows:
        own, theirs = med(name, "own", "cpu_ms"), med(name, "aiohttp", "cpu_ms")
        full = med(name, "own-full-tls", "cpu_ms") if ca_file else None
        full_text = f"{full:>12.3f}" if full is not None else f"{'':>12}"
        full_ratio = f"{full / theirs:>15.2f}x" if full is not None else f"{'':>16}"
        print(
            f"{name:<26} | {own:>10.3f} {full_text} | {theirs:>14.3f} | "
            f"{own / theirs:>10.2f}x {full_ratio}"
        )
    print(f"# load at the end: {load:.2f}")


if __name__ == "__main__":
    main()
