"""The history store as the daemon sees it: a result consumer plus async queries.

Writes go through :class:`~alivemcp.history.writer.HistoryWriter` (one thread); queries run
in worker threads on their own read-only connections, after asking the writer to flush, so an
answer includes every result recorded before the request (read-your-writes, within
:data:`FLUSH_WAIT_SECONDS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.history import queries, schema
from alivemcp.history.config import HistoryConfig
from alivemcp.history.live import LIVE_WINDOWS
from alivemcp.history.writer import FAULT_REASONS, HistoryWriter

__all__ = ["FLUSH_WAIT_SECONDS", "HistoryStore", "HistoryUnavailable"]

FLUSH_WAIT_SECONDS = 2.0
_LIVE_ORDER = ("24h", "7d", "30d")  # the order of LiveWindows.windows
T = TypeVar("T")


class HistoryUnavailable(Exception):
    """The database cannot be read right now (the writer says why in the log)."""


class HistoryStore:
    name = "history"

    def __init__(
        self, data_dir: str | Path, config: HistoryConfig, registry: CollectorRegistry | None = None
    ) -> None:
        self.path = Path(data_dir) / schema.FILE_NAME
        self.config = config
        self.writer = HistoryWriter(self.path, config.retention)
        self._local = threading.local()
        if registry is not None:
            registry.register(_HistoryCollector(self))

    # -- the pipeline's side ------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        self.writer.observe(result)

    def set_checks(self, infos: Iterable[CheckInfo]) -> None:
        self.writer.set_configured(i.name for i in infos)

    def change_checks(self, added: Iterable[str], removed: Iterable[str]) -> None:
        """Some checks joined, others left (a discovery refresh): a check that left keeps its
        history for the retention, and one that returns continues it."""
        self.writer.change_configured(added, removed)

    def reconfigure(self, config: HistoryConfig) -> None:
        self.config = config
        self.writer.set_retention(config.retention)

    def start(self) -> None:
        self.writer.start()

    async def stop(self, timeout: float = 3.0) -> None:
        await asyncio.to_thread(self.writer.stop, timeout)

    async def flush(self, timeout: float = FLUSH_WAIT_SECONDS) -> bool:
        """Wait until results observed so far are written; False on timeout, and at once
        while writes are failing (a reader then gets what the file has, without waiting)."""
        marker = self.writer.marker()
        deadline = time.monotonic() + timeout
        while not self.writer.reached(marker):
            if self.writer.failing() or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    # -- queries ------------------------------------------------------------------------------

    def live_uptime(
        self, name: str, window: str, now: float | None = None
    ) -> tuple[float | None, float | None]:
        """(up_ratio, available_ratio) of 24h, 7d or 30d from memory: no database read."""
        both = self.live_uptimes(name, time.time() if now is None else now)
        at = 2 * _LIVE_ORDER.index(window)
        return both[at], both[at + 1]

    def live_uptimes(self, name: str, now: float) -> tuple[float | None, ...]:
        """24h, 7d, 30d (up_ratio, available_ratio), flattened; from memory."""
        cid = self.writer.check_ids().get(name)
        if cid is None:
            return (None,) * 6
        c = self.writer.live.windows(cid, now)
        return (*queries.ratios(*c[0:3]), *queries.ratios(*c[3:6]), *queries.ratios(*c[6:9]))

    async def uptime(self, name: str, window: str) -> dict[str, Any]:
        return await self._query(queries.uptime, name, window, time.time())

    async def series(self, name: str, window: str) -> dict[str, Any]:
        return await self._query(queries.series, name, window, time.time())

    async def incidents(self, name: str, since: float, limit: int) -> list[dict[str, Any]]:
        return await self._query(queries.incidents, name, since, time.time(), limit)

    async def known(self, name: str) -> bool:
        return name in self.writer.check_ids()

    async def _query(self, fn: Callable[..., T], *args: Any) -> T:
        await self.flush()
        return await asyncio.to_thread(self._read, fn, *args)

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            with self._reader() as db:
                return fn(db, *args)
        except sqlite3.Error as exc:
            self._drop_reader()
            raise HistoryUnavailable(str(exc)) from exc

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        local = self._local
        if getattr(local, "generation", None) != self.writer.generation:
            self._drop_reader()
            if not self.writer.ready.is_set():
                raise HistoryUnavailable("history database not open yet")
            local.db = schema.connect(self.path, readonly=True)
            local.generation = self.writer.generation
        yield local.db

    def _drop_reader(self) -> None:
        db = getattr(self._local, "db", None)
        self._local.db = None
        self._local.generation = None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()


class _HistoryCollector(Collector):
    def __init__(self, store: HistoryStore) -> None:
        self._store = store

    def collect(self) -> Iterable[Metric]:
        writer = self._store.writer
        stats = writer.stats
        yield GaugeMetricFamily(
            "alivemcp_history_writable",
            "1 when the last history write (or open) succeeded.",
            value=1.0 if stats.ok else 0.0,
        )
        errors = CounterMetricFamily(
            "alivemcp_history_write_errors",
            "Failed history writes or opens, by reason.",
            labels=["reason"],
        )
        for reason in FAULT_REASONS:
            errors.add_metric([reason], float(stats.errors.get(reason, 0)))
        yield errors
        yield CounterMetricFamily(
            "alivemcp_history_results_written",
            "Check results committed to history.",
            value=float(stats.committed_results),
        )
        yield CounterMetricFamily(
            "alivemcp_history_results_dropped",
            "Results dropped because history could not be written for "
            "too long (the in-memory queue was full).",
            value=float(stats.dropped),
        )
        yield GaugeMetricFamily(
            "alivemcp_history_pending_results",
            "Results waiting to be written.",
            value=float(writer.pending()),
        )
        yield GaugeMetricFamily(
            "alivemcp_history_last_batch_seconds",
            "How long the last history batch took to write.",
            value=stats.last_batch_seconds,
        )
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                size += writer.path.with_name(writer.path.name + suffix).stat().st_size
        yield GaugeMetricFamily(
            "alivemcp_history_database_bytes",
            "Size of the history database and its write-ahead log.",
            value=float(size),
        )


def metrics_window_ok(window: str | None) -> bool:
    return window is None or window in LIVE_WINDOWS
