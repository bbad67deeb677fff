"""Name resolution for the probe client, kept away from the event loop's resolver.

Why not ``loop.getaddrinfo``: on uvloop every lookup (and ``loop.sock_connect``, which looks
up even an IP literal) queues in libuv's pool of 4 threads. Four names whose DNS server never
answers hold all four threads for the system resolver's own timeout, and every other check's
lookup waits behind them until its deadline passes: healthy checks go down.

Here:

* IP literals and ``localhost`` names (RFC 6761) are answered without any lookup.
* Other names are looked up with ``getaddrinfo`` in this module's own daemon threads
  (:class:`LookupThreads`): a few for normal use, more while some are stuck in a hung lookup,
  up to a hard cap, so hung names cannot starve the others (and never delay shutdown).
* Concurrent lookups of one name share one in-flight lookup: a hung name holds one thread,
  however many checks (or runs of one check) wait for it.
* Each wait has its own deadline (:attr:`Resolver.timeout`, within the request's): a hung
  lookup becomes ``DnsError("DNS lookup for HOST timed out after 5s")`` for that target only.
* Answers are cached for :attr:`Resolver.cache_seconds` (``getaddrinfo`` does not tell the
  record's TTL, so a short fixed time): a fleet of endpoints on one host name costs one lookup
  per few seconds, and a changed record is seen within that time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from alivemcp.plumbing._http_errors import DnsError

__all__ = ["Address", "LookupThreads", "Resolver", "idna_host", "static_addresses", "with_port"]

#: ``(family, sockaddr)``: what ``socket.connect`` needs, without any further lookup.
Address = tuple[int, tuple[Any, ...]]

#: How long one wait for a lookup may take (the system resolver's own per-try timeout is 5 s).
DNS_TIMEOUT = 5.0
#: How long an answer is reused.
CACHE_SECONDS = 10.0
_MAX_CACHED_NAMES = 10_000
#: Lookup threads for normal use, and the hard cap while some are stuck in hung lookups.
_THREADS = 16
_MAX_THREADS = 256
#: A lookup running longer than this is counted as stuck (a normal one takes milliseconds;
#: the system resolver retries after 5 s).
STUCK_AFTER = 1.0
#: An idle lookup thread exits after this long.
_IDLE_EXIT_SECONDS = 60.0

_LOCALHOST: tuple[Address, ...] = (
    (socket.AF_INET, ("127.0.0.1", 0)),
    (socket.AF_INET6, ("::1", 0, 0, 0)),
)


def idna_host(host: str) -> str:
    """``host`` in its ASCII (IDNA A-label) form; raises ValueError when it has none."""
    if host.isascii():
        return host
    try:
        import idna  # a dependency of httpx: IDNA 2008 with UTS 46 mapping, as browsers use
    except ImportError:  # pragma: no cover - httpx is a dependency
        return host.encode("idna").decode("ascii")
    try:
        return str(idna.encode(host, uts46=True).decode("ascii"))
    except idna.IDNAError as exc:
        raise ValueError(str(exc)) from None


def static_addresses(host: str) -> tuple[Address, ...] | None:
    """The addresses of an IP literal or a localhost name (port 0); None for other names."""
    if host == "localhost" or host.endswith(".localhost"):
        return _LOCALHOST
    if not (host[:1].isdigit() or ":" in host):
        return None  # cheap: a DNS name (IP literals start with a digit or contain ':')
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 4:
        return ((socket.AF_INET, (str(ip), 0)),)
    assert isinstance(ip, ipaddress.IPv6Address)
    scope = 0
    if ip.scope_id:
        try:
            scope = (
                int(ip.scope_id) if ip.scope_id.isdigit() else socket.if_nametoindex(ip.scope_id)
            )
        except OSError:
            return None  # an unknown interface: let the lookup report it
    return ((socket.AF_INET6, (str(ip).partition("%")[0], 0, 0, scope)),)


def with_port(addresses: Sequence[Address], port: int) -> list[Address]:
    """The addresses with ``port`` filled in."""
    out: list[Address] = []
    for family, sockaddr in addresses:
        if family == socket.AF_INET6:
            out.append((family, (sockaddr[0], port, *sockaddr[2:4])))
        else:
            out.append((family, (sockaddr[0], port)))
    return out


class LookupThreads:
    """Daemon threads for blocking lookups.

    A queued job gets a new thread when no idle one can take it and fewer than ``size``
    threads are busy with lookups younger than ``stuck_after`` seconds (stuck lookups do not
    count against normal use), up to ``most`` threads in all. :meth:`kick` re-applies the rule
    to jobs already queued (a thread may have become stuck since they arrived).
    """

    def __init__(
        self, size: int = _THREADS, most: int = _MAX_THREADS, stuck_after: float = STUCK_AFTER
    ) -> None:
        self.size = size
        self.most = most
        self.stuck_after = stuck_after
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._queued = 0
        self._busy_since: dict[int, float] = {}

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._queued += 1
            self._spawn_locked()
        self._jobs.put(job)

    def kick(self) -> None:
        with self._lock:
            self._spawn_locked()

    def _spawn_locked(self) -> None:
        wanted = self._queued - self._idle
        if wanted <= 0 or self._threads >= self.most:
            return
        now = time.monotonic()
        stuck = sum(1 for since in self._busy_since.values() if now - since > self.stuck_after)
        room = min(wanted, self.size - (self._threads - stuck), self.most - self._threads)
        for _ in range(room):
            self._threads += 1
            self._idle += 1  # counted from now, so that concurrent submits do not over-spawn
            threading.Thread(target=self._work, name="alivemcp-dns", daemon=True).start()

    def _work(self) -> None:
        ident = threading.get_ident()
        while True:
            try:
                job = self._jobs.get(timeout=_IDLE_EXIT_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._queued == 0:
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._queued -= 1
                self._busy_since[ident] = time.monotonic()
            try:
                job()  # a job reports its own outcome and never raises
            finally:
                with self._lock:
                    del self._busy_since[ident]
                    self._idle += 1


#: What a lookup settles to: the addresses, or the reason it failed.
_Outcome = tuple[Address, ...] | str


class Resolver:
    """Shared name resolution for the daemon's probe sessions (see the module docstring).

    ``getaddrinfo`` is the blocking lookup function (``socket.getaddrinfo`` or, in tests, a
    stand-in with the same signature); it is called as ``getaddrinfo(host, None,
    type=socket.SOCK_STREAM)`` in a lookup thread.
    """

    def __init__(
        self,
        *,
        getaddrinfo: Callable[..., Any] = socket.getaddrinfo,
        timeout: float = DNS_TIMEOUT,
        cache_seconds: float = CACHE_SECONDS,
        threads: LookupThreads | None = None,
    ) -> None:
        self.getaddrinfo = getaddrinfo
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self.threads = threads or LookupThreads()
        self._cache: dict[str, tuple[float, tuple[Address, ...]]] = {}
        self._inflight: dict[str, asyncio.Future[_Outcome]] = {}

    async def resolve(self, host: str, deadline: float, *, what: str = "") -> tuple[Address, ...]:
        """The addresses of ``host`` (port 0), waiting until ``deadline`` (loop time) at most
        and :attr:`timeout` seconds at most; ``what`` prefixes the host in error messages
        (e.g. ``"proxy "``)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        cached = self._cache.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        future = self._inflight.get(host)
        if future is None or future.get_loop() is not loop:
            future = self._start(loop, host)
        wait = min(deadline - now, self.timeout)
        end = now + wait
        while not future.done():
            left = end - loop.time()
            if left <= 0:
                break
            await asyncio.wait((future,), timeout=min(left, self.threads.stuck_after))
            if not future.done():
                self.threads.kick()  # queued behind lookups that are stuck by now?
        if not future.done():
            raise DnsError(f"DNS lookup for {what}{host} timed out after {max(wait, 0):.2g}s")
        outcome = future.result()
        if isinstance(outcome, str):
            raise DnsError(f"DNS lookup for {what}{host} failed: {outcome}")
        return outcome

    def _start(self, loop: asyncio.AbstractEventLoop, host: str) -> asyncio.Future[_Outcome]:
        future: asyncio.Future[_Outcome] = loop.create_future()
        self._inflight[host] = future
        lookup = self.getaddrinfo

        def job() -> None:
            outcome: _Outcome
            try:
                infos = lookup(host, None, type=socket.SOCK_STREAM)
                outcome = _addresses(infos) or "no addresses"
            except socket.gaierror as exc:
                outcome = exc.strerror or str(exc)
            except Exception as exc:  # e.g. UnicodeError for a label longer than 63
                outcome = str(exc) or type(exc).__name__
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._settle, host, future, outcome)

        self.threads.submit(job)
        return future

    def _settle(self, host: str, future: asyncio.Future[_Outcome], outcome: _Outcome) -> None:
        if self._inflight.get(host) is future:
            del self._inflight[host]
        if not isinstance(outcome, str) and self.cache_seconds > 0:
            now = future.get_loop().time()
            if len(self._cache) >= _MAX_CACHED_NAMES:
                self._prune(now)
            self._cache[host] = (now + self.cache_seconds, outcome)
        if not future.done():
            future.set_result(outcome)

    def _prune(self, now: float) -> None:
        self._cache = {host: entry for host, entry in self._cache.items() if entry[0] > now}
        if len(self._cache) >= _MAX_CACHED_NAMES:
            self._cache.clear()

    def clear(self) -> None:
        """Forget cached answers (in-flight lookups finish on their own)."""
        self._cache.clear()


def _addresses(infos: Sequence[Any]) -> tuple[Address, ...]:
    """``getaddrinfo`` results as unique (family, sockaddr) pairs, in the resolver's order."""
    out: list[Address] = []
    for info in infos:
        family, sockaddr = info[0], info[4]
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        item = (int(family), tuple(sockaddr))
        if item not in out:
            out.append(item)
    return tuple(out)
