"""The discovery manager: each source refreshed on its own schedule, its checks handed on.

Per source, one task: a refresh at start, then one every ``refresh`` (a ``file_sd`` source
also as soon as one of its files changes; a failed refresh is tried again after at most
:data:`RETRY_SECONDS`). A successful refresh hands the source's whole current set of checks
to ``on_targets(source, checks)`` (the engine works out what changed); a failed one changes
nothing: the source keeps its last good set, the failure is counted by reason, and logged once
per failing spell (and once when the source recovers). Nothing here imports the engine.

:meth:`DiscoveryManager.snapshot` is what the API and ``/metrics`` show of each source.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import structlog

from alivemcp.config import LoadedConfig, ResolvedCheck
from alivemcp.config.registry import Registry, registry
from alivemcp.config.templates import plan_template
from alivemcp.discovery.build import Built, CheckBuilder
from alivemcp.discovery.config import DiscoverySource, FileSdSource, HttpSdSource
from alivemcp.discovery.found import DiscoveryError, Found
from alivemcp.discovery.registry import McpRegistry
from alivemcp.discovery.sd import FileSd, HttpSd
from alivemcp.hygiene.untrusted import clean_text
from alivemcp.plumbing.http import HttpClients

__all__ = [
    "FILE_WATCH_SECONDS",
    "RETRY_SECONDS",
    "DiscoveryManager",
    "OnTargets",
    "SourceSnapshot",
]

log = structlog.get_logger("alivemcp.discovery")

#: How often a file_sd source looks at its files' modification times.
FILE_WATCH_SECONDS = 1.0
#: Longest wait before a failed refresh is tried again.
RETRY_SECONDS = 60.0

#: ``on_targets(source name, its checks by name)``, awaited after every successful refresh.
OnTargets = Callable[[str, Mapping[str, ResolvedCheck]], Awaitable[None]]
Source = McpRegistry | HttpSd | FileSd


@dataclass(frozen=True, slots=True)
class SourceSnapshot:
    """One source as the API and the metrics show it. Times are Unix seconds."""

    name: str
    kind: str
    refresh_seconds: float
    #: Refreshes tried since the daemon started.
    attempts: int
    last_attempt: float | None
    last_success: float | None
    last_duration_seconds: float | None
    #: Checks in the current set (the last good refresh's).
    targets: int
    #: Entries the last good refresh left out, by reason (with a few examples of each).
    skipped: Mapping[str, int]
    skipped_examples: Mapping[str, tuple[str, ...]]
    #: Failed refreshes since the daemon started, by reason.
    errors: Mapping[str, int]
    #: True while the last refresh failed.
    failing: bool
    last_error: str | None
    last_error_reason: str | None
    last_error_at: float | None


@dataclass(slots=True)
class _State:
    config: DiscoverySource
    source: Source
    builder: CheckBuilder | None
    checks: Mapping[str, ResolvedCheck] = field(default_factory=dict)
    attempts: int = 0
    last_attempt: float | None = None
    last_success: float | None = None
    last_duration: float | None = None
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    failing: bool = False
    last_error: str | None = None
    last_error_reason: str | None = None
    last_error_at: float | None = None
    task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class DiscoveryManager:
    """Runs the ``discovery:`` sources of ``loaded``.

    ``http``: the daemon's HTTP clients (sources read through :meth:`HttpClients.fetch`);
    ``base_dir``: where file_sd globs start (the config file's directory); ``on_targets``:
    see :data:`OnTargets`. Nothing runs until :meth:`start`.
    """

    def __init__(
        self,
        loaded: LoadedConfig,
        http: HttpClients,
        on_targets: OnTargets,
        *,
        base_dir: Path,
        reg: Registry | None = None,
        watch_seconds: float = FILE_WATCH_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http = http
        self.base_dir = base_dir
        self.watch_seconds = watch_seconds
        self._on_targets = on_targets
        self._reg = reg or registry()
        self._clock = clock
        self._loaded = loaded
        self._states: dict[str, _State] = {}
        #: (source, attempts wanted, who waits) of :meth:`wait_attempts`.
        self._waiters: list[tuple[str, int, asyncio.Future[None]]] = []
        self._running = False
        for source in loaded.config.discovery:
            self._states[source.name] = self._state(source, loaded)

    @property
    def sources(self) -> Mapping[str, DiscoverySource]:
        """The sources' config, by name (``max_per_host`` is the engine's to enforce)."""
        return {name: state.config for name, state in self._states.items()}

    def _state(self, config: DiscoverySource, loaded: LoadedConfig) -> _State:
        index = loaded.config.discovery.index(config)
        errors: list[str] = []
        plan = plan_template(config, index, loaded.config, self._reg, errors)
        builder = None
        if plan is not None:
            builder = CheckBuilder(
                plan,
                self.http,
                allow_private=config.settings.allow_private_addresses,
                taken=frozenset(c.name for c in loaded.checks),
            )
        else:  # (a loaded config was validated: only a probe plugin gone since could do this)
            log.error("discovery template not usable", source=config.name, errors=errors[:5])
        return _State(config=config, source=self._source(config), builder=builder)

    def _source(self, config: DiscoverySource) -> Source:
        settings = config.settings
        if isinstance(settings, FileSdSource):
            return FileSd(config.name, settings, self.base_dir)
        if isinstance(settings, HttpSdSource):
            return HttpSd(config.name, settings, self.http)
        return McpRegistry(config.name, settings, self.http)

    # -- running

    async def start(self) -> None:
        """Start each source's task (its first refresh right away)."""
        self._running = True
        for state in self._states.values():
            self._start(state)

    def _start(self, state: _State) -> None:
        state.task = asyncio.create_task(
            self._run(state), name=f"alivemcp-discovery-{state.config.name}"
        )

    async def aclose(self) -> None:
        """Stop every source's task (a refresh in progress is cancelled)."""
        self._running = False
        await _stop([s.task for s in self._states.values()])
        for state in self._states.values():
            state.task = None

    async def reconfigure(self, loaded: LoadedConfig) -> None:
        """Follow a reloaded config: a removed source stops and hands on an empty set; an
        added one starts; a changed one (its settings, its template, the defaults or the
        hand-written checks' names) starts again, keeping its counts and, until its first
        refresh succeeds, its checks."""
        old, self._loaded = self._loaded, loaded
        wanted = {source.name: source for source in loaded.config.discovery}
        same_base = old.config.defaults == loaded.config.defaults and _same_names(
            old.checks, loaded.checks
        )
        for name in [n for n in self._states if n not in wanted]:
            state = self._states.pop(name)
            await _stop([state.task])
            await self._hand_on(state, {})
        for name, config in wanted.items():
            current = self._states.get(name)
            if current is not None and same_base and current.config == config:
                continue
            fresh = self._state(config, loaded)
            if current is not None:
                await _stop([current.task])
                if current.config.kind == config.kind:
                    fresh.errors = current.errors
                    fresh.checks = current.checks
            self._states[name] = fresh
            if self._running:
                self._start(fresh)

    async def _run(self, state: _State) -> None:
        loop = asyncio.get_running_loop()
        while True:
            ok = await self.refresh(state.config.name)
            wait = state.config.settings.refresh
            if not ok:
                wait = min(wait, RETRY_SECONDS)
            if isinstance(state.source, FileSd):
                await self._watch(state.source, loop.time() + wait)
            else:
                await asyncio.sleep(wait)

    async def _watch(self, source: FileSd, due: float) -> None:
        """Until loop time ``due``, or until one of the source's files changes (their
        modification times are looked at every ``watch_seconds``)."""
        loop = asyncio.get_running_loop()
        for _ in range(math.ceil((due - loop.time()) / self.watch_seconds)):
            await asyncio.sleep(max(0.0, min(self.watch_seconds, due - loop.time())))
            if source.changed():
                return

    async def refresh_all(self) -> None:
        """Refresh every source once, now (``alivemcp discover``)."""
        await asyncio.gather(*(self.refresh(name) for name in list(self._states)))

    async def refresh(self, name: str) -> bool:
        """Refresh source ``name`` now; True when it succeeded. One refresh of a source at a
        time (a second waits for the first)."""
        state = self._states[name]
        async with state.lock:
            try:
                return await self._refresh(state)
            finally:
                self._notify()

    async def _refresh(self, state: _State) -> bool:
        name = state.config.name
        state.attempts += 1
        state.last_attempt = self._clock()
        started = time.perf_counter()
        try:
            built = await self._read(state)
        except DiscoveryError as exc:
            self._failed(state, exc.reason, str(exc))
            return False
        except Exception as exc:  # the prober's own bug: logged, counted, the loop goes on
            log.exception("discovery refresh failed unexpectedly", source=name)
            self._failed(state, "other", f"{type(exc).__name__}: {clean_text(str(exc))}")
            return False
        finally:
            state.last_duration = time.perf_counter() - started
        state.checks = MappingProxyType(built.checks)
        state.skipped = built.skipped
        state.examples = built.examples
        state.last_success = self._clock()
        if state.failing:
            state.failing = False
            log.info("discovery source recovered", source=name, targets=len(state.checks))
        await self._hand_on(state, state.checks)
        return True

    async def _read(self, state: _State) -> Built:
        if state.builder is None:
            raise DiscoveryError("invalid", "the template cannot be used (see the log)")
        found: Found = await state.source.read()
        return await state.builder.build(found, state.checks)

    def _failed(self, state: _State, reason: str, message: str) -> None:
        state.errors[reason] += 1
        state.last_error, state.last_error_reason = message, reason
        state.last_error_at = self._clock()
        if not state.failing:
            state.failing = True
            # Once per failing spell; its checks stay as they were until a refresh succeeds.
            log.warning(
                "discovery source failing",
                source=state.config.name,
                reason=reason,
                error=message,
                kept_targets=len(state.checks),
            )

    async def _hand_on(self, state: _State, checks: Mapping[str, ResolvedCheck]) -> None:
        try:
            await self._on_targets(state.config.name, checks)
        except Exception:
            state.errors["apply"] += 1
            log.exception("applying discovered targets failed", source=state.config.name)

    def _notify(self) -> None:
        waiting = []
        for name, at_least, future in self._waiters:
            state = self._states.get(name)
            if future.done():
                continue
            if state is None or state.attempts >= at_least:
                future.set_result(None)
            else:
                waiting.append((name, at_least, future))
        self._waiters = waiting

    # -- reading

    def checks(self, name: str) -> Mapping[str, ResolvedCheck]:
        """Source ``name``'s current checks (its last good refresh's)."""
        return self._states[name].checks

    def snapshot(self) -> list[SourceSnapshot]:
        return [self._snapshot(state) for state in self._states.values()]

    def _snapshot(self, state: _State) -> SourceSnapshot:
        return SourceSnapshot(
            name=state.config.name,
            kind=state.config.kind,
            refresh_seconds=state.config.settings.refresh,
            attempts=state.attempts,
            last_attempt=state.last_attempt,
            last_success=state.last_success,
            last_duration_seconds=state.last_duration,
            targets=len(state.checks),
            skipped=dict(state.skipped),
            skipped_examples={k: tuple(v) for k, v in state.examples.items()},
            errors=dict(state.errors),
            failing=state.failing,
            last_error=state.last_error,
            last_error_reason=state.last_error_reason,
            last_error_at=state.last_error_at,
        )

    async def wait_attempts(self, name: str, at_least: int, timeout: float) -> SourceSnapshot:
        """Wait until source ``name`` has tried ``at_least`` refreshes (for tests and tools);
        raises TimeoutError after ``timeout`` seconds."""
        if self._states[name].attempts < at_least:
            future = asyncio.get_running_loop().create_future()
            self._waiters.append((name, at_least, future))
            async with asyncio.timeout(timeout):
                await future
        return self._snapshot(self._states[name])


async def _stop(tasks: list[asyncio.Task[None] | None]) -> None:
    running = [t for t in tasks if t is not None and not t.done()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def _same_names(old: Sequence[ResolvedCheck], new: Sequence[ResolvedCheck]) -> bool:
    """Whether the hand-written checks are the same names in the same order (a reordered
    file counts as a change: a source restarts, harmless). No set of 100,000 names is built
    in one go, and a reload keeps the running check objects, so most compare by identity."""
    return len(old) == len(new) and all(
        a is b or a.name == b.name for a, b in zip(old, new, strict=True)
    )
