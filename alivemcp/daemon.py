"""The long-running daemon: config → probes → scheduler → status, metrics, alerting.

Reload (SIGHUP) swaps the config in place: unchanged checks keep their probe instance and
state; changed ones are torn down and rebuilt; an invalid file is refused and the old config
keeps running. Reload requests are coalesced, and one that arrives while the daemon is still
starting is applied once it has started.

SIGTERM/SIGINT stop scheduling; runs already probing get ``scheduler.shutdown_grace`` to finish
and their results are recorded (and reach alerting); then teardowns (canary clean-up) run while
alerting flushes its queue, and the process exits 0. The whole stop takes at most the grace plus
:data:`STOP_OVERHEAD_SECONDS`. A stop during start-up skips what has not started yet.

The daemon holds ``data_dir`` exclusively (:mod:`alivemcp.datadir`): a second daemon on the same
directory exits 2 with one line saying who holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import threading
from collections import Counter
from pathlib import Path

import structlog

from alivemcp.alerting.manager import AlertManager
from alivemcp.checks import build_handle, check_info
from alivemcp.config import ConfigError, LoadedConfig, load_config, split_listen
from alivemcp.datadir import DataDirInUseError, DataDirLock
from alivemcp.history import HistoryStore
from alivemcp.lifecycle import STOP_SIGNALS, take_held_signals
from alivemcp.logging import configure_logging
from alivemcp.metrics import Metrics
from alivemcp.pipeline import ResultConsumer, ResultPipeline
from alivemcp.plumbing import Plumbing
from alivemcp.runner import ProbeHandle
from alivemcp.scheduler import Scheduler
from alivemcp.server import HttpServer
from alivemcp.status import StatusStore

__all__ = ["Daemon"]

log = structlog.get_logger("alivemcp.daemon")

#: The whole shutdown must fit well inside Kubernetes' default 30 s: the grace (default 10 s)
#: plus this overhead. Teardowns and the alert flush run side by side, each within 3 s.
TEARDOWN_SECONDS = 3.0
ALERT_FLUSH_SECONDS = 3.0
HISTORY_FLUSH_SECONDS = 3.0
#: Beyond the grace: a reload in progress 1 s to cancel, runs cut at the end of the grace 2 s
#: to unwind, teardowns and flush 3 s, requests being answered 1 s, closing clients ~1 s.
STOP_OVERHEAD_SECONDS = 8.0
EXIT_DATA_DIR_IN_USE = 2


class Daemon:
    def __init__(
        self, loaded: LoadedConfig, config_path: Path | None, listen: str | None = None
    ) -> None:
        self._loaded = loaded
        self._config_path = config_path
        self._listen = listen or loaded.config.server.listen
        self.store = StatusStore()
        self.metrics = Metrics(self.store)
        self.plumbing = Plumbing()
        self.alerts = AlertManager(
            loaded.config.alerting,
            [(check_info(c), c.alert) for c in loaded.checks],
            Path(loaded.config.data_dir),
            self.metrics.registry,
        )
        history = loaded.config.history
        self.history = (
            HistoryStore(loaded.config.data_dir, history, self.metrics.registry)
            if history.enabled else None
        )
        consumers: list[ResultConsumer] = [self.store, self.alerts]
        if self.history is not None:
            consumers.append(self.history)
            self.metrics.checks.set_uptime_source(history.metrics_window, self.history.live_uptime)
        self.pipeline = ResultPipeline(consumers, self.metrics.registry)
        self.scheduler = Scheduler(
            self.store, self.metrics, self.pipeline, loaded.config.scheduler
        )
        self.server = HttpServer(
            self.store,
            self.metrics,
            self.scheduler.alive,
            lambda: self._loaded is not None,
            self.alerts.firing_alerts,
            self.history,
        )
        self._data_dir_lock = DataDirLock(loaded.config.data_dir)
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._reload_wanted = asyncio.Event()
        self._reloader: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Future[None]] = set()  # teardowns of checks a reload replaced
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> int:
        # Signals first: a SIGHUP or SIGTERM during start-up must neither kill the process
        # nor be lost. Reloads wait until the daemon has started; a stop skips the rest.
        self._take_signals()
        if not self._lock_data_dir():
            return EXIT_DATA_DIR_IN_USE
        try:
            if not self._stop.is_set():
                await self._start()
            await self._stop.wait()
            await self.shutdown()
        finally:
            self._data_dir_lock.release()
        return 0

    def _take_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_wanted.set)
        for signum in take_held_signals():
            if signum == signal.SIGHUP:
                self._reload_wanted.set()
            else:
                self._stop.set()

    def _lock_data_dir(self) -> bool:
        """Take data_dir before anything touches it; False when another daemon holds it."""
        try:
            self._data_dir_lock.acquire()
        except DataDirInUseError as exc:
            print(exc, file=sys.stderr, flush=True)
            return False
        except OSError as exc:
            # An unwritable data_dir does not stop probing or paging (alerting says so too).
            log.warning("cannot lock data_dir; running without the one-daemon guard",
                        data_dir=self._data_dir_lock.data_dir,
                        error=exc.strerror or str(exc))
        return True

    async def _start(self) -> None:
        _raise_open_files_limit()
        host, port = split_listen(self._listen)
        await self.server.start(host, port)
        await self.alerts.start()
        if self.history is not None:
            self.history.start()
        if self._stop.is_set():
            return
        self._apply(self._loaded)
        self.metrics.config_loaded(True)
        settle_heap()
        self.scheduler.start()
        self._reloader = asyncio.create_task(self._reload_on_request(), name="alivemcp-reload")
        log.info(
            "alivemcp running",
            listen=f"{host}:{self.server.port}",
            checks=len(self._loaded.checks),
            config=self._loaded.source,
        )

    def request_stop(self) -> None:
        self._stop.set()

    async def shutdown(self) -> None:
        self._stopping = True
        grace = self._loaded.config.scheduler.shutdown_grace
        log.info("stopping", grace_seconds=grace)
        await self._cancel_reload()
        await self.scheduler.stop(grace)
        handles = [entry.handle for entry in self.scheduler.checks.values()]
        # Canary clean-up (of running checks, and of those a cancelled reload was retiring)
        # and the alert flush (results of the last runs) are independent: side by side.
        await asyncio.gather(
            _teardown_all(handles), *self._retiring, self.alerts.stop(grace=ALERT_FLUSH_SECONDS),
            *([self.history.stop(HISTORY_FLUSH_SECONDS)] if self.history is not None else []),
        )
        await self.plumbing.aclose()
        await self.server.stop()
        log.info("stopped")

    async def _reload_on_request(self) -> None:
        while True:
            await self._reload_wanted.wait()
            self._reload_wanted.clear()
            if self._stopping:
                return
            try:
                await self.reload()
            except Exception:  # the next SIGHUP must still be heard
                self.metrics.config_loaded(False)
                log.exception("config reload failed; keeping the running config")

    async def _cancel_reload(self) -> None:
        """A reload in progress is abandoned: a config still loading is never applied; one
        already applied keeps its teardowns going (they join the shutdown's)."""
        reloader, self._reloader = self._reloader, None
        if reloader is not None:
            reloader.cancel()
            await asyncio.wait({reloader}, timeout=1)

    # -- config ------------------------------------------------------------------------------

    async def reload(self) -> bool:
        async with self._reload_lock:
            if self._config_path is None:
                return False
            try:
                loaded = await _load_in_background(self._config_path)
            except ConfigError as exc:
                self.metrics.config_loaded(False)
                log.error("config reload refused; keeping the running config",
                          errors=exc.errors, source=exc.source)
                return False
            configure_logging(loaded.config.logging.level, loaded.config.logging.format)
            if loaded.config.server.listen != self._loaded.config.server.listen:
                log.warning("server.listen changed: takes effect on restart")
            if loaded.config.history.enabled != self._loaded.config.history.enabled:
                log.warning("history.enabled changed: takes effect on restart")
            if loaded.config.data_dir != self._loaded.config.data_dir:
                log.warning("data_dir changed: takes effect on restart")
            if self.history is not None:
                self.history.reconfigure(loaded.config.history)
                self.metrics.checks.set_uptime_source(loaded.config.history.metrics_window,
                                                      self.history.live_uptime)
            old_teardowns = self._apply(loaded)
            self.scheduler.configure_limits(loaded.config.scheduler)
            self.alerts.reconfigure(
                loaded.config.alerting, [(check_info(c), c.alert) for c in loaded.checks]
            )
            self._loaded = loaded
            self.metrics.config_loaded(True)
            # Shielded: a stop cancels the reload, never a canary clean-up half-way.
            teardown = asyncio.ensure_future(_teardown_all(old_teardowns))
            self._retiring.add(teardown)
            teardown.add_done_callback(self._retiring.discard)
            await asyncio.shield(teardown)
            settle_heap()
            log.info("config reloaded", checks=len(loaded.checks))
            return True

    def _apply(self, loaded: LoadedConfig) -> list[ProbeHandle]:
        """Make the scheduler match ``loaded``; returns handles that need a teardown."""
        wanted = {c.name: c for c in loaded.checks}
        retired: list[ProbeHandle] = []
        for name, entry in list(self.scheduler.checks.items()):
            check = wanted.get(name)
            if check is None or check.fingerprint() != entry.fingerprint:
                removed = self.scheduler.remove(name)
                if removed is not None:
                    retired.append(removed.handle)
        infos = [check_info(c) for c in loaded.checks]
        self.store.set_checks(infos)
        if self.history is not None:
            self.history.set_checks(infos)
        for check in loaded.checks:
            if check.name not in self.scheduler.checks:
                handle = build_handle(check, self.plumbing, results=self.store)
                self.scheduler.add(handle, check.fingerprint())
        self.metrics.set_configured(Counter(c.probe_type for c in loaded.checks))
        return retired


def settle_heap() -> None:
    """Move everything built so far (checks, probe instances, jobs) out of the collector's
    reach. With 50,000 checks a full collection walks millions of long-lived objects and
    pauses the event loop for most of a second; frozen objects are never scanned again."""
    gc.collect()
    gc.freeze()


def _raise_open_files_limit() -> None:
    """Each probe in flight holds a socket or two: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError) as exc:  # pragma: no cover - platform limits
        log.warning("could not raise the open-files limit", error=str(exc))


async def _load_in_background(path: Path) -> LoadedConfig:
    """``load_config`` off the event loop, in a daemon thread: a large config takes seconds to
    load, and a stop must not wait for a load it no longer needs (``asyncio.to_thread``'s
    workers are joined when the loop closes)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[LoadedConfig] = loop.create_future()

    def settle(outcome: LoadedConfig | BaseException) -> None:
        if future.done():
            return  # the reload was cancelled meanwhile
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def work() -> None:
        outcome: LoadedConfig | BaseException
        try:
            outcome = load_config(path)
        except BaseException as exc:  # handed to the awaiting reload, which decides
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=work, name="alivemcp-config-load", daemon=True).start()
    return await future


async def _teardown_all(handles: list[ProbeHandle]) -> None:
    if handles:
        await asyncio.gather(*(h.teardown(TEARDOWN_SECONDS) for h in handles))
