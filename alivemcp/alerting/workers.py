"""The receivers' delivery workers: one per configured receiver, kept in step with the config.

The HTTP client is the alerting package's own ``httpx.AsyncClient`` (not the shared plumbing
client), so delivery has its own connection pool and timeouts. In cluster mode a notification
is put in its check's outbox (:class:`~alivemcp.alerting.records.Outbox`) before its worker
gets it: the outbox is what the check's record says is still to be sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx
import structlog

from alivemcp.alerting.config import AlertingConfig
from alivemcp.alerting.delivery import DeliveryJournal, DeliverySettings, DeliveryWorker
from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import Notification
from alivemcp.alerting.receivers import Receiver, build_receiver
from alivemcp.alerting.records import Outbox
from alivemcp.alerting.state import StateStore

__all__ = ["ReceiverWorkers"]

log = structlog.get_logger("alivemcp.alerting")


class ReceiverWorkers:
    """Delivery workers by receiver name (built at :meth:`open`, after which the config's
    receivers are known to have a client to send with)."""

    def __init__(self, metrics: AlertingMetrics, outbox: Outbox | None) -> None:
        """``outbox``: cluster mode, where a notification goes before its queue."""
        self._metrics = metrics
        self._outbox = outbox
        self._workers: dict[str, DeliveryWorker] = {}
        self._client: httpx.AsyncClient | None = None
        self._config: AlertingConfig | None = None
        self._journal: DeliveryJournal | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, config: AlertingConfig, journal: DeliveryJournal) -> None:
        """A client, and a worker (not started) per configured receiver."""
        self._client = httpx.AsyncClient(follow_redirects=False)
        self._config = config
        self._journal = journal
        for name, receiver_config in {r.name: r for r in config.receivers}.items():
            self._add(name, receiver_config)

    def start(self) -> None:
        for worker in self._workers.values():
            worker.start()

    def drain(self) -> None:
        """Shutting down: every worker sends what is queued without group or rate waits."""
        for worker in self._workers.values():
            worker.drain()

    async def wait_drained(self, grace: float) -> None:
        """Until the queues are empty, or ``grace`` is over."""
        pending = [asyncio.ensure_future(w.wait_idle()) for w in self._workers.values() if w.queue]
        if pending:
            _done, not_done = await asyncio.wait(pending, timeout=grace)
            for fut in not_done:
                fut.cancel()

    async def stop(self) -> None:
        """Stop the workers (their queues stay, for the state file)."""
        for worker in list(self._workers.values()):
            await worker.stop()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- configuration -----------------------------------------------------------------------

    def reconfigure(self, config: AlertingConfig) -> set[str]:
        """Add, rebuild and remove workers to match ``config`` (a receiver's state, such as
        PagerDuty groups, survives its rebuild). Returns the checks whose outbox lost
        notifications of a removed receiver (their records are out of date)."""
        self._config = config
        touched: set[str] = set()
        wanted = {r.name: r for r in config.receivers}
        for name in list(self._workers):
            if name not in wanted:
                touched |= self._remove(name)
        for name, receiver_config in wanted.items():
            worker = self._workers.get(name)
            if worker is None:
                self._add(name, receiver_config).start()
            else:
                state = worker.receiver.state
                worker.receiver = self._build_receiver(receiver_config)
                worker.receiver.state = state
                worker.settings = _settings(receiver_config, config)
        return touched

    def _build_receiver(self, receiver_config: Any) -> Receiver:
        assert self._client is not None and self._config is not None
        return build_receiver(receiver_config, self._client, self._config.external_url)

    def _add(self, name: str, receiver_config: Any) -> DeliveryWorker:
        assert self._config is not None and self._journal is not None
        worker = DeliveryWorker(
            self._build_receiver(receiver_config),
            _settings(receiver_config, self._config),
            self._metrics,
            self._journal,
        )
        self._workers[name] = worker
        return worker

    def _remove(self, name: str) -> set[str]:
        worker = self._workers.pop(name)
        if worker.queue:
            log.warning(
                "receiver removed from the config; discarding its queue",
                receiver=name,
                count=len(worker.queue),
            )
            self._metrics.notifications.labels(name, "discarded").inc(len(worker.queue))
        touched = self._outbox.drop_receiver(name) if self._outbox is not None else set()
        asyncio.get_running_loop().create_task(worker.stop())
        self._metrics.remove_receiver(name)
        return touched

    # -- notifications -----------------------------------------------------------------------

    def dispatch(self, receivers: Sequence[str], notification: Notification) -> None:
        """A copy of ``notification`` to each named receiver's queue (receivers not
        configured are skipped: the config load warned about them)."""
        for receiver in receivers:
            worker = self._workers.get(receiver)
            if worker is not None:
                copy = notification.copy()
                if self._outbox is not None:
                    # In the check's record (queued) before the worker can send it: the
                    # worker's before_send writes the record and waits for its ack.
                    self._outbox.add(receiver, copy)
                worker.enqueue(copy)

    def restore_queues(self, saved: Mapping[str, list[Notification]]) -> int:
        """Queue notifications saved by the last run; returns the next free id."""
        next_id = 0
        for name, notifications in saved.items():
            worker = self._workers.get(name)
            if worker is None:
                if notifications:
                    log.warning(
                        "discarding notifications for a receiver no longer configured",
                        receiver=name,
                        count=len(notifications),
                    )
                    self._metrics.notifications.labels(name, "discarded").inc(len(notifications))
                continue
            for notification in notifications:
                worker.enqueue(notification)
            next_id = max([next_id, *(n.id + 1 for n in notifications)])
        return next_id

    def restore_states(self, saved: Mapping[str, Any], store: StateStore) -> None:
        """Receiver state (PagerDuty groups) saved by the last run."""
        for name, data in saved.items():
            worker = self._workers.get(name)
            if worker is None:
                continue  # a receiver no longer configured: its state means nothing now
            try:
                worker.receiver.restore_state(data)
            except ValueError as exc:
                store.entry_dropped("receivers", str(exc), receiver=name)

    def states(self) -> dict[str, Any]:
        """Receiver state to save, by receiver."""
        return {n: w.receiver.state.data for n, w in self._workers.items()}

    # -- introspection -----------------------------------------------------------------------

    def get(self, name: str) -> DeliveryWorker | None:
        return self._workers.get(name)

    def items(self) -> Iterator[tuple[str, DeliveryWorker]]:
        return iter(list(self._workers.items()))

    def names(self) -> list[str]:
        return sorted(self._workers)

    def __bool__(self) -> bool:
        return bool(self._workers)

    def queued(self) -> int:
        return sum(len(w.queue) for w in self._workers.values())

    def queue_depths(self) -> dict[str, int]:
        return {name: len(w.queue) for name, w in self._workers.items()}

    async def wait_delivered(self, timeout: float = 30.0) -> bool:
        """Wait until every queue is empty; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                for worker in list(self._workers.values()):
                    await worker.wait_idle()
        except TimeoutError:
            return False
        return True


def _settings(receiver_config: Any, config: AlertingConfig) -> DeliverySettings:
    return DeliverySettings(
        group_wait=config.group_wait,
        group_interval=config.group_interval,
        min_interval=receiver_config.min_interval,
        max_batch=receiver_config.max_batch,
        backoff_initial=receiver_config.backoff_initial,
        backoff_max=receiver_config.backoff_max,
        max_retry_after=receiver_config.max_retry_after,
    )
