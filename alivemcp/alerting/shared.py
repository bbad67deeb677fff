"""Cluster mode: a check's alert state lives in its record of the compacted alert-state topic.

The replicas share the checks by shard. A replica evaluates only the checks of shards it was
handed (:meth:`SharedAlertState.adopt`, with their records read to the end: an open incident
continues without a new page) and hands them back with :meth:`SharedAlertState.release` (their
latest records written and acknowledged, then dropped here). Records go through the
:class:`~alivemcp.alerting.records.RecordSink` that
:class:`~alivemcp.cluster.alert_state.AlertStateLog` attaches. How a notification moves through
its check's record around a send is :mod:`alivemcp.alerting.shared_journal`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from alivemcp.alerting.catalog import CheckCatalog
from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.records import Outbox, RecordSink, SharedRecord, encode_record
from alivemcp.alerting.workers import ReceiverWorkers
from alivemcp.engine.results import CheckInfo

__all__ = ["AdoptReport", "Ownership", "SharedAlertState", "shared_id_base"]

log = structlog.get_logger("alivemcp.alerting")

Clock = Callable[[], float]
#: Closes the incidents of a check no longer alerting: (name, info, now, reason).
ResolveRemoved = Callable[[str, CheckInfo | None, float, str], None]
#: How often changed records are written (a notification's record is also written, and
#: acknowledged, right before it is sent).
RECORD_INTERVAL = 0.2
#: Notifications this process handed over without ever sending them, kept (oldest forgotten
#: first) in case their checks come back with a record that says "sending" (a record that
#: reached Kafka after its send was put off).
_NEVER_SENT_KEPT = 100_000


@dataclass(slots=True)
class AdoptReport:
    """What :meth:`SharedAlertState.adopt` did with the records of gained shards."""

    adopted: int = 0  # records whose state this replica continues
    resent: int = 0  # notifications queued again (queued ones; sending ones where harmless)
    possibly_undelivered: int = 0  # sending ones not repeated (the receiver must not see two)
    discarded: int = 0  # notifications for receivers no longer configured
    removed: int = 0  # records of checks no longer configured: their incidents resolved
    damaged_entries: list[str] = field(default_factory=list)


class Ownership:
    """Which checks this process evaluates now: standalone every check; in cluster mode the
    checks of the shards adopted, except those being released."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.shard_of: Callable[[str], int] | None = None
        self.held: set[int] = set()
        #: Checks of a shard being released: kept and written, no longer evaluated or sent.
        self.releasing: set[str] = set()

    def owns(self, name: str) -> bool:
        if not self.shared:
            return True
        return (
            self.shard_of is not None
            and self.shard_of(name) in self.held
            and name not in self.releasing
        )

    def may_write(self, name: str) -> bool:
        """Whether this replica may write the check's record: never once it let go of its
        shard, or it would overwrite the new owner's."""
        return self.shard_of is not None and (
            self.shard_of(name) in self.held or name in self.releasing
        )


