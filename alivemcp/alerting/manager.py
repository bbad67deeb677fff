"""Alert manager: the daemon feeds it every check result; it decides what to notify.

``observe`` is synchronous and cheap (policy arithmetic plus a queue append): probing never
waits on alerting. Time-driven decisions (reminders, the end of a maintenance window or of
flapping) are made by a tick every second. Delivery runs in one worker per receiver
(:mod:`alivemcp.alerting.delivery`); state is persisted by :mod:`alivemcp.alerting.state`.

The HTTP client is the alerting package's own ``httpx.AsyncClient`` (not the shared plumbing
client), so delivery has its own connection pool and timeouts.

Cluster mode (``shared=True``): the replicas share the checks by shard, and a check's alert
state lives in its record of the compacted alert-state topic (:mod:`.records`), written
through the :class:`~.records.RecordSink` that :class:`~alivemcp.cluster.alert_state.
AlertStateLog` attaches. The manager evaluates only the checks of shards it was handed
(:meth:`AlertManager.adopt`, with their records read to the end), and hands them back with
:meth:`AlertManager.release`. A notification is in its check's record (``queued``) before it
can be sent, its record says ``sending`` (acknowledged) before the receiver is called, and it
leaves the record once delivered. Receiver state (PagerDuty groups), rate limits and the
notification sequence stay per replica, in the local state file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import structlog
from prometheus_client import CollectorRegistry

from alivemcp.alerting.config import AlertingConfig, AlertPolicy, AlertPolicyOverride
from alivemcp.alerting.delivery import DeliveryJournal, DeliverySettings, DeliveryWorker
from alivemcp.alerting.maintenance import MaintenanceCalendar
from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import AlertKind, Event, Notification, dedup_key
from alivemcp.alerting.policy import (
    AlertState,
    CheckState,
    apply_result,
    reconcile,
    update_flapping,
)
from alivemcp.alerting.receivers import Failure, Receiver, build_receiver
from alivemcp.alerting.records import Outbox, RecordSink, SharedRecord, encode_record
from alivemcp.alerting.routing import Router
from alivemcp.alerting.state import RestoredCheck, StateStore
from alivemcp.probe import Status
from alivemcp.results import CheckInfo, CheckResult

__all__ = ["AdoptReport", "AlertManager", "send_test_notification"]

log = structlog.get_logger("alivemcp.alerting")

Clock = Callable[[], float]
#: Alerts of one check in decision order: a flapping notice precedes the held target alert.
_KIND_ORDER = (AlertKind.PROBE_BROKEN, AlertKind.FLAPPING, AlertKind.TARGET)
_FLAPPING_SEVERITY = "warning"
_FAILING = frozenset({Status.DOWN.value, Status.DEGRADED.value})
#: Cluster mode: how often changed records are written (a notification's record is also
#: written, and acknowledged, right before it is sent).
_RECORD_INTERVAL = 0.2
#: Cluster mode: how long a send waits for its record's acknowledgement before it is put
#: off (and retried).
_RECORD_ACK_SECONDS = 10.0
#: Cluster mode: notifications this process handed over without ever sending them, kept
#: (oldest forgotten first) in case their checks come back with a record that says
#: "sending" (a record that reached Kafka after its send was put off).
_NEVER_SENT_KEPT = 100_000


@dataclass(slots=True)
class AdoptReport:
    """What :meth:`AlertManager.adopt` did with the records of gained shards."""

    adopted: int = 0  # records whose state this replica continues
    resent: int = 0  # notifications queued again (queued ones; sending ones where harmless)
    possibly_undelivered: int = 0  # sending ones not repeated (the receiver must not see two)
    discarded: int = 0  # notifications for receivers no longer configured
    removed: int = 0  # records of checks no longer configured: their incidents resolved
    damaged_entries: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Check:
    info: CheckInfo
    policy: AlertPolicy
    enabled: bool
    match_labels: dict[str, str]  # labels plus `check` and `probe`, for matchers
    receivers: tuple[str, ...]  # target and flapping alerts
    owners: tuple[str, ...]  # probe-broken alerts


class AlertManager:
    #: As a consumer of the results pipeline.
    name = "alerting"

    def __init__(
        self,
        config: AlertingConfig,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
        data_dir: Path,
        registry: CollectorRegistry,
        *,
        clock: Clock = time.time,
        tick_interval: float = 1.0,
        shared: bool = False,
        status_of: Callable[[str], str | None] | None = None,
    ) -> None:
        """``shared``: cluster mode (see the module docstring): nothing is evaluated until
        :meth:`adopt`, state goes to the attached record sink. ``status_of``: the latest
        status of any check (cluster mode: the status store fed by the results stream), so
        a dependency owned by another replica still holds back its dependants' pages."""
        self.config = config
        self._clock = clock
        self._tick_interval = tick_interval
        self._shared = shared
        self._status_of = status_of
        # Cluster mode: the sink, which shard a check is in, the shards adopted; checks of a
        # shard being released (kept, written, not evaluated); checks with a live record.
        self._sink: RecordSink | None = None
        self._shard_of: Callable[[str], int] | None = None
        self._replica = ""
        self._held_shards: set[int] = set()
        self._releasing: set[str] = set()
        self._recorded: set[str] = set()
        self._outbox = Outbox()
        self._never_sent: dict[tuple[str, int], None] = {}
        self._metrics = AlertingMetrics(registry)
        self._store = StateStore(Path(data_dir), self._metrics)
        self._states: dict[str, CheckState] = {}
        self._attention: set[str] = set()  # checks whose state is not plain healthy
        self._checks: dict[str, _Check] = {}
        self._dependants: dict[str, tuple[str, ...]] = {}
        self._workers: dict[str, DeliveryWorker] = {}
        self._firing: dict[tuple[str, str], str] = {}  # (check, kind) -> severity
        self._firing_counts: Counter[str] = Counter()
        self._next_id = 1
        self._generation = 0  # bumped on every change worth persisting
        self._saved_generation = 0
        self._persist_lock = asyncio.Lock()
        self._persist_error: str | None = None
        self._changed: set[str] = set()  # checks whose saved entry is out of date
        self._fragments: dict[str, str] = {}  # check -> its cached JSON entry
        self._started = False
        self._client: httpx.AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._router = Router(config)
        self._calendar = MaintenanceCalendar(config.maintenance)
        self._set_checks(checks)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load persisted state and start the delivery workers."""
        if self._started:
            return
        self._started = True
        self._client = httpx.AsyncClient(follow_redirects=False)
        saved = self._store.load()  # validated: nothing in it can fail what follows
        self._next_id = saved.next_id
        for name, receiver_config in self._receiver_configs().items():
            self._add_worker(name, receiver_config)
        self._restore_receivers(saved.receivers)
        if self._shared:
            # Check state and queues live in the shared log; ids are unique across replicas.
            self._next_id = max(self._next_id, _shared_id_base())
            if saved.checks or any(saved.queues.values()):
                log.warning("alert state of standalone mode found in the data directory; "
                            "cluster mode keeps it in the alert-state topic and ignores it",
                            checks=len(saved.checks))
        else:
            self._restore_queues(saved.queues)
            self._restore_checks(saved.checks)
        for worker in self._workers.values():
            worker.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._tick_loop(), name="alivemcp-alerting-tick"),
            loop.create_task(self._flush_loop(), name="alivemcp-alerting-flush"),
        ]
        if self._shared:
            self._tasks.append(
                loop.create_task(self._record_loop(), name="alivemcp-alerting-records")
            )
        self._generation += 1
        await self.persist()
        log.info(
            "alerting started",
            receivers=sorted(self._workers),
            firing=sum(1 for s in self._states.values() for a in s.alerts.values() if a.active),
            queued=sum(len(w.queue) for w in self._workers.values()),
        )

    async def stop(self, grace: float = 5.0) -> None:
        """Flush what can be delivered within ``grace`` and persist the rest."""
        if not self._started:
            return
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        workers = list(self._workers.values())
        if self._shared:
            # Checks still held (the node did not release them) get their latest record; what
            # is queued is in it, for whichever replica takes them next. No drain: sending
            # needs an acknowledged record, and the log stops before alerting.
            self._write_records()
        else:
            for worker in workers:
                worker.drain()
        pending = [asyncio.ensure_future(w.wait_idle()) for w in workers
                   if w.queue and not self._shared]
        if pending:
            _done, not_done = await asyncio.wait(pending, timeout=grace)
            for fut in not_done:
                fut.cancel()
        for worker in workers:
            await worker.stop()
        self._generation += 1
        await self.persist()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._started = False
        left = sum(len(w.queue) for w in workers)
        if left and not self._shared:
            log.warning("alerting stopped with undelivered notifications; kept for next start",
                        undelivered=left)

    # -- feeding -----------------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        """As a consumer of the results pipeline."""
        self.observe(result)

    def observe(self, result: CheckResult) -> None:
        """Called for every finished run; must not block."""
        name = result.check.name
        check = self._checks.get(name)
        if check is None or not check.enabled:
            return
        if self._shared and not self._owns(name):
            return  # another replica's check, or one whose state is not read yet
        now = self._clock()
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = CheckState()
        was_quiet = name not in self._attention
        self._changed.add(name)
        apply_result(
            state, result.status, result.reason, now, check.policy, check.info.labels,
            result.observations,
        )
        update_flapping(state, now, check.policy)
        if was_quiet and state.is_quiet():
            # Healthy and staying healthy (the common case): nothing to decide, nothing for
            # dependants (they only react to a dependency that was failing).
            self._changed.discard(name)
            return
        self._attention.add(name)
        self._decide(name, now)
        for dependant in self._dependants.get(name, ()):
            self._decide(dependant, now)
        self._note_attention(name, state)
        # A healthy check that stays healthy changes nothing worth writing to disk.
        if not (was_quiet and name not in self._attention):
            self._generation += 1

    def tick(self) -> None:
        """Time-driven decisions: reminders, ends of maintenance windows and of flapping."""
        now = self._clock()
        for name in list(self._attention):
            state = self._states.get(name)
            check = self._checks.get(name)
            if state is None or check is None:
                self._attention.discard(name)
                continue
            if not _needs_tick(state, check.policy, now):
                continue
            changes = len(state.changes)
            update_flapping(state, now, check.policy)
            if len(state.changes) != changes:
                self._changed.add(name)
                self._generation += 1
            self._decide(name, now)  # anything it sends marks the state changed
            self._note_attention(name, state)

    def reconfigure(
        self,
        config: AlertingConfig,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> None:
        """Apply a reloaded config; keeps state of checks that still exist."""
        self.config = config
        self._router = Router(config)
        self._calendar = MaintenanceCalendar(config.maintenance)
        old_checks = self._checks
        self._set_checks(checks)
        if self._started:
            wanted = self._receiver_configs()
            for name in list(self._workers):
                if name not in wanted:
                    self._remove_worker(name)
            for name, receiver_config in wanted.items():
                worker = self._workers.get(name)
                if worker is None:
                    self._add_worker(name, receiver_config).start()
                else:
                    state = worker.receiver.state
                    worker.receiver = self._build_receiver(receiver_config)
                    worker.receiver.state = state
                    worker.settings = _settings(receiver_config, config)
        now = self._clock()
        for name in list(self._states):
            current = self._checks.get(name)
            if current is None or not current.enabled:
                gone = old_checks.get(name)
                reason = "alerting disabled for this check" if current else \
                    "check removed from the configuration"
                self._resolve_removed(name, gone.info if gone else None, now, reason)
        for name in list(self._attention):
            if name in self._checks:
                self._decide(name, now)
        self._generation += 1

    # -- persistence -------------------------------------------------------------------------

    async def persist(self) -> None:
        """Write the state if it changed, and return only once the state as of this call is
        on disk (a concurrent caller waits for the write in flight instead of skipping it).
        Failing to write is logged, never raised: paging without a saved state beats not
        paging."""
        wanted = self._generation
        if self._saved_generation >= wanted:
            return
        if not self._workers and not self._store.path.exists():
            # Alerting is not configured: nothing to page, so nothing to remember (and no
            # data directory appears for users who do not use alerting).
            self._saved_generation = wanted
            return
        async with self._persist_lock:
            if self._saved_generation >= wanted:
                return
            generation = self._generation
            try:
                await self._store.save(self._snapshot())
            except OSError as exc:
                error = exc.strerror or str(exc)
                if error != self._persist_error:  # once per distinct error, not every second
                    log.error("cannot persist alert state; a restart may re-page or lose "
                              "queued notifications", path=str(self._store.path), error=error)
                self._persist_error = error
                return
            if self._persist_error is not None:
                log.info("alert state persisted again", path=str(self._store.path))
                self._persist_error = None
            self._saved_generation = generation

    def _snapshot(self) -> dict[str, str]:
        """The state as JSON texts. Check entries are cached and re-serialised only for checks
        that changed since the last write, so a storm of thousands of firing checks does not
        make every send re-serialise all of them."""
        if self._shared:
            # Check state and queues are in the shared log; the file keeps what is per
            # replica (receiver state, the notification sequence).
            return {
                "next_id": str(self._next_id),
                "checks": "{}",
                "queues": "{}",
                "receivers": json.dumps(
                    {n: w.receiver.state.data for n, w in self._workers.items()}
                ),
            }
        for name in self._changed:
            state = self._states.get(name)
            if state is None or state.is_quiet():
                self._fragments.pop(name, None)
                continue
            check = self._checks.get(name)
            entry: dict[str, Any] = {"state": state.to_json()}
            if check is not None:
                entry["probe_type"] = check.info.probe_type
                entry["labels"] = dict(check.info.labels)
            self._fragments[name] = json.dumps(name) + ":" + json.dumps(entry)
        self._changed.clear()
        queues = ",".join(
            json.dumps(name) + ":[" + ",".join(n.json_text() for n in worker.queue) + "]"
            for name, worker in self._workers.items()
        )
        return {
            "next_id": str(self._next_id),
            "checks": "{" + ",".join(self._fragments.values()) + "}",
            "queues": "{" + queues + "}",
            "receivers": json.dumps({n: w.receiver.state.data for n, w in self._workers.items()}),
        }

    def _mark_dirty(self) -> None:
        self._generation += 1

    def _restore_receivers(self, saved: Mapping[str, Any]) -> None:
        for name, data in saved.items():
            worker = self._workers.get(name)
            if worker is None:
                continue  # a receiver no longer configured: its state means nothing now
            try:
                worker.receiver.restore_state(data)
            except ValueError as exc:
                self._store.entry_dropped("receivers", str(exc), receiver=name)

    def _restore_checks(self, saved: Mapping[str, RestoredCheck]) -> None:
        now = self._clock()
        for name, entry in saved.items():
            state = entry.state
            self._states[name] = state
            self._changed.add(name)
            check = self._checks.get(name)
            if check is None or not check.enabled:
                info = check.info if check is not None else CheckInfo(
                    name=name, probe_type=entry.probe_type, labels=dict(entry.labels)
                )
                reason = "alerting disabled for this check" if check else \
                    "check removed from the configuration"
                self._resolve_removed(name, info, now, reason)
                continue
            self._note_attention(name, state)
            self._track_firing(name, state)

    def _restore_queues(self, saved: Mapping[str, list[Notification]]) -> None:
        for name, notifications in saved.items():
            worker = self._workers.get(name)
            if worker is None:
                if notifications:
                    log.warning("discarding notifications for a receiver no longer configured",
                                receiver=name, count=len(notifications))
                    self._metrics.notifications.labels(name, "discarded").inc(len(notifications))
                continue
            for notification in notifications:
                worker.enqueue(notification)
            self._next_id = max([self._next_id, *(n.id + 1 for n in notifications)])

    # -- cluster mode: the shared log ---------------------------------------------------------

    def attach(self, sink: RecordSink, shard_of: Callable[[str], int], replica: str) -> None:
        """Cluster mode: where records go, which shard a check is in, who we are."""
        if not self._shared:
            raise RuntimeError("attach() needs an AlertManager built with shared=True")
        self._sink = sink
        self._shard_of = shard_of
        self._replica = replica

    def check_names(self) -> list[str]:
        return list(self._checks)

    def held_shards(self) -> frozenset[int]:
        return frozenset(self._held_shards)

    def _owns(self, name: str) -> bool:
        """Whether this replica evaluates the check now (always, standalone)."""
        if not self._shared:
            return True
        return (
            self._shard_of is not None
            and self._shard_of(name) in self._held_shards
            and name not in self._releasing
        )

    def _may_write(self, name: str) -> bool:
        """Whether this replica may write the check's record: never once it let go of its
        shard, or it would overwrite the new owner's."""
        return self._shard_of is not None and (
            self._shard_of(name) in self._held_shards or name in self._releasing
        )

    def adopt(
        self, shards: frozenset[int], records: Mapping[str, SharedRecord | None]
    ) -> AdoptReport:
        """Take over ``shards``, with ``records``: the latest valid record of each key read
        from their partitions (None: a tombstone). Open incidents continue (no new page,
        their resolve is sent once); queued notifications are sent; ones whose sending was
        interrupted are sent again only where a repeat is harmless."""
        report = AdoptReport()
        if self._shard_of is None:
            raise RuntimeError("adopt() before attach()")
        new = frozenset(shards) - self._held_shards
        self._held_shards |= new
        now = self._clock()
        for name, record in records.items():
            if record is None or self._shard_of(name) not in new:
                continue
            self._adopt_check(name, record, now, report)
        self._generation += 1
        return report

    def _adopt_check(
        self, name: str, record: SharedRecord, now: float, report: AdoptReport
    ) -> None:
        state = record.state
        report.adopted += 1
        report.damaged_entries.extend(record.dropped)
        self._states[name] = state
        self._recorded.add(name)
        self._changed.add(name)  # phases change below; a quiet one gets its tombstone
        for entry in record.outbox:
            worker = self._workers.get(entry.receiver)
            if worker is None:
                report.discarded += 1
                self._metrics.notifications.labels(entry.receiver, "discarded").inc()
                continue
            notification = entry.notification
            # Its send was put off here, and the check handed over before it happened.
            never_sent = (entry.receiver, notification.id) in self._never_sent
            self._never_sent.pop((entry.receiver, notification.id), None)
            if (entry.phase == "sending" and not never_sent
                    and not worker.receiver.repeats_are_harmless):
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
            self._outbox.add(entry.receiver, notification)
            worker.enqueue(notification)
        check = self._checks.get(name)
        if check is None or not check.enabled:
            report.removed += 1
            info = check.info if check is not None else CheckInfo(
                name=name, probe_type=record.probe_type, labels=dict(record.labels)
            )
            reason = "alerting disabled for this check" if check else \
                "check removed from the configuration"
            self._resolve_removed(name, info, now, reason)
            return
        self._note_attention(name, state)
        self._track_firing(name, state)

    async def release(self, shards: frozenset[int], timeout: float = 10.0) -> int:
        """Hand ``shards`` over: nothing of their checks is sent from now on (a send under
        way gets until ``timeout`` to finish), their latest records are written and
        acknowledged (within ``timeout``), then their state and notifications are dropped
        here. Returns how many records were not acknowledged in time."""
        gone = frozenset(shards) & self._held_shards
        if not gone or self._shard_of is None:
            return 0
        shard_of = self._shard_of
        names = {
            n for n in [*self._states, *self._outbox.checks(), *self._recorded]
            if shard_of(n) in gone
        }
        self._releasing |= names
        self._held_shards -= gone
        try:
            return await self._hand_over(names, timeout)
        finally:  # also when cancelled: nothing of them stays here
            self._drop(names)

    async def _hand_over(self, names: set[str], timeout: float) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        calling: list[asyncio.Future[None]] = []
        for receiver, worker in self._workers.items():
            handed = worker.discard(lambda n: n.check in names)
            if handed:
                self._metrics.notifications.labels(receiver, "handed_over").inc(len(handed))
            if any(n.check in names for n in worker.calling):
                calling.append(asyncio.ensure_future(worker.wait_call_done()))
        for name in names:
            for entry in self._outbox.of(name):
                if entry.phase == "sending" and not entry.maybe_sent:
                    entry.phase = "queued"  # recorded for a send that will not happen
        if calling:
            _finished, unfinished = await asyncio.wait(
                calling, timeout=max(0.0, _left(deadline))
            )
            for waiting in unfinished:
                waiting.cancel()
            # What those sends left in the queues (a refusal) is the next owner's now.
            for receiver, worker in self._workers.items():
                handed = worker.discard(lambda n: n.check in names)
                if handed:
                    self._metrics.notifications.labels(receiver, "handed_over").inc(len(handed))
        acks = [f for f in (self._write_record(n) for n in sorted(names)) if f is not None]
        unacked = 0
        if acks:
            answered, late = await asyncio.wait(acks, timeout=max(0.0, _left(deadline)))
            unacked = len(late) + sum(1 for f in answered if not f.result())
        if unacked:
            log.error("alert state of released checks not acknowledged in time; the next "
                      "owner may repeat or miss a notification for them",
                      checks=unacked, timeout_seconds=timeout)
        return unacked

    def _drop(self, names: set[str]) -> None:
        for name in names:
            self._states.pop(name, None)
            for entry in self._outbox.pop_check(name):
                if not entry.maybe_sent:
                    self._remember_never_sent(entry.receiver, entry.notification.id)
            self._attention.discard(name)
            self._recorded.discard(name)
            self._changed.discard(name)
            self._track_firing(name, None)
        self._releasing -= names
        self._generation += 1

    def _remember_never_sent(self, receiver: str, id: int) -> None:
        self._never_sent[(receiver, id)] = None
        if len(self._never_sent) > _NEVER_SENT_KEPT:
            del self._never_sent[next(iter(self._never_sent))]

    def _write_record(self, name: str) -> asyncio.Future[bool] | None:
        """Write the check's record now (a tombstone once it has nothing to keep)."""
        self._changed.discard(name)
        if self._sink is None or not self._may_write(name):
            return None
        state = self._states.get(name)
        entries = self._outbox.of(name)
        if (state is None or state.is_quiet()) and not entries:
            if name not in self._recorded:
                return None
            self._recorded.discard(name)
            return self._sink.write(name, None)
        check = self._checks.get(name)
        probe_type = check.info.probe_type if check is not None else ""
        labels = check.info.labels if check is not None else {}
        self._recorded.add(name)
        value = encode_record(name, state, probe_type, labels, entries, self._replica,
                              self._clock())
        return self._sink.write(name, value)

    def _write_records(self) -> None:
        for name in list(self._changed):
            self._write_record(name)
        self._changed.clear()

    async def _record_loop(self) -> None:
        while True:
            await asyncio.sleep(_RECORD_INTERVAL)
            try:
                self._write_records()
            except Exception:  # a bug here must not stop every later write
                log.exception("writing alert records failed")

    # -- cluster mode: the delivery journal ----------------------------------------------------

    async def before_send(self, receiver: str, batch: Sequence[Notification]) -> bool:
        """Mark the batch ``sending`` in its checks' records and wait for the brokers to
        acknowledge them; False (nothing sent) if they do not within the bound."""
        touched: set[str] = set()
        marked = []
        for n in batch:
            entry = self._outbox.get(receiver, n)
            if entry is None or not self._owns(n.check):
                continue
            if entry.phase != "sending":
                entry.phase = "sending"
                marked.append(entry)
            touched.add(n.check)
        acks = [f for f in (self._write_record(name) for name in touched) if f is not None]
        if not acks:
            return True
        done, late = await asyncio.wait(acks, timeout=_RECORD_ACK_SECONDS)
        if not late and all(f.result() for f in done):
            for n in batch:
                entry = self._outbox.get(receiver, n)
                # The worker calls the receiver next with what is still ours (wanted()),
                # with no pause in between.
                if entry is not None and self._owns(n.check):
                    entry.handed = True
            return True
        for entry in marked:
            if entry.phase == "sending" and not entry.maybe_delivered:
                entry.phase = "queued"
                self._changed.add(entry.notification.check)
        return False

    def wanted(self, notification: Notification) -> bool:
        return self._owns(notification.check)

    async def after_send(
        self,
        receiver: str,
        done: Sequence[Notification],
        unsent: Sequence[Notification],
        maybe_delivered: bool,
    ) -> None:
        touched = set()
        for n in done:
            if self._outbox.remove(receiver, n):
                touched.add(n.check)
        for n in unsent:
            entry = self._outbox.get(receiver, n)
            if entry is None:
                continue
            entry.handed = False
            entry.maybe_delivered = entry.maybe_delivered or maybe_delivered
            if not entry.maybe_delivered:
                entry.phase = "queued"  # the receiver answered no, or was never reached
            touched.add(n.check)
        # Written now, not by the next round of the record loop: a retry soon marks them
        # sending again, and a replica lost in between should leave "queued" behind.
        for name in touched:
            self._write_record(name)
        # Receiver state (PagerDuty groups) stays in this replica's file.
        self._generation += 1
        await self.persist()

    # -- decisions ---------------------------------------------------------------------------

    def _decide(self, name: str, now: float) -> None:
        state = self._states.get(name)
        check = self._checks.get(name)
        if state is None or check is None:
            return
        window = self._calendar.active_for(check.match_labels, now) if self._calendar else None
        for kind in _KIND_ORDER:
            alert = state.alerts.get(kind.value)
            if alert is None:
                continue
            held = window is not None
            if kind is AlertKind.PROBE_BROKEN:
                alert.severity = self.config.probe_broken_severity
            elif kind is AlertKind.FLAPPING:
                alert.severity = _FLAPPING_SEVERITY
            else:
                flapping = state.alerts.get(AlertKind.FLAPPING.value)
                held = held or bool(flapping and flapping.active) or self._dependency_failing(
                    check
                )
            event = reconcile(alert, now, check.policy, held)
            if event is not None:
                self._emit(check, state, kind, alert, event, now)
        self._track_firing(name, state)

    def _dependency_failing(self, check: _Check) -> bool:
        """A dependency that fires, or whose latest result failed, suppresses dependants: the
        second case covers dependants whose own threshold is reached first."""
        for dep in check.info.depends_on:
            state = self._states.get(dep)
            if state is None:
                # Cluster mode: another replica evaluates it; its latest result is in the
                # status store.
                if (self._status_of is not None and not self._owns(dep)
                        and self._status_of(dep) in _FAILING):
                    return True
                continue
            target = state.alerts.get(AlertKind.TARGET.value)
            if (target is not None and target.active) or state.last_status in _FAILING:
                return True
        return False

    def _emit(
        self,
        check: _Check,
        state: CheckState,
        kind: AlertKind,
        alert: AlertState,
        event: Event,
        now: float,
        note: str = "",
    ) -> None:
        notification = Notification(
            id=self._next_id,
            check=check.info.name,
            probe_type=check.info.probe_type,
            kind=kind,
            event=event,
            severity=alert.severity or "warning",
            status=(alert.status if kind is AlertKind.TARGET and event is not Event.RESOLVED
                    and alert.status else state.last_status) or "unknown",
            reason=alert.reason or state.last_reason,
            since=alert.since or now,
            created_at=now,
            dedup_key=dedup_key(check.info.name, kind),
            labels=dict(check.info.labels),
            observations=_finite(state.observations),
            note=note,
        )
        self._next_id += 1
        receivers = check.owners if kind is AlertKind.PROBE_BROKEN else check.receivers
        for receiver in receivers:
            worker = self._workers.get(receiver)
            if worker is not None:
                copy = notification.copy()
                if self._shared:
                    # In the check's record (queued) before the worker can send it: the
                    # worker's before_send writes the record and waits for its ack.
                    self._outbox.add(receiver, copy)
                worker.enqueue(copy)
        self._changed.add(check.info.name)
        self._generation += 1
        log.info(
            "alert notification",
            check=check.info.name,
            alert=kind.value,
            notification_event=event.value,
            severity=notification.severity,
            reason=notification.reason[:200],
            receivers=list(receivers),
        )

    def _resolve_removed(
        self,
        name: str,
        info: CheckInfo | None,
        now: float,
        reason: str = "check removed from the configuration",
    ) -> None:
        """A check left the config: close its open incidents instead of leaving them open."""
        state = self._states.pop(name, None)
        self._attention.discard(name)
        self._changed.add(name)
        self._track_firing(name, None)
        if state is None or info is None:
            return
        labels = {**info.labels, "check": name, "probe": info.probe_type}
        check = _Check(
            info=info,
            policy=self.config.policy,
            enabled=True,
            match_labels=labels,
            receivers=self._router.receivers_for(labels),
            owners=self._router.owners,
        )
        for kind in _KIND_ORDER:
            alert = state.alerts.get(kind.value)
            if alert is not None and alert.notified:
                alert.active = False
                alert.reason = reason
                self._emit(check, state, kind, alert, Event.RESOLVED, now)
                alert.notified = False
        self._generation += 1

    def _note_attention(self, name: str, state: CheckState) -> None:
        if state.is_quiet():
            self._attention.discard(name)
        else:
            self._attention.add(name)

    def _track_firing(self, name: str, state: CheckState | None) -> None:
        """Keep ``alivemcp_alerts_firing`` current in O(alerts of this check)."""
        for kind in AlertKind:
            alert = state.alerts.get(kind.value) if state is not None else None
            key = (name, kind.value)
            new = (alert.severity or "warning") if alert is not None and alert.active else None
            old = self._firing.get(key)
            if new == old:
                continue
            if old is not None:
                self._firing_counts[old] -= 1
                del self._firing[key]
            if new is not None:
                self._firing[key] = new
                self._firing_counts[new] += 1
            self._metrics.set_firing(self._firing_counts)

    # -- configuration -----------------------------------------------------------------------

    def _set_checks(
        self, checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]]
    ) -> None:
        entries: dict[str, _Check] = {}
        dependants: dict[str, list[str]] = {}
        for info, override in checks:
            policy = override.apply_to(self.config.policy) if override else self.config.policy
            labels = {**info.labels, "check": info.name, "probe": info.probe_type}
            if override is not None and override.receivers is not None:
                receivers = tuple(override.receivers)
            else:
                receivers = self._router.receivers_for(labels)
            entries[info.name] = _Check(
                info=info,
                policy=policy,
                enabled=override.enabled if override else True,
                match_labels=labels,
                receivers=receivers,
                owners=self._router.owners,
            )
            for dep in info.depends_on:
                dependants.setdefault(dep, []).append(info.name)
        self._checks = entries
        self._dependants = {k: tuple(v) for k, v in dependants.items()}
        for name, check in entries.items():
            unknown = [r for r in check.receivers if self.config.receiver(r) is None]
            if unknown:
                log.warning("check routes to receivers that are not configured",
                            check=name, receivers=unknown)

    def _receiver_configs(self) -> dict[str, Any]:
        return {r.name: r for r in self.config.receivers}

    def _build_receiver(self, receiver_config: Any) -> Receiver:
        assert self._client is not None
        return build_receiver(receiver_config, self._client, self.config.external_url)

    def _add_worker(self, name: str, receiver_config: Any) -> DeliveryWorker:
        journal: DeliveryJournal = self if self._shared else _FileJournal(self)
        worker = DeliveryWorker(
            self._build_receiver(receiver_config),
            _settings(receiver_config, self.config),
            self._metrics,
            journal,
        )
        self._workers[name] = worker
        return worker

    def _remove_worker(self, name: str) -> None:
        worker = self._workers.pop(name)
        if worker.queue:
            log.warning("receiver removed from the config; discarding its queue",
                        receiver=name, count=len(worker.queue))
            self._metrics.notifications.labels(name, "discarded").inc(len(worker.queue))
        if self._shared:
            self._changed.update(self._outbox.drop_receiver(name))
        asyncio.get_running_loop().create_task(worker.stop())
        self._metrics.remove_receiver(name)

    # -- background --------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_interval)
            try:
                self.tick()
            except Exception:  # a bug here must not stop reminders forever
                log.exception("alerting tick failed")

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.persist()

    # -- introspection (tests, status) ---------------------------------------------------------

    def firing_alerts(self) -> list[dict[str, Any]]:
        """Alerts that fire now (for a status API): check, alert kind, severity, since,
        whether receivers were told (False: held by maintenance, a dependency or flapping)."""
        out = []
        for (name, kind), severity in sorted(self._firing.items()):
            state = self._states.get(name)
            alert = state.alerts.get(kind) if state is not None else None
            if alert is None:
                continue
            out.append({"check": name, "alert": kind, "severity": severity,
                        "since": alert.since, "reason": alert.reason,
                        "notified": alert.notified})
        return out

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


