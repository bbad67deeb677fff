"""The manager's state in the local state file: what goes in it, when it is written, and what a
start restores from it (the file itself: :mod:`alivemcp.alerting.state`).

Standalone, the file holds everything that must survive a restart: check states, queued
notifications, receiver state, the notification sequence. In cluster mode check states and
queues live in the shared alert-state topic, and the file keeps only what is per replica
(receiver state, the notification sequence).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from alivemcp.alerting.catalog import CheckCatalog
from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.model import Notification
from alivemcp.alerting.state import RestoredCheck, SavedState, StateStore
from alivemcp.alerting.workers import ReceiverWorkers
from alivemcp.engine.results import CheckInfo

__all__ = ["FileJournal", "LocalStateFile"]

log = structlog.get_logger("alivemcp.alerting")

#: Closes the incidents of a check no longer alerting: (name, info, now, reason).
ResolveRemoved = Callable[[str, CheckInfo | None, float, str], None]


class LocalStateFile:
    """Writes the ledger (and queues, receiver state) to the state file when it changed."""

    def __init__(
        self,
        store: StateStore,
        ledger: AlertLedger,
        catalog: CheckCatalog,
        receivers: ReceiverWorkers,
        resolve_removed: ResolveRemoved,
        *,
        shared: bool,
    ) -> None:
        self.store = store
        self._ledger = ledger
        self._catalog = catalog
        self._receivers = receivers
        self._resolve_removed = resolve_removed
        self._shared = shared
        self._saved_generation = 0
        self._lock = asyncio.Lock()
        self._error: str | None = None
        self._fragments: dict[str, str] = {}  # check -> its cached JSON entry

    async def persist(self) -> None:
        """Write the state if it changed, and return only once the state as of this call is
        on disk (a concurrent caller waits for the write in flight instead of skipping it).
        Failing to write is logged, never raised: paging without a saved state beats not
        paging."""
        wanted = self._ledger.generation
        if self._saved_generation >= wanted:
            return
        if not self._receivers and not self.store.path.exists():
            # Alerting is not configured: nothing to page, so nothing to remember (and no
            # data directory appears for users who do not use alerting).
            self._saved_generation = wanted
            return
        async with self._lock:
            if self._saved_generation >= wanted:
                return
            generation = self._ledger.generation
            try:
                await self.store.save(self._snapshot())
            except OSError as exc:
                error = exc.strerror or str(exc)
                if error != self._error:  # once per distinct error, not every second
                    log.error(
                        "cannot persist alert state; a restart may re-page or lose "
                        "queued notifications",
                        path=str(self.store.path),
                        error=error,
                    )
                self._error = error
                return
            if self._error is not None:
                log.info("alert state persisted again", path=str(self.store.path))
                self._error = None
            self._saved_generation = generation

    def _snapshot(self) -> dict[str, str]:
        """The state as JSON texts. Check entries are cached and re-serialised only for checks
        that changed since the last write, so a storm of thousands of firing checks does not
        make every send re-serialise all of them."""
        ledger = self._ledger
        if self._shared:
            # Check state and queues are in the shared log; the file keeps what is per
            # replica (receiver state, the notification sequence).
            return {
                "next_id": str(ledger.next_id),
                "checks": "{}",
                "queues": "{}",
                "receivers": json.dumps(self._receivers.states()),
            }
        for name in ledger.changed:
            state = ledger.states.get(name)
            if state is None or state.is_quiet():
                self._fragments.pop(name, None)
                continue
            check = self._catalog.checks.get(name)
            entry: dict[str, Any] = {"state": state.to_json()}
            if check is not None:
                entry["probe_type"] = check.info.probe_type
                entry["labels"] = dict(check.info.labels)
            self._fragments[name] = json.dumps(name) + ":" + json.dumps(entry)
        ledger.changed.clear()
        queues = ",".join(
            json.dumps(name) + ":[" + ",".join(n.json_text() for n in worker.queue) + "]"
            for name, worker in self._receivers.items()
        )
        return {
            "next_id": str(ledger.next_id),
            "checks": "{" + ",".join(self._fragments.values()) + "}",
            "queues": "{" + queues + "}",
            "receivers": json.dumps(self._receivers.states()),
        }

    # -- start -------------------------------------------------------------------------------

    def restore(self, saved: SavedState, now: float) -> None:
        """What the last run saved: the notification sequence and receiver state; standalone
        also the queues and check states (checks gone since get their incidents closed)."""
        self._ledger.next_id = saved.next_id
        self._receivers.restore_states(saved.receivers, self.store)
        if self._shared:
            if saved.checks or any(saved.queues.values()):
                log.warning(
                    "alert state of standalone mode found in the data directory; "
                    "cluster mode keeps it in the alert-state topic and ignores it",
                    checks=len(saved.checks),
                )
            return
        next_id = self._receivers.restore_queues(saved.queues)
        self._ledger.next_id = max(self._ledger.next_id, next_id)
        self._restore_checks(saved.checks, now)

    def _restore_checks(self, saved: Mapping[str, RestoredCheck], now: float) -> None:
        ledger = self._ledger
        for name, entry in saved.items():
            state = entry.state
            ledger.states[name] = state
            ledger.changed.add(name)
            if not self._catalog.alerting(name):
                info = self._catalog.info_of(name, entry.probe_type, entry.labels)
                self._resolve_removed(name, info, now, self._catalog.why_not_alerting(name))
                continue
            ledger.note_attention(name, state)
            ledger.track_firing(name, state)


class FileJournal:
    """Standalone: the state file is written before a send and after it."""

    def __init__(self, state_file: LocalStateFile, ledger: AlertLedger) -> None:
        self._state_file = state_file
        self._ledger = ledger

    async def before_send(self, receiver: str, batch: Sequence[Notification]) -> bool:
        await self._state_file.persist()
        return True

    def wanted(self, receiver: str, notification: Notification) -> bool:
        return True

    async def after_send(
        self,
        receiver: str,
        done: Sequence[Notification],
        unsent: Sequence[Notification],
        maybe_delivered: bool,
    ) -> None:
        self._ledger.bump()
        await self._state_file.persist()
