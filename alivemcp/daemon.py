"""The long-running daemon: config → probes → scheduler → status, metrics, alerting.

Reload (SIGHUP) swaps the config in place: unchanged checks keep their probe instance and
state; changed ones are torn down and rebuilt; an invalid file is refused and the old config
keeps running. SIGTERM/SIGINT stop scheduling, let in-flight runs finish within the grace
period, run teardowns (canary clean-up) and exit.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections import Counter
from pathlib import Path

import structlog

from alivemcp.alerting.manager import AlertManager
from alivemcp.checks import build_handle, check_info
from alivemcp.config import ConfigError, LoadedConfig, load_config, split_listen
from alivemcp.logging import configure_logging
from alivemcp.metrics import Metrics
from alivemcp.plumbing import Plumbing
from alivemcp.redact import register_secrets_in
from alivemcp.results import CheckResult
from alivemcp.runner import ProbeHandle
from alivemcp.scheduler import Scheduler
from alivemcp.server import HttpServer
from alivemcp.status import StatusStore

__all__ = ["Daemon"]

log = structlog.get_logger("alivemcp.daemon")

#: The whole shutdown must fit well inside Kubernetes' default 30 s (the promise is 15 s).
TEARDOWN_SECONDS = 3.0


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
        self.scheduler = Scheduler(
            self.store, self.metrics, self._on_result, loaded.config.scheduler
        )
        self.server = HttpServer(
            self.store,
            self.metrics,
            self.scheduler.alive,
            lambda: self._loaded is not None,
            self.alerts.firing_alerts,
        )
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> int:
        _raise_open_files_limit()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload()))
        host, port = split_listen(self._listen)
        await self.server.start(host, port)
        await self.alerts.start()
        self._apply(self._loaded)
        self.metrics.config_loaded(True)
        settle_heap()
        self.scheduler.start()
        log.info(
            "alivemcp running",
            listen=f"{host}:{self.server.port}",
            checks=len(self._loaded.checks),
            config=self._loaded.source,
        )
        await self._stop.wait()
        await self.shutdown()
        return 0

    def request_stop(self) -> None:
        self._stop.set()

    async def shutdown(self) -> None:
        grace = self._loaded.config.scheduler.shutdown_grace
        log.info("stopping", grace_seconds=grace)
        await self.scheduler.stop(grace)
        handles = [entry.handle for entry in self.scheduler.checks.values()]
        await _teardown_all(handles)
        await self.alerts.stop(grace=3.0)
        await self.plumbing.aclose()
        await self.server.stop()
        log.info("stopped")

    # -- config ------------------------------------------------------------------------------

    async def reload(self) -> bool:
        async with self._reload_lock:
            if self._config_path is None:
                return False
            try:
                loaded = await asyncio.to_thread(load_config, self._config_path)
            except ConfigError as exc:
                self.metrics.config_loaded(False)
                log.error("config reload refused; keeping the running config",
                          errors=exc.errors, source=exc.source)
                return False
            register_secrets_in(loaded.config)
            configure_logging(loaded.config.logging.level, loaded.config.logging.format)
            if loaded.config.server.listen != self._loaded.config.server.listen:
                log.warning("server.listen changed: takes effect on restart")
            old_teardowns = self._apply(loaded)
            self.scheduler.configure_limits(loaded.config.scheduler)
            self.alerts.reconfigure(
                loaded.config.alerting, [(check_info(c), c.alert) for c in loaded.checks]
            )
            self._loaded = loaded
            self.metrics.config_loaded(True)
            await _teardown_all(old_teardowns)
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
        self.store.set_checks(check_info(c) for c in loaded.checks)
        for check in loaded.checks:
            if check.name not in self.scheduler.checks:
                self.scheduler.add(build_handle(check, self.plumbing), check.fingerprint())
        self.metrics.set_configured(Counter(c.probe_type for c in loaded.checks))
        return retired

    # -- results -----------------------------------------------------------------------------

    def _on_result(self, result: CheckResult) -> None:
        previous = self.store.get(result.check.name)
        before = previous.last.status if previous and previous.last else None
        self.store.record(result)
        if before is not result.status:
            log.info(
                "check status changed",
                check=result.check.name,
                probe=result.check.probe_type,
                status=result.status.value,
                previous=before.value if before else None,
                reason=result.reason,
            )
        try:
            self.alerts.observe(result)
        except Exception:
            log.exception("alerting failed to observe a result", check=result.check.name)


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


async def _teardown_all(handles: list[ProbeHandle]) -> None:
    if handles:
        await asyncio.gather(*(h.teardown(TEARDOWN_SECONDS) for h in handles))