class _FileJournal:
    """Standalone: the state file is written before a send and after it."""

    def __init__(self, manager: AlertManager) -> None:
        self._manager = manager

    async def before_send(self, receiver: str, batch: Sequence[Notification]) -> bool:
        await self._manager.persist()
        return True

    def wanted(self, notification: Notification) -> bool:
        return True

    async def after_send(
        self,
        receiver: str,
        done: Sequence[Notification],
        unsent: Sequence[Notification],
        maybe_delivered: bool,
    ) -> None:
        self._manager._mark_dirty()
        await self._manager.persist()


def _shared_id_base() -> int:
    """Cluster mode: notification ids start at the current time in microseconds, so ids of
    different replicas (and of restarts) do not meet: PagerDuty group keys are made of them.
    A replica would have to decide more than a notification per microsecond to reach the
    ids of one started later; 2**53 is reached in the year 2255."""
    return time.time_ns() // 1000


def _left(deadline: float) -> float:
    return deadline - asyncio.get_running_loop().time()


def _finite(observations: Mapping[str, float]) -> dict[str, float]:
    """Observations that JSON can carry: NaN and infinities are not JSON (a receiver would
    reject the body, and the saved queue would not load back)."""
    return {
        name: float(value) for name, value in observations.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
        and math.isfinite(value)
    }