class SharedAlertState:
    """Adopting, writing and releasing the records of this replica's checks."""

    def __init__(
        self,
        ownership: Ownership,
        ledger: AlertLedger,
        catalog: CheckCatalog,
        receivers: ReceiverWorkers,
        outbox: Outbox,
        metrics: AlertingMetrics,
        clock: Clock,
        resolve_removed: ResolveRemoved,
    ) -> None:
        self.ownership = ownership
        self.outbox = outbox
        self._ledger = ledger
        self._catalog = catalog
        self._receivers = receivers
        self._metrics = metrics
        self._clock = clock
        self._resolve_removed = resolve_removed
        self._sink: RecordSink | None = None
        self._replica = ""
        self._recorded: set[str] = set()  # checks with a live record (not a tombstone)
        self._never_sent: dict[tuple[str, int], None] = {}

    def attach(self, sink: RecordSink, shard_of: Callable[[str], int], replica: str) -> None:
        self._sink = sink
        self.ownership.shard_of = shard_of
        self._replica = replica

    # -- gaining shards ------------------------------------------------------------------------

    def adopt(
        self, shards: frozenset[int], records: Mapping[str, SharedRecord | None]
    ) -> AdoptReport:
        report = AdoptReport()
        shard_of = self.ownership.shard_of
        if shard_of is None:
            raise RuntimeError("adopt() before attach()")
        new = frozenset(shards) - self.ownership.held
        self.ownership.held |= new
        now = self._clock()
        for name, record in records.items():
            if record is None or shard_of(name) not in new:
                continue
            self._adopt_check(name, record, now, report)
        self._ledger.bump()
        return report

    def _adopt_check(
        self, name: str, record: SharedRecord, now: float, report: AdoptReport
    ) -> None:
        state = record.state
        report.adopted += 1
        report.damaged_entries.extend(record.dropped)
        self._ledger.states[name] = state
        self._recorded.add(name)
        self._ledger.changed.add(name)  # phases change below; a quiet one gets its tombstone
        for entry in record.outbox:
            worker = self._receivers.get(entry.receiver)
            if worker is None:
                report.discarded += 1
                self._metrics.notifications.labels(entry.receiver, "discarded").inc()
                continue
            notification = entry.notification
            # Its send was put off here, and the check handed over before it happened: a
            # "sending" record of ours reached Kafka late. Only in a record this replica
            # wrote: "sending" in another's means that replica called the receiver.
            key = (entry.receiver, notification.id)
            never_sent = key in self._never_sent and record.replica == self._replica
            self._never_sent.pop(key, None)
            if (
                entry.phase == "sending"
                and not never_sent
                and not worker.receiver.repeats_are_harmless
            ):
                report.possibly_undelivered += 1
                self._metrics.notifications.labels(entry.receiver, "possibly_undelivered").inc()
                log.warning(
                    "a notification was being sent when its check moved to this replica; "
                    "not sent again (this receiver must not get a duplicate), it may not "
                    "have been delivered",
                    receiver=entry.receiver,
                    check=name,
                    alert=notification.kind.value,
                    notification_event=notification.event.value,
                    previous_owner=record.replica[:200],
                )
                continue
            report.resent += 1
            self.outbox.add(entry.receiver, notification)
            worker.enqueue(notification)
        if not self._catalog.alerting(name):
            report.removed += 1
            info = self._catalog.info_of(name, record.probe_type, record.labels)
            self._resolve_removed(name, info, now, self._catalog.why_not_alerting(name))
            return
        self._ledger.note_attention(name, state)
        self._ledger.track_firing(name, state)

    # -- losing shards -------------------------------------------------------------------------

    async def release(self, shards: frozenset[int], timeout: float) -> int:
        ownership = self.ownership
        gone = frozenset(shards) & ownership.held
        if not gone or ownership.shard_of is None:
            return 0
        shard_of = ownership.shard_of
        names = {
            n
            for n in [*self._ledger.states, *self.outbox.checks(), *self._recorded]
            if shard_of(n) in gone
        }
        ownership.releasing |= names
        ownership.held -= gone
        try:
            return await self._hand_over(names, timeout)
        finally:  # also when cancelled: nothing of them stays here
            self._drop(names)

    async def _hand_over(self, names: set[str], timeout: float) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        calling: list[asyncio.Future[None]] = []
        for receiver, worker in self._receivers.items():
            handed = worker.discard(lambda n: n.check in names)
            if handed:
                self._metrics.notifications.labels(receiver, "handed_over").inc(len(handed))
            if any(n.check in names for n in worker.calling):
                calling.append(asyncio.ensure_future(worker.wait_call_done()))
        for name in names:
            for entry in self.outbox.of(name):
                if entry.phase == "sending" and not entry.maybe_sent:
                    entry.phase = "queued"  # recorded for a send that will not happen
        if calling:
            _finished, unfinished = await asyncio.wait(calling, timeout=max(0.0, _left(deadline)))
            for waiting in unfinished:
                waiting.cancel()
            # What those sends left in the queues (a refusal) is the next owner's now.
            for receiver, worker in self._receivers.items():
                handed = worker.discard(lambda n: n.check in names)
                if handed:
                    self._metrics.notifications.labels(receiver, "handed_over").inc(len(handed))
        acks = [f for f in (self.write_record(n) for n in sorted(names)) if f is not None]
        unacked = 0
        if acks:
            answered, late = await asyncio.wait(acks, timeout=max(0.0, _left(deadline)))
            unacked = len(late) + sum(1 for f in answered if not f.result())
        if unacked:
            log.error(
                "alert state of released checks not acknowledged in time; the next "
                "owner may repeat or miss a notification for them",
                checks=unacked,
                timeout_seconds=timeout,
            )
        return unacked

    def _drop(self, names: set[str]) -> None:
        ledger = self._ledger
        for name in names:
            ledger.states.pop(name, None)
            for entry in self.outbox.pop_check(name):
                if not entry.maybe_sent:
                    self._remember_never_sent(entry.receiver, entry.notification.id)
            ledger.attention.discard(name)
            self._recorded.discard(name)
            ledger.changed.discard(name)
            ledger.track_firing(name, None)
        self.ownership.releasing -= names
        ledger.bump()

    def _remember_never_sent(self, receiver: str, id: int) -> None:
        self._never_sent[(receiver, id)] = None
        if len(self._never_sent) > _NEVER_SENT_KEPT:
            del self._never_sent[next(iter(self._never_sent))]

    # -- writing records -----------------------------------------------------------------------

    def write_record(self, name: str) -> asyncio.Future[bool] | None:
        """Write the check's record now (a tombstone once it has nothing to keep)."""
        self._ledger.changed.discard(name)
        if self._sink is None or not self.ownership.may_write(name):
            return None
        state = self._ledger.states.get(name)
        entries = self.outbox.of(name)
        if (state is None or state.is_quiet()) and not entries:
            if name not in self._recorded:
                return None
            self._recorded.discard(name)
            return self._sink.write(name, None)
        check = self._catalog.checks.get(name)
        probe_type = check.info.probe_type if check is not None else ""
        labels = check.info.labels if check is not None else {}
        self._recorded.add(name)
        value = encode_record(
            name, state, probe_type, labels, entries, self._replica, self._clock()
        )
        return self._sink.write(name, value)

    def write_records(self) -> None:
        """Write the record of every check that changed."""
        for name in list(self._ledger.changed):
            self.write_record(name)
        self._ledger.changed.clear()

    async def record_loop(self) -> None:
        while True:
            await asyncio.sleep(RECORD_INTERVAL)
            try:
                self.write_records()
            except Exception:  # a bug here must not stop every later write
                log.exception("writing alert records failed")


def shared_id_base() -> int:
    """Cluster mode: notification ids start at the current time in microseconds, so ids of
    different replicas (and of restarts) do not meet: PagerDuty group keys are made of them.
    A replica would have to decide more than a notification per microsecond to reach the
    ids of one started later; 2**53 is reached in the year 2255."""
    return time.time_ns() // 1000


def _left(deadline: float) -> float:
    return deadline - asyncio.get_running_loop().time()
