"""Name resolution of the probe client: IP literals and localhost are never looked up, hung
lookups are reported for their own target only and never starve the others."""

from __future__ import annotations

import asyncio
import time

import pytest

from alivemcp.plumbing._http_dns import LookupThreads
from alivemcp.plumbing.http import DnsError, HttpClients, Resolver, read_capped
from tests.support.http_client_stand_ins import Lookups, Run
from tests.support.http_servers import HttpServer


async def _get(clients: HttpClients, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    session = clients.probe_session(proxy="direct")
    try:
        async with session.request("GET", url, timeout=timeout) as response:
            return response.status, await read_capped(response)
    finally:
        await session.aclose()


def test_ip_literals_and_localhost_never_reach_the_resolver(run: Run, lookups: Lookups) -> None:
    clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
    with HttpServer("127.0.0.1") as v4, HttpServer("::1") as v6:

        async def main() -> list[int]:
            return [
                (await _get(clients, url))[0]
                for url in (
                    v4.url("/a"),
                    v4.url("/b", host="localhost"),
                    v4.url("/c", host="app.localhost"),
                    v6.url("/d"),
                )
            ]

        assert run(main()) == [200, 200, 200, 200]
        assert [r.target for r in v4.requests] == ["/a", "/b", "/c"]
        assert v4.requests[1].headers["host"] == f"localhost:{v4.port}"
    assert lookups.calls == []


def test_hung_lookups_do_not_starve_healthy_checks(run: Run, lookups: Lookups) -> None:
    """Six names whose lookups never return, more than the resolver's normal threads: IP,
    localhost and a name that resolves all stay up meanwhile; each hung name is a DNS timeout
    for its own target."""
    hung = {f"hung{i}.example.test" for i in range(6)}
    lookups.hung = hung
    lookups.answers = {"healthy.example.test": ["127.0.0.1"]}
    resolver = Resolver(
        getaddrinfo=lookups, timeout=2.0, threads=LookupThreads(size=2, stuck_after=0.2)
    )
    clients = HttpClients(resolver=resolver, environ={})
    with HttpServer("127.0.0.1") as server:

        async def main() -> tuple[list[BaseException | tuple[int, bytes]], list[int], float]:
            loop = asyncio.get_running_loop()
            started = loop.time()
            doomed = [
                asyncio.create_task(_get(clients, server.url(host=name), timeout=5))
                for name in sorted(hung)
            ]
            # Every hung lookup in flight (the threads busy), well before the DNS deadline.
            while not hung <= set(lookups.calls):
                assert loop.time() - started < 2.0, f"hung lookups started: {lookups.calls}"
                await asyncio.sleep(0.01)
            healthy = []
            for host in ("127.0.0.1", "localhost", "healthy.example.test"):
                status, _ = await _get(clients, server.url(host=host), timeout=3)
                healthy.append(status)
            failures = await asyncio.gather(*doomed, return_exceptions=True)
            return failures, healthy, loop.time() - started

        failures, healthy, took = run(main())
    assert healthy == [200, 200, 200]
    for name, failure in zip(sorted(hung), failures, strict=True):
        assert isinstance(failure, DnsError), failure
        assert str(failure) == f"DNS lookup for {name} timed out after 2s"
    assert took < 4.5  # the DNS deadline (2 s), not the request's (5 s), ended the hung ones
    assert sorted(set(lookups.calls) & hung) == sorted(hung)


def test_one_hung_name_holds_one_thread(run: Run, lookups: Lookups) -> None:
    """Many checks (or runs) waiting for one hung name share a single lookup."""
    lookups.hung = {"stuck.example.test"}
    resolver = Resolver(getaddrinfo=lookups, timeout=0.5)
    clients = HttpClients(resolver=resolver, environ={})

    async def main() -> list[BaseException | tuple[int, bytes]]:
        url = "http://stuck.example.test:8080/mcp"
        first = await asyncio.gather(
            *(_get(clients, url) for _ in range(5)), return_exceptions=True
        )
        second = await asyncio.gather(_get(clients, url), return_exceptions=True)
        return [*first, *second]

    results = run(main())
    assert all(isinstance(r, DnsError) and "timed out" in str(r) for r in results), results
    assert lookups.calls == ["stuck.example.test"]
    assert resolver.threads.threads == 1


def test_lookup_threads_are_capped(lookups: Lookups) -> None:
    """Stuck lookups get extra threads, but never more than the hard cap."""
    lookups.hung = {f"h{i}.example.test" for i in range(10)}
    resolver = Resolver(
        getaddrinfo=lookups, timeout=0.3, threads=LookupThreads(size=2, most=4, stuck_after=0.05)
    )

    async def main() -> list[BaseException | tuple[int, bytes]]:
        clients = HttpClients(resolver=resolver, environ={})
        return await asyncio.gather(
            *(_get(clients, f"http://{name}/") for name in sorted(lookups.hung)),
            return_exceptions=True,
        )

    with asyncio.Runner() as runner:
        results = runner.run(main())
    assert all(isinstance(r, DnsError) for r in results)
    assert resolver.threads.threads == 4
    assert len(lookups.calls) == 4  # the other six never left the queue


def test_answers_are_cached_briefly(run: Run, lookups: Lookups) -> None:
    lookups.answers = {"cached.example.test": ["127.0.0.1"]}
    resolver = Resolver(getaddrinfo=lookups, cache_seconds=0.5)
    clients = HttpClients(resolver=resolver, environ={})
    with HttpServer("127.0.0.1") as server:
        url = server.url(host="cached.example.test")

        async def main() -> list[int]:
            statuses = [(await _get(clients, url))[0], (await _get(clients, url))[0]]
            await asyncio.sleep(0.6)  # why: the subject: the answer's 0.5 s in the cache passes
            statuses.append((await _get(clients, url))[0])
            return statuses

        assert run(main()) == [200, 200, 200]
        assert server.requests[0].headers["host"] == f"cached.example.test:{server.port}"
    assert lookups.calls == ["cached.example.test", "cached.example.test"]


def test_a_failed_lookup_names_the_host(run: Run, lookups: Lookups) -> None:
    clients = HttpClients(resolver=Resolver(getaddrinfo=lookups), environ={})
    with pytest.raises(DnsError) as caught:
        run(_get(clients, "http://nowhere.example.test/mcp"))
    assert str(caught.value) == (
        "DNS lookup for nowhere.example.test failed: Name or service not known"
    )


def test_the_real_resolver_answers_names(run: Run) -> None:
    """Through the system's getaddrinfo (a name from /etc/hosts, no network)."""
    with open("/etc/hosts") as hosts:
        names = [
            field
            for line in hosts
            if line.startswith("127.")
            for field in line.split()[1:]
            if field != "localhost" and "." not in field
        ]
    assert names, "/etc/hosts names no loopback host besides localhost"
    clients = HttpClients(environ={})
    with HttpServer("127.0.0.1") as server:
        started = time.perf_counter()
        status, _ = run(_get(clients, server.url(host=names[0])))
        assert status == 200
        assert time.perf_counter() - started < 5
