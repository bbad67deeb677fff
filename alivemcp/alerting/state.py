"""Alert state on disk: one JSON file in the data directory, replaced atomically.

What must survive a restart: which alerts were notified (so a restart neither re-pages nor
forgets to resolve), the notifications not yet delivered, small receiver state (PagerDuty
groups) and the notification sequence number. Checks in their plain healthy state are left
out, so the file stays small with many checks.

Loading never fails: a file that cannot be trusted as a whole (unreadable, not a regular file,
absurdly large, not UTF-8, not JSON, the wrong shape or version) is moved aside as
``alerting-state.json.corrupt-<unix time>`` and alerting starts clean; a damaged entry inside
an otherwise sound file costs only that entry (see :mod:`alivemcp.alerting.saved`). Both are
logged as errors and counted in metrics, so an operator learns that state was lost.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import Notification
from alivemcp.alerting.policy import CheckState
from alivemcp.alerting.saved import (
    DamagedEntry,
    SavedFile,
    check_from_json,
    describe,
    json_from_bytes,
    notification_from_json,
)

__all__ = ["MAX_STATE_BYTES", "STATE_FILE", "RestoredCheck", "SavedState", "StateStore"]

STATE_FILE = "alerting-state.json"
_VERSION = 1
#: Far above a real state (about 1 KiB per firing check and per queued notification: 50,000
#: firing checks with a few receivers down stay well under it); a bigger file is not ours.
MAX_STATE_BYTES = 256 * 1024 * 1024
#: Damaged entries logged one by one; beyond this only the total is logged.
_LOGGED_ENTRIES = 100

log = structlog.get_logger("alivemcp.alerting")


@dataclass(slots=True)
class RestoredCheck:
    state: CheckState
    probe_type: str
    labels: dict[str, str]


@dataclass(slots=True)
class SavedState:
    """What a start restores: every value validated (types, bounds, known names)."""

    next_id: int = 1
    checks: dict[str, RestoredCheck] = field(default_factory=dict)
    queues: dict[str, list[Notification]] = field(default_factory=dict)
    #: Raw per-receiver objects: each receiver validates its own (it knows their shape).
    receivers: dict[str, Any] = field(default_factory=dict)


class _Untrusted(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class StateStore:
    def __init__(self, data_dir: Path, metrics: AlertingMetrics) -> None:
        self.path = Path(data_dir) / STATE_FILE
        self._metrics = metrics
        self._lock = asyncio.Lock()
        # A write cancelled while its thread runs releases the asyncio lock, but the thread
        # goes on: the next write must not share its temp file meanwhile.
        self._write_lock = threading.Lock()
        self._entries_logged = 0

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> SavedState:
        """The saved state, or an empty one. Never raises."""
        # Parsing and validating a big state creates millions of objects; the cyclic
        # collector would walk them all again and again meanwhile (measured: it doubles the
        # time for 50,000 firing checks). Nothing built here is cyclic garbage.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._load()
        finally:
            if collecting:
                gc.enable()

    def _load(self) -> SavedState:
        try:
            top = self._read_top()
        except FileNotFoundError:
            return SavedState()
        except _Untrusted as exc:
            self._set_aside(exc.reason, exc.detail)
            return SavedState()
        except Exception as exc:  # a bug in validation must not stop the daemon either
            self._set_aside("bad_shape", f"validation failed: {type(exc).__name__}")
            return SavedState()
        self._entries_logged = 0
        saved = SavedState(next_id=top.next_id, receivers=dict(top.receivers))
        for name, raw in top.checks.items():
            try:
                state, probe_type, labels = check_from_json(raw)
            except DamagedEntry as exc:
                self.entry_dropped("checks", str(exc), check=name)
                continue
            saved.checks[name] = RestoredCheck(state, probe_type, labels)
        for receiver, items in top.queues.items():
            saved.queues[receiver] = self._load_queue(receiver, items)
        return saved

    def _load_queue(self, receiver: str, items: Any) -> list[Notification]:
        if not isinstance(items, list):
            self.entry_dropped("notifications", "queue: not a list", receiver=receiver)
            return []
        out = []
        for raw in items:
            try:
                out.append(notification_from_json(raw))
            except DamagedEntry as exc:
                check = raw.get("check") if isinstance(raw, dict) else None
                self.entry_dropped(
                    "notifications",
                    str(exc),
                    receiver=receiver,
                    check=check if isinstance(check, str) else None,
                )
        return out

    def entry_dropped(self, section: str, error: str, **where: str | None) -> None:
        """Count (and, for the first few, log) one damaged entry left out of the state."""
        self._metrics.state_entries_dropped.labels(section).inc()
        self._entries_logged += 1
        context = {k: v[:200] for k, v in where.items() if v is not None}
        if self._entries_logged <= _LOGGED_ENTRIES:
            log.error(
                "dropped a damaged entry of the saved alert state; the rest is kept",
                section=section,
                error=error,
                path=str(self.path),
                **context,
            )
        elif self._entries_logged == _LOGGED_ENTRIES + 1:
            log.error(
                "more damaged entries in the saved alert state; no longer logging "
                "each (see alivemcp_alert_state_entries_dropped_total)",
                path=str(self.path),
            )

    def _read_top(self) -> SavedFile:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _Untrusted("unreadable", exc.strerror or type(exc).__name__) from None
        if not stat.S_ISREG(info.st_mode):
            # A directory, FIFO or device: opening a FIFO would even block the start.
            raise _Untrusted("not_a_file", "not a regular file")
        if info.st_size > MAX_STATE_BYTES:
            raise _Untrusted("too_large", f"{info.st_size} bytes (limit {MAX_STATE_BYTES})")
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _Untrusted("unreadable", exc.strerror or type(exc).__name__) from None
        if len(raw) > MAX_STATE_BYTES:  # it grew between stat and read
            raise _Untrusted("too_large", f"over {MAX_STATE_BYTES} bytes")
        data = json_from_bytes(raw, _Untrusted)
        try:
            return SavedFile.model_validate(data)
        except ValidationError as exc:
            raise _Untrusted("bad_shape", describe(exc)) from None

    def _set_aside(self, reason: str, detail: str) -> None:
        self._metrics.state_discarded.labels(reason).inc()
        aside = self._aside_path()
        try:
            os.replace(self.path, aside)
        except OSError as exc:
            log.error(
                "alert state file cannot be trusted and cannot be moved aside; alerting "
                "starts clean and will overwrite it",
                path=str(self.path),
                reason=reason,
                error=detail,
                move_error=exc.strerror or type(exc).__name__,
            )
            return
        log.error(
            "alert state file cannot be trusted; moved aside, alerting starts clean "
            "(open incidents may be paged again, queued notifications are lost)",
            path=str(aside),
            reason=reason,
            error=detail,
        )

    def _aside_path(self) -> Path:
        stamp = int(time.time())
        aside = self.path.with_name(f"{STATE_FILE}.corrupt-{stamp}")
        n = 1
        while aside.exists() or aside.is_symlink():  # keep every damaged copy for a look
            aside = self.path.with_name(f"{STATE_FILE}.corrupt-{stamp}-{n}")
            n += 1
        return aside

    # -- saving ------------------------------------------------------------------------------

    async def save(self, parts: dict[str, str]) -> None:
        """Write a state atomically (temp file, fsync, rename) off the event loop. ``parts``
        maps top-level keys to JSON texts the caller serialised (and may have cached)."""
        body = (
            "{"
            + ",".join(
                f"{json.dumps(key)}:{text}"
                for key, text in {"version": str(_VERSION), **parts}.items()
            )
            + "}"
        )
        async with self._lock:
            await asyncio.to_thread(self._write, body)

    def _write(self, body: str) -> None:
        with self._write_lock:
            self._write_file(body)

    def _write_file(self, body: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        # fsync the directory so the rename itself survives a power cut.
        try:
            fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
