"""What watching the tool surface costs the MCP probe per run: CPU per run of ``mcp_endpoint``
with ``tool_surface: {mode: "off"}`` (the anchor) and ``pin``, side by side, interleaved, in one
process, against a real local server. The SDK's streamable server offers prompts and resources:
``pin`` reads them on the first run and then every ``lists_every`` (10 minutes), so these runs
measure the steady cost (tools/list as before, plus making the surface and its digest);
``--lists-every 0`` measures reading them every run.

    .venv/bin/python benchmarks/tool_surface_cost.py [--runs 300] [--rounds 3] [KIND ...]

KIND: ``sdk-stateful`` (default) and/or ``lab`` (its ``/json`` server: tools only). Prints
ms of CPU per run (user + system of this process: the probe, its HTTP client and the engine's
handling of the result) and the ratio pin/off per round.
"""

from __future__ import annotations

import argparse
import asyncio
import resource

import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed import mcp_servers


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _per_run(url: str, mode: str, runs: int, lists_every: float) -> float:
    surface = {"mode": mode, "lists_every": lists_every}
    doc = {
        "checks": [
            {"name": "t", "probe": "mcp_endpoint", "params": {"url": url, "tool_surface": surface}}
        ]
    }
    plumbing = Plumbing()
    handle = build_handle(load_config_text(yaml.safe_dump(doc), env={}).checks[0], plumbing)
    try:
        for _ in range(20):  # warm: connections, caches, the transport detected
            await handle.run()
        start = _cpu()
        for _ in range(runs):
            result = await handle.run()
        used = _cpu() - start
        assert result.status == "up", result.reason
        return used / runs * 1000
    finally:
        await handle.teardown()
        await plumbing.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=["sdk-stateful"])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lists-every", type=float, default=600.0)
    args = parser.parse_args()
    for kind in args.kinds:
        server = mcp_servers.start_server(kind)
        url = server.url if kind != "lab" else server.base + "/json"
        try:
            print(f"{kind} ({url}), {args.runs} runs per figure")
            for round_ in range(1, args.rounds + 1):
                off = await _per_run(url, "off", args.runs, args.lists_every)
                pin = await _per_run(url, "pin", args.runs, args.lists_every)
                print(
                    f"  round {round_}: off {off:.3f} ms CPU/run, pin {pin:.3f} ms CPU/run, "
                    f"pin/off {pin / off:.2f}"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
