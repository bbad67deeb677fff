"""Delivery: one async queue and worker per receiver.

Probing never waits on a receiver: the policy only appends to a queue. The worker sends from
the head of its queue, oldest first, so notifications about one check arrive in the order
they were decided; a failed send is retried (exponential backoff with jitter, or the
receiver's Retry-After) before anything behind it, so nothing is skipped or reordered.
Whatever is about to be sent is recorded first (the :class:`DeliveryJournal`: the state file
standalone, the check's record in the shared alert-state log in cluster mode), and removed
once the receiver accepted it: a crash can at worst repeat the one send in flight, never
lose one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import Notification
from alivemcp.alerting.receivers import Failure, Receiver, SendResult

__all__ = ["DeliveryJournal", "DeliverySettings", "DeliveryWorker"]

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


class DeliveryJournal(Protocol):
    """Where notifications are recorded around a send."""

    async def before_send(self, receiver: str, batch: Sequence[Notification]) -> bool:
        """Record that ``batch`` is about to be sent; False: it could not be recorded, so it
        must not be sent yet (the worker tries again later)."""

    def wanted(self, receiver: str, notification: Notification) -> bool:
        """Whether a queued notification is still this process's to send (in cluster mode a
        check can move to another replica while its notifications wait)."""

    async def after_send(
        self,
        receiver: str,
        done: Sequence[Notification],
        unsent: Sequence[Notification],
        maybe_delivered: bool,
    ) -> None:
        """``done`` left the queue (accepted, or rejected for good); ``unsent`` stay queued,
        and may have reached the receiver when ``maybe_delivered``."""


class DeliveryWorker:
    def __init__(
        self,
        receiver: Receiver,
        settings: DeliverySettings,
        metrics: AlertingMetrics,
        journal: DeliveryJournal,
    ) -> None:
        self.receiver = receiver
        self.settings = settings
        self.queue: deque[Notification] = deque()
        self._metrics = metrics
        self._journal = journal
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        #: The batch the receiver is handling right now (empty between sends).
        self.calling: tuple[Notification, ...] = ()
        self._call_done = asyncio.Event()
        self._call_done.set()
        self._unrecorded = False  # the journal refused the last batch (logged once)
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

    def discard(self, unwanted: Callable[[Notification], bool]) -> list[Notification]:
        """Take matching notifications out of the queue, except those the receiver is
        handling right now (they leave the queue when the send returns); returns them."""
        calling = {id(n) for n in self.calling}
        taken = [n for n in self.queue if id(n) not in calling and unwanted(n)]
        self._remove(taken)
        return taken

    async def wait_call_done(self) -> None:
        """Until the send in progress (if any) has returned."""
        await self._call_done.wait()

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
            log.error("delivery worker failed", receiver=self.name, error=repr(task.exception()))

    async def _run(self) -> None:
        while True:
            if not self.queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._wait_for_group_and_rate_limit()
            batch = list(itertools.islice(self.queue, self.settings.max_batch))
            if not batch:
                # Taken out while waiting (cluster mode: its check was handed over). An empty
                # send would post an empty message ("0 alert notifications").
                continue
            # What we are about to send (and the alert state that decided it) is recorded
            # before the receiver sees it.
            if not await self._journal.before_send(self.name, batch):
                self._note_unrecorded(True)
                # Not _pause(): while draining it returns at once, and this would spin.
                await asyncio.sleep(self._retry_delay(None, attempt=1))
                continue
            self._note_unrecorded(False)
            unwanted = [n for n in batch if not self._journal.wanted(self.name, n)]
            if unwanted:
                self._remove(unwanted)
                batch = [n for n in batch if self._journal.wanted(self.name, n)]
                if not batch:
                    continue
            self._last_send = time.monotonic()
            self.calling = tuple(batch)
            self._call_done.clear()
            try:
                result = await self._send(batch)
            finally:
                self.calling = ()
                self._call_done.set()
            done, delay = self._handle(batch, result)
            failure = result.failure
            left = {id(n) for n in done}
            await self._journal.after_send(
                self.name,
                done,
                [n for n in batch if id(n) not in left],
                failure is not None and failure.maybe_delivered,
            )
            if delay:
                await asyncio.sleep(delay)

    def _note_unrecorded(self, refused: bool) -> None:
        if refused and not self._unrecorded:
            log.error(
                "cannot record notifications before sending them; holding them until they can be",
                receiver=self.name,
                pending=len(self.queue),
            )
        elif not refused and self._unrecorded:
            log.info("notifications recorded again; sending", receiver=self.name)
        self._unrecorded = refused

    def _remove(self, notifications: Sequence[Notification]) -> None:
        """Remove these exact objects (the head, usually) from the queue."""
        ids = {id(n) for n in notifications}
        while self.queue and id(self.queue[0]) in ids:
            ids.discard(id(self.queue.popleft()))
        if ids:
            self.queue = deque(n for n in self.queue if id(n) not in ids)

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

    def _handle(
        self, batch: list[Notification], result: SendResult
    ) -> tuple[list[Notification], float]:
        """Apply a send's result to the queue and metrics; returns the notifications that
        left the queue and how long to wait."""
        delivered = max(0, min(result.delivered, len(batch)))
        if result.grouped:
            self._hold_until = time.monotonic() + self.settings.group_interval
        done = batch[:delivered]
        self._remove(done)
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
            return done, 0.0
        if failure.kind == "permanent":
            self._attempt = 0
            count = max(1, failure.count or 1)
            dropped = batch[delivered : delivered + count]
            self._remove(dropped)
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
            return done + dropped, 0.0
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
        return done, delay

    def _retry_delay(self, retry_after: float | None, attempt: int | None = None) -> float:
        s = self.settings
        attempt = self._attempt if attempt is None else attempt
        if retry_after is not None:
            # Honour the receiver, plus a little jitter so many daemons don't retry in step.
            base = min(retry_after, s.max_retry_after)
            return base + random.uniform(0, 0.1 * max(base, s.backoff_initial))
        ceiling = min(s.backoff_max, s.backoff_initial * 2.0 ** (attempt - 1))
        # "Equal jitter": at least half the exponential delay, at most all of it.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def _names(batch: list[Notification], limit: int = 10) -> list[str]:
    names = [f"{n.check}:{n.kind.value}:{n.event.value}" for n in batch[:limit]]
    if len(batch) > limit:
        names.append(f"+{len(batch) - limit} more")
    return names
