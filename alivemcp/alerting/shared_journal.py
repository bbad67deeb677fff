"""Cluster mode's delivery journal: record before send, in the check's shared record.

A notification is in its check's record (phase ``queued``) before its worker can send it
(:meth:`~alivemcp.alerting.workers.ReceiverWorkers.dispatch`); its record says ``sending``,
acknowledged by the brokers, before the receiver is called; it leaves the record once the
receiver accepted it. A replica taking the check over re-sends ``queued`` ones, and
``sending`` ones only where a repeat is harmless (see :mod:`alivemcp.alerting.records`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.model import Notification
from alivemcp.alerting.records import Outgoing
from alivemcp.alerting.shared import SharedAlertState

__all__ = ["SharedJournal"]

#: How long a send waits for its record's acknowledgement before it is put off (and retried).
RECORD_ACK_SECONDS = 10.0


class SharedJournal:
    """The :class:`~alivemcp.alerting.delivery.DeliveryJournal` of cluster mode."""

    def __init__(
        self,
        shared: SharedAlertState,
        ledger: AlertLedger,
        persist: Callable[[], Awaitable[None]],
    ) -> None:
        """``persist``: writes the local state file (receiver state stays per replica)."""
        self._shared = shared
        self._outbox = shared.outbox
        self._owns = shared.ownership.owns
        self._ledger = ledger
        self._persist = persist

    async def before_send(self, receiver: str, batch: Sequence[Notification]) -> bool:
        """Mark the batch ``sending`` in its checks' records and wait for the brokers to
        acknowledge them; False (nothing sent) if they do not within the bound."""
        touched: set[str] = set()
        marked = []
        for n in batch:
            entry = self._entry(receiver, n)
            if entry is None or not self._owns(n.check):
                continue
            if entry.phase != "sending":
                entry.phase = "sending"
                marked.append(entry)
            touched.add(n.check)
        acks = [f for f in (self._shared.write_record(name) for name in touched) if f is not None]
        if not acks:
            return True
        done, late = await asyncio.wait(acks, timeout=RECORD_ACK_SECONDS)
        if not late and all(f.result() for f in done):
            for n in batch:
                entry = self._entry(receiver, n)
                # The worker calls the receiver next with what is still ours (wanted()),
                # with no pause in between.
                if entry is not None and self._owns(n.check):
                    entry.handed = True
            return True
        for entry in marked:
            if entry.phase == "sending" and not entry.maybe_delivered:
                entry.phase = "queued"
                self._ledger.changed.add(entry.notification.check)
        return False

    def wanted(self, receiver: str, notification: Notification) -> bool:
        """Only what the check's outbox holds is sent: that is what its record says."""
        return self._owns(notification.check) and self._entry(receiver, notification) is not None

    def _entry(self, receiver: str, notification: Notification) -> Outgoing | None:
        """The outbox entry of this very notification. A copy left in a worker's queue when
        its check was handed over (a send that outlasted the release, then failed) is not:
        if the check comes back, its record decides again what is sent, and a second copy
        would repeat a page the receiver may already have."""
        entry = self._outbox.get(receiver, notification)
        return entry if entry is not None and entry.notification is notification else None

    async def after_send(
        self,
        receiver: str,
        done: Sequence[Notification],
        unsent: Sequence[Notification],
        maybe_delivered: bool,
    ) -> None:
        touched = set()
        for n in done:
            if self._entry(receiver, n) is not None and self._outbox.remove(receiver, n):
                touched.add(n.check)
        for n in unsent:
            entry = self._entry(receiver, n)
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
            self._shared.write_record(name)
        # Receiver state (PagerDuty groups) stays in this replica's file.
        self._ledger.bump()
        await self._persist()
