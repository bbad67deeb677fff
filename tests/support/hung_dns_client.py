"""Run by tests/plumbing/test_http_hung_resolver.py inside a mount namespace whose resolv.conf
names a DNS server that never answers: GETs a local server by IP literal, by localhost and by a
hung name with the probe client on uvloop, while four lookups on the loop's own resolver (what
other libraries in the daemon do) hang. Prints one JSON object: host -> [status or error,
seconds].
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import uvloop

from alivemcp.plumbing.http import HttpClients, HttpError, read_capped


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    hogs = [asyncio.ensure_future(loop.getaddrinfo(f"hog{i}.hung.test", 80)) for i in range(4)]
    # The loop's resolver threads are all stuck now. why: no event to wait on: the lookups
    # sit in libuv's thread pool, out of Python's sight; handing four jobs to idle threads
    # takes far less than this.
    await asyncio.sleep(0.3)
    clients = HttpClients()
    results: dict[str, list[object]] = {}
    for host in ("127.0.0.1", "localhost", "hung0.hung.test"):
        session = clients.probe_session()
        started = loop.time()
        try:
            async with session.request("GET", f"http://{host}:{port}/x", timeout=3) as response:
                await read_capped(response)
                outcome: object = response.status
        except HttpError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        finally:
            await session.aclose()
        results[host] = [outcome, round(loop.time() - started, 3)]
    print(json.dumps(results), flush=True)
    for hog in hogs:
        hog.cancel()
    os._exit(0)  # do not wait for the hung lookup threads


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
