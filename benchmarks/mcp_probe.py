"""Benchmark: CPU per full MCP probe, side by side with blackbox_exporter's single POST.

Probes a local fleet at fixed concurrency with a fresh connection per probe (as with
thousands of distinct hosts). Each target is a distinct URL (``?tN``), so the engine builds
one check per target exactly as a ``targets:`` list does, and every probe goes through the
daemon's real path (config validation, runner, shared plumbing).

Servers: the lab's fast stateless-JSON (``/json``) and stateful-SSE (``/sse``) endpoints (an
aiohttp app on uvloop, so the server is not the bottleneck) and the official Python SDK servers
(stateless JSON, stateful SSE; slower, fewer probes).

Columns, per server, medians over ``--rounds``:
* alivemcp: client CPU ms per FULL probe (initialize, notifications/initialized, tools/list,
  DELETE when there is a session), measured with ``os.times()`` in a client subprocess that
  does nothing else; probes/s; p50/p99 probe latency; RSS per 1,000 targets.
* blackbox_exporter (Debian ``prometheus-blackbox-exporter``): ONE JSON-RPC POST (initialize)
  per probe via its ``/probe`` endpoint, CPU of the exporter process from ``/proc``.

Run::

    .venv/bin/python benchmarks/mcp_probe.py                # uvloop (default)
    .venv/bin/python benchmarks/mcp_probe.py --no-uvloop    # the stdlib event loop
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
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

BLACKBOX = shutil.which("prometheus-blackbox-exporter") or shutil.which("blackbox_exporter")
CLK_TCK = os.sysconf("SC_CLK_TCK")
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "blackbox", "version": "0.23"}},
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


async def _client(url: str, probes: int, concurrency: int, targets: int) -> dict[str, Any]:
    import yaml

    from alivemcp.checks import build_handle
    from alivemcp.config import load_config_text
    from alivemcp.plumbing import Plumbing

    plumbing = Plumbing()

    def build(count: int, tag: str) -> list[Any]:
        # A bare query key per target: check names mask query values, not keys.
        urls = [f"{url}?{tag}{i}" for i in range(count)]
        doc = {"checks": [{"name": "bench", "probe": "mcp_endpoint", "interval": 60,
                           "timeout": 10, "targets": urls}]}
        loaded = load_config_text(yaml.safe_dump(doc), env={})
        return [build_handle(check, plumbing) for check in loaded.checks]

    async def drive(handles: list[Any], count: int, latencies: list[float],
                    statuses: dict[str, int]) -> None:
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
    result = asyncio.run(_client(args.url, args.probes, args.concurrency, args.targets))
    print(json.dumps(result))


def run_client(url: str, probes: int, concurrency: int, targets: int, uvloop: bool
               ) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "_client", "--url", url,
            "--probes", str(probes), "--concurrency", str(concurrency),
            "--targets", str(targets)]
    if uvloop:
        argv.append("--uvloop")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"client failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- blackbox_exporter -------------------------------------------------------------------------


class Blackbox:
    def __init__(self, workdir: Path) -> None:
        if BLACKBOX is None:
            raise SystemExit("blackbox_exporter is not installed: "
                             "apt-get install -y prometheus-blackbox-exporter")
        self.port = mcp_servers.free_port()
        config = workdir / "blackbox.yml"
        config.write_text(json.dumps({"modules": {"jsonrpc": {
            "prober": "http", "timeout": "5s",
            "http": {
                "method": "POST",
                "headers": {"Content-Type": "application/json",
                            "Accept": "application/json, text/event-stream"},
                "body": json.dumps(INITIALIZE),
                "valid_status_codes": [200],
                "preferred_ip_protocol": "ip4",
            },
        }}}))
        self.process = subprocess.Popen(
            [BLACKBOX, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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

        probe_url = (f"http://127.0.0.1:{self.port}/probe?module=jsonrpc&target="
                     + quote(url, safe=""))
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
        return {"cpu_ms_per_probe": cpu / done * 1000, "probes_per_s": done / wall,
                "p50_ms": latencies[len(latencies) // 2] * 1000,
                "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
                "success": ok / done}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


# -- driver ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    client = sub.add_parser("_client")
    client.add_argument("--url", required=True)
    client.add_argument("--probes", type=int, required=True)
    client.add_argument("--concurrency", type=int, required=True)
    client.add_argument("--targets", type=int, required=True)
    client.add_argument("--uvloop", action="store_true")
    parser.add_argument("--probes", type=int, default=3000, help="probes per round (lab)")
    parser.add_argument("--sdk-probes", type=int, default=600, help="probes per round (SDK)")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--targets", type=int, default=2000, help="distinct targets")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-uvloop", dest="uvloop", action="store_false")
    parser.add_argument("--no-sdk", dest="sdk", action="store_false",
                        help="only the fast lab servers")
    args = parser.parse_args()
    if args.command == "_client":
        client_main(args)
        return

    servers = [mcp_servers.start_server("lab")]
    fleet = [("lab stateless JSON", servers[0].base + "/json", args.probes),
             ("lab stateful SSE", servers[0].base + "/sse", args.probes)]
    if args.sdk:
        sdk_json = mcp_servers.start_server("sdk-stateless-json")
        sdk_sse = mcp_servers.start_server("sdk-stateful")
        servers += [sdk_json, sdk_sse]
        fleet += [("SDK stateless JSON", sdk_json.url, args.sdk_probes),
                  ("SDK stateful SSE", sdk_sse.url, args.sdk_probes)]
    workdir = Path(tempfile.mkdtemp(prefix="alivemcp-bench-"))
    blackbox = Blackbox(workdir)
    print(f"# concurrency {args.concurrency}, {args.targets} targets, {args.rounds} rounds "
          f"(medians), event loop: {'uvloop' if args.uvloop else 'asyncio'}, "
          f"cores: {os.cpu_count()}, load: {os.getloadavg()[0]:.2f}")
    try:
        rows = []
        for name, url, probes in fleet:
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append(run_client(url, probes, args.concurrency, args.targets, args.uvloop))
                theirs.append(asyncio.run(blackbox.run(url, probes, args.concurrency)))
            rows.append((name, probes, ours, theirs))
    finally:
        blackbox.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def med(items: list[dict[str, Any]], key: str) -> float:
        return statistics.median(item[key] for item in items)

    print(f"{'server':<20} {'probes':>6} | {'alivemcp full probe':^44} | "
          f"{'blackbox 1 POST':^27} | {'CPU':>6}")
    print(f"{'':<20} {'':>6} | {'CPU ms':>7} {'probes/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'MB/1k tg':>9} | {'CPU ms':>7} {'probes/s':>8} {'p50 ms':>8} | {'ratio':>6}")
    for name, probes, ours, theirs in rows:
        ratio = med(ours, "cpu_ms_per_probe") / med(theirs, "cpu_ms_per_probe")
        print(f"{name:<20} {probes:>6} | {med(ours, 'cpu_ms_per_probe'):>7.3f} "
              f"{med(ours, 'probes_per_s'):>8.0f} {med(ours, 'p50_ms'):>7.2f} "
              f"{med(ours, 'p99_ms'):>7.2f} {med(ours, 'rss_mb_per_1000_targets'):>9.2f} | "
              f"{med(theirs, 'cpu_ms_per_probe'):>7.3f} {med(theirs, 'probes_per_s'):>8.0f} "
              f"{med(theirs, 'p50_ms'):>8.2f} | {ratio:>5.2f}x")
        statuses = ours[-1]["statuses"]
        success = min(t["success"] for t in theirs)
        if set(statuses) != {"up"} or success < 1:
            print(f"  ! not all probes succeeded: alivemcp {statuses}, "
                  f"blackbox success {success:.3f}")
    lab_cpu = med(rows[0][2], "cpu_ms_per_probe")
    print(f"# 50,000 endpoints every 60 s at {lab_cpu:.3f} ms each: "
          f"{50_000 / 60 * lab_cpu / 1000:.2f} cores")


if __name__ == "__main__":
    main()
