"""Delivery: one async queue and worker per receiver.

Probing never waits on a receiver: the policy only appends to a queue. The worker sends from
the head of its queue, oldest first, so notifications about one check arrive in the order
they were decided; a failed send is retried (exponential backoff with jitter, or the
receiver's Retry-After) before anything behind it, so nothing is skipped or reordered.
Whatever is about to be sent is persisted first, and removed (and persisted) once the
receiver accepted it: a crash can at worst repeat the one send in flight, never lose one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import Notification
from alivemcp.alerting.receivers import Failure, Receiver, SendResult

__all__ = ["DeliverySettings", "DeliveryWorker"]

log = structlog.get_logger("alivemcp.alerting")


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    group_wait: float
    group_interval: float
    min_interval: float
    max_batch: int
    backoff_initial: float
    backoff_max: float
    max_retry_after: float


class DeliveryWorker:
    def __init__(
        self,
        receiver: Receiver,
        settings: DeliverySettings,
        metrics: AlertingMetrics,
        persist: Callable[[], Awaitable[None]],
        mark_dirty: Callable[[], None],
    ) -> None:
        self.receiver = receiver
        self.settings = settings
        self.queue: deque[Notification] = deque()
        self._metrics = metrics
        self._persist = persist
        self._mark_dirty = mark_dirty
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._last_send = -float("inf")
        self._hold_until = -float("inf")  # after a grouped message: let the storm accumulate
        self._attempt = 0
        self._draining = asyncio.Event()
        metrics.add_receiver(receiver.name)
        metrics.queue_depth.labels(receiver.name).set_function(lambda: len(self.queue))
        metrics.oldest_age.labels(receiver.name).set_function(self.oldest_age)

    @property
    def name(self) -> str:
        return self.receiver.name

    def enqueue(self, notification: Notification) -> None:
        if not notification.enqueued_at:
            notification.enqueued_at = time.time()
        self.queue.append(notification)
        self._idle.clear()
        self._wake.set()

    def oldest_age(self) -> float:
        try:
            head = self.queue[0]
        except IndexError:
            return 0.0
        return max(0.0, time.time() - head.enqueued_at)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"alivemcp-alerting-{self.name}"
            )

    def drain(self) -> None:
        """Shutting down: send what is queued now, without group or rate-limit waits."""
        self._draining.set()
        self._wake.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel the worker; never waits longer than ``timeout`` (shutdown must finish)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            log.error("delivery worker did not stop", receiver=self.name)
        elif not task.cancelled() and task.exception() is not None:
            log.error("delivery worker failed", receiver=self.name,
                      error=repr(task.exception()))

    async def _run(self) -> None:
        while True:
            if not self.queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._wait_for_group_and_rate_limit()
            # What we are about to send (and the alert state that decided it) is on disk
            # before the receiver sees it.
            await self._persist()
            batch = list(itertools.islice(self.queue, self.settings.max_batch))
            self._last_send = time.monotonic()
            result = await self._send(batch)
            delay = self._handle(batch, result)
            self._mark_dirty()
            await self._persist()
            if delay:
                await asyncio.sleep(delay)

    async def _wait_for_group_and_rate_limit(self) -> None:
        # Let alerts that fire together join one message (only a new head waits).
        head_age = time.time() - self.queue[0].enqueued_at
        await self._pause(self.settings.group_wait - head_age)
        ready_at = max(self._last_send + self.settings.min_interval, self._hold_until)
        await self._pause(ready_at - time.monotonic())

    async def _pause(self, seconds: float) -> None:
        """Sleep, but stop waiting as soon as a shutdown asks to drain the queue."""
        if seconds <= 0 or self._draining.is_set():
            return
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # arrives as the event fires (drain() then stop()), leaving the worker running.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._draining.wait()

    async def _send(self, batch: list[Notification]) -> SendResult:
        try:
            return await self.receiver.send(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a receiver bug must not kill delivery
            log.exception("receiver raised", receiver=self.name, error=type(exc).__name__)
            return SendResult(0, Failure("transient", f"receiver raised {type(exc).__name__}"))

    def _handle(self, batch: list[Notification], result: SendResult) -> float:
        """Apply a send's result to the queue and metrics; returns how long to wait."""
        delivered = max(0, min(result.delivered, len(batch)))
        if result.grouped:
            self._hold_until = time.monotonic() + self.settings.group_interval
        for _ in range(delivered):
            self.queue.popleft()
        if delivered:
            self._metrics.notifications.labels(self.name, "delivered").inc(delivered)
            log.info(
                "notifications delivered",
                receiver=self.name,
                receiver_type=self.receiver.type_name,
                count=delivered,
                checks=_names(batch[:delivered]),
            )
        failure = result.failure
        if failure is None:
            self._attempt = 0
            return 0.0
        if failure.kind == "permanent":
            self._attempt = 0
            count = max(1, min(failure.count or 1, len(self.queue)))
            dropped = [self.queue.popleft() for _ in range(count) if self.queue]
            self._metrics.notifications.labels(self.name, "permanent_failure").inc(len(dropped))
            self._metrics.permanent_failures.labels(self.name).inc()
            log.error(
                "receiver rejected notifications permanently; not retrying them - "
                "fix the receiver's configuration",
                receiver=self.name,
                receiver_type=self.receiver.type_name,
                error=failure.detail,
                dropped=len(dropped),
                checks=_names(dropped),
            )
            return 0.0
        self._attempt += 1
        pending = len(batch) - delivered
        self._metrics.notifications.labels(self.name, "retried").inc(pending)
        delay = self._retry_delay(failure.retry_after)
        log.warning(
            "notification delivery failed; will retry",
            receiver=self.name,
            receiver_type=self.receiver.type_name,
            error=failure.detail,
            attempt=self._attempt,
            retry_in_seconds=round(delay, 3),
            pending=len(self.queue),
        )
        return delay

    def _retry_delay(self, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            # Honour the receiver, plus a little jitter so many daemons don't retry in step.
            base = min(retry_after, s.max_retry_after)
            return base + random.uniform(0, 0.1 * max(base, s.backoff_initial))
        ceiling = min(s.backoff_max, s.backoff_initial * 2 ** (self._attempt - 1))
        # "Equal jitter": at least half the exponential delay, at most all of it.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def _names(batch: list[Notification], limit: int = 10) -> list[str]:
    names = [f"{n.check}:{n.kind.value}:{n.event.value}" for n in batch[:limit]]
    if len(batch) > limit:
        names.append(f"+{len(batch) - limit} more")
    return names
