"""Alert manager: the daemon feeds it every check result; it decides what to notify.

``observe`` is synchronous and cheap (policy arithmetic plus a queue append): probing never
waits on alerting. Time-driven decisions (reminders, the end of a maintenance window or of
flapping) are made by a tick every second. The manager wires its parts together and runs
their background tasks:

* :mod:`.decisions`: a result (or time) in, notifications out, per check;
* :mod:`.ledger`: each check's alert state, and what changed since it was saved;
* :mod:`.workers`: one delivery worker per receiver (:mod:`.delivery`);
* :mod:`.persistence`: the local state file (:mod:`.state`);
* cluster mode (``shared=True``): :mod:`.shared` (records in the compacted alert-state topic:
  adopt, release) and :mod:`.shared_journal` (record before send).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import structlog
from prometheus_client import CollectorRegistry

from alivemcp.alerting.catalog import CheckCatalog
from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.alerting.decisions import Decider
from alivemcp.alerting.delivery import DeliveryJournal
from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import AlertKind, Event, Notification
from alivemcp.alerting.persistence import FileJournal, LocalStateFile
from alivemcp.alerting.receivers import Failure, build_receiver
from alivemcp.alerting.records import Outbox, RecordSink, SharedRecord
from alivemcp.alerting.routing import Router
from alivemcp.alerting.shared import AdoptReport, Ownership, SharedAlertState, shared_id_base
from alivemcp.alerting.shared_journal import SharedJournal
from alivemcp.alerting.state import StateStore
from alivemcp.alerting.workers import ReceiverWorkers
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.hygiene.heap import dropping
from alivemcp.toolsurface.tracker import SurfaceVerdict

__all__ = ["AdoptReport", "AlertManager", "send_test_notification"]

log = structlog.get_logger("alivemcp.alerting")

Clock = Callable[[], float]


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
        """``shared``: cluster mode: nothing is evaluated until :meth:`adopt`, state goes to
        the record sink :meth:`attach` gives. ``status_of``: the latest status of any check
        (cluster mode: the status store fed by the results stream), so a dependency owned by
        another replica still holds back its dependants' pages."""
        self.config = config
        self._clock = clock
        self._tick_interval = tick_interval
        self._started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._metrics = AlertingMetrics(registry)
        self._ledger = AlertLedger(self._metrics)
        router = Router(config)
        self._catalog = CheckCatalog()
        self._catalog.load(config, router, checks)
        outbox = Outbox() if shared else None
        self._receivers = ReceiverWorkers(self._metrics, outbox)
        self._ownership = Ownership(shared)
        self._decider = Decider(
            config,
            router,
            self._catalog,
            self._ledger,
            self._receivers.dispatch,
            clock=clock,
            owns=self._ownership.owns,
            status_of=status_of,
        )
        self._shared: SharedAlertState | None = None
        if outbox is not None:
            self._shared = SharedAlertState(
                self._ownership,
                self._ledger,
                self._catalog,
                self._receivers,
                outbox,
                self._metrics,
                clock,
                self._decider.resolve_removed,
            )
        self._state_file = LocalStateFile(
            StateStore(Path(data_dir), self._metrics),
            self._ledger,
            self._catalog,
            self._receivers,
            self._decider.resolve_removed,
            shared=shared,
        )
        self._journal: DeliveryJournal = (
            SharedJournal(self._shared, self._ledger, self._state_file.persist)
            if self._shared is not None
            else FileJournal(self._state_file, self._ledger)
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load persisted state and start the delivery workers."""
        if self._started:
            return
        self._started = True
        saved = self._state_file.store.load()  # validated: nothing in it can fail what follows
        self._receivers.open(self.config, self._journal)
        self._state_file.restore(saved, self._clock())
        if self._shared is not None:
            # Ids are unique across replicas (check state and queues live in the shared log).
            self._ledger.next_id = max(self._ledger.next_id, shared_id_base())
        self._receivers.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._tick_loop(), name="alivemcp-alerting-tick"),
            loop.create_task(self._flush_loop(), name="alivemcp-alerting-flush"),
        ]
        if self._shared is not None:
            self._tasks.append(
                loop.create_task(self._shared.record_loop(), name="alivemcp-alerting-records")
            )
        self._ledger.bump()
        await self.persist()
        log.info(
            "alerting started",
            receivers=self._receivers.names(),
            firing=self._ledger.active_alerts(),
            queued=self._receivers.queued(),
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
        if self._shared is not None:
            # Checks still held (the node did not release them) get their latest record; what
            # is queued is in it, for whichever replica takes them next. No drain: sending
            # needs an acknowledged record, and the log stops before alerting.
            self._shared.write_records()
        else:
            self._receivers.drain()
            await self._receivers.wait_drained(grace)
        await self._receivers.stop()
        self._ledger.bump()
        await self.persist()
        await self._receivers.close()
        self._started = False
        left = self._receivers.queued()
        if left and self._shared is None:
            log.warning(
                "alerting stopped with undelivered notifications; kept for next start",
                undelivered=left,
            )

    async def persist(self) -> None:
        """Write the local state file if it changed (see :class:`.LocalStateFile`)."""
        await self._state_file.persist()

    # -- feeding -----------------------------------------------------------------------------

    def consume(self, result: CheckResult) -> None:
        """As a consumer of the results pipeline."""
        self.observe(result)

    def observe(self, result: CheckResult) -> None:
        """Called for every finished run; must not block."""
        self._decider.observe(result)

    def observe_surface(self, verdict: SurfaceVerdict) -> None:
        """The tool-surface tracker's judgement of a check (see ``Decider.observe_surface``)."""
        self._decider.observe_surface(verdict)

    def observe_disagreement(self, check: CheckInfo, dissent: tuple[str, ...], reason: str) -> None:
        """Cluster mode with several locations: the check's locations that say down while
        fewer than its quorum do (empty: none), with the quorum's reason; opens, updates or
        resolves its ``location_disagrees`` alert (see ``Decider.observe_disagreement``).
        Must not block."""
        self._decider.observe_disagreement(check, dissent, reason)

    def tick(self) -> None:
        """Time-driven decisions: reminders, ends of maintenance windows and of flapping."""
        self._decider.tick()

    def reconfigure(
        self,
        config: AlertingConfig,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> None:
        """Apply a reloaded config; keeps state of checks that still exist."""
        for _ in self.reconfiguring(config, checks):
            pass

    def reconfiguring(
        self,
        config: AlertingConfig,
        checks: Iterable[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> Iterator[None]:
        """:meth:`reconfigure` in steps, yielding after each check's catalog entry is made:
        the caller may let other work run in between. The new config takes effect in one
        step; the steps after it close the incidents of checks gone, decide again for the
        others and free the replaced entries, a slice at a time."""
        router = Router(config)
        previous = self._catalog.checks
        yield from self._catalog.loading(config, router, checks)
        self.config = config
        self._decider.configure(config, router)
        if self._started:
            self._ledger.changed.update(self._receivers.reconfigure(config))
        yield from self._decider.applying_config(previous)
        self._ledger.bump()
        doomed = list(previous.values())
        del previous
        yield from dropping(doomed)

    def change_checks(
        self,
        added: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
        removed: Sequence[str],
        reason: str,
    ) -> None:
        """Add or replace some checks and remove others under the current config (a
        discovery refresh), leaving the rest alone. A removed check's open incidents are
        resolved with ``reason``; a replaced one keeps its state."""
        previous = self._catalog.checks
        self._catalog.change(self._decider.router, added, removed)
        now = self._clock()
        for name in removed:
            gone = previous.get(name)
            if name in self._ledger.states or name in self._ledger.attention:
                self._decider.resolve_removed(name, gone.info if gone else None, now, reason)
        self._ledger.bump()

    # -- cluster mode --------------------------------------------------------------------------

    def attach(self, sink: RecordSink, shard_of: Callable[[str], int], replica: str) -> None:
        """Cluster mode: where records go, which shard a check is in, who we are."""
        if self._shared is None:
            raise RuntimeError("attach() needs an AlertManager built with shared=True")
        self._shared.attach(sink, shard_of, replica)

    def check_names(self) -> list[str]:
        return list(self._catalog.checks)

    def held_shards(self) -> frozenset[int]:
        return frozenset(self._ownership.held)

    def adopt(
        self, shards: frozenset[int], records: Mapping[str, SharedRecord | None]
    ) -> AdoptReport:
        """Take over ``shards``, with ``records``: the latest valid record of each key read
        from their partitions (None: a tombstone). Open incidents continue (no new page,
        their resolve is sent once); queued notifications are sent; ones whose sending was
        interrupted are sent again only where a repeat is harmless."""
        if self._shared is None:
            raise RuntimeError("adopt() before attach()")
        return self._shared.adopt(shards, records)

    async def release(self, shards: frozenset[int], timeout: float = 10.0) -> int:
        """Hand ``shards`` over: nothing of their checks is sent from now on (a send under
        way gets until ``timeout`` to finish), their latest records are written and
        acknowledged (within ``timeout``), then their state and notifications are dropped
        here. Returns how many records were not acknowledged in time."""
        if self._shared is None:
            return 0
        return await self._shared.release(shards, timeout)

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
        return self._ledger.firing_alerts()

    def queue_depths(self) -> dict[str, int]:
        return self._receivers.queue_depths()

    async def wait_delivered(self, timeout: float = 30.0) -> bool:
        """Wait until every queue is empty; False on timeout."""
        return await self._receivers.wait_delivered(timeout)


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
