"""Alert state on disk: one JSON file in the data directory, replaced atomically.

What must survive a restart: which alerts were notified (so a restart neither re-pages nor
forgets to resolve), the notifications not yet delivered, small receiver state (PagerDuty
groups) and the notification sequence number. Checks in their plain healthy state are left
out, so the file stays small with many checks.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

__all__ = ["STATE_FILE", "StateStore"]

STATE_FILE = "alerting-state.json"
_VERSION = 1

log = structlog.get_logger("alivemcp.alerting")


class StateStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / STATE_FILE
        self._lock = asyncio.Lock()

    def load(self) -> dict[str, Any]:
        """The saved state, or an empty one. A corrupt file is kept aside, not fatal."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.error("cannot read alert state; starting empty", path=str(self.path),
                      error=exc.strerror or str(exc))
            return {}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                raise ValueError("unexpected shape or version")
        except ValueError as exc:
            aside = self.path.with_name(f"{STATE_FILE}.corrupt-{int(time.time())}")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = self.path
            log.error("alert state is unreadable; kept aside, starting empty",
                      path=str(aside), error=str(exc)[:200])
            return {}
        return data

    async def save(self, parts: dict[str, str]) -> None:
        """Write a state atomically (temp file, fsync, rename) off the event loop. ``parts``
        maps top-level keys to JSON texts the caller serialised (and may have cached)."""
        body = "{" + ",".join(
            f"{json.dumps(key)}:{text}" for key, text in {"version": str(_VERSION), **parts}.items()
        ) + "}"
        async with self._lock:
            await asyncio.to_thread(self._write, body)

    def _write(self, body: str) -> None:
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
