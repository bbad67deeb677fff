"""Alert manager: the daemon feeds it every check result; it decides what to notify.

``observe`` is synchronous and cheap (policy arithmetic plus a queue append): probing never
waits on alerting. Time-driven decisions (reminders, the end of a maintenance window or of
flapping) are made by a tick every second. Delivery runs in one worker per receiver
(:mod:`alivemcp.alerting.delivery`); state is persisted by :mod:`alivemcp.alerting.state`.

The HTTP client is the alerting package's own ``httpx.AsyncClient`` (not the shared plumbing
client), so delivery has its own connection pool and timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import structlog
from prometheus_client import CollectorRegistry

from alivemcp.alerting.config import AlertingConfig, AlertPolicy, AlertPolicyOverride
from alivemcp.alerting.delivery import DeliverySettings, DeliveryWorker
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
from alivemcp.alerting.routing import Router
from alivemcp.alerting.state import RestoredCheck, StateStore
from alivemcp.probe import Status
from alivemcp.results import CheckInfo, CheckResult

__all__ = ["AlertManager", "send_test_notification"]

log = structlog.get_logger("alivemcp.alerting")

Clock = Callable[[], float]
#: Alerts of one check in decision order: a flapping notice precedes the held target alert.
_KIND_ORDER = (AlertKind.PROBE_BROKEN, AlertKind.FLAPPING, AlertKind.TARGET)
_FLAPPING_SEVERITY = "warning"
_FAILING = frozenset({Status.DOWN.value, Status.DEGRADED.value})


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
    ) -> None:
        self.config = config
        self._clock = clock
        self._tick_interval = tick_interval
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
        self._restore_queues(saved.queues)
        self._restore_checks(saved.checks)
        for worker in self._workers.values():
            worker.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._tick_loop(), name="alivemcp-alerting-tick"),
            loop.create_task(self._flush_loop(), name="alivemcp-alerting-flush"),
        ]
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
        for worker in workers:
            worker.drain()
        pending = [asyncio.ensure_future(w.wait_idle()) for w in workers if w.queue]
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
        if left:
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
                worker.enqueue(notification.copy())
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
        worker = DeliveryWorker(
            self._build_receiver(receiver_config),
            _settings(receiver_config, self.config),
            self._metrics,
            self.persist,
            self._mark_dirty,
        )
        self._workers[name] = worker
        return worker

    def _remove_worker(self, name: str) -> None:
        worker = self._workers.pop(name)
        if worker.queue:
            log.warning("receiver removed from the config; discarding its queue",
                        receiver=name, count=len(worker.queue))
            self._metrics.notifications.labels(name, "discarded").inc(len(worker.queue))
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