def _needs_tick(state: CheckState, policy: AlertPolicy, now: float) -> bool:
    """Whether time alone can change anything for this check: flap history to age out, an
    alert held back (a maintenance window may have ended), or a reminder due."""
    if state.changes:
        return True
    for alert in state.alerts.values():
        if alert.active and not alert.notified:
            return True
        if (
            alert.notified
            and policy.repeat_interval is not None
            and now - alert.last_notified_at >= policy.repeat_interval
        ):
            return True
    return False


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


async def send_test_notification(config: AlertingConfig, receiver: str) -> tuple[bool, str]:
    """Send one test notification to ``receiver``; returns (delivered, message)."""
    receiver_config = config.receiver(receiver)
    if receiver_config is None:
        known = ", ".join(r.name for r in config.receivers) or "none configured"
        return False, f"no receiver named {receiver!r} (known: {known})"
    now = time.time()
    notification = Notification(
        id=0,
        check="alivemcp-test",
        probe_type="test",
        kind=AlertKind.TARGET,
        event=Event.TEST,
        severity="info",
        status="up",
        reason="Test notification from alivemcp alert-test: this receiver is reachable.",
        since=now,
        created_at=now,
        dedup_key="alivemcp/alert-test",
    )
    async with httpx.AsyncClient(follow_redirects=False) as client:
        sender = build_receiver(receiver_config, client, config.external_url)
        failure: Failure | None = None
        for attempt in range(3):
            result = await sender.send([notification])
            failure = result.failure
            if failure is None:
                return True, f"test notification delivered to {receiver} ({sender.type_name})"
            if failure.kind == "permanent":
                break
            if attempt < 2:
                await asyncio.sleep(min(failure.retry_after or 1.0 * (attempt + 1), 5.0))
    assert failure is not None
    return False, f"{receiver} ({sender.type_name}): {failure.kind} failure: {failure.detail}"
