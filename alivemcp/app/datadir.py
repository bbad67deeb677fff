"""One daemon per ``data_dir``: an exclusive lock on ``data_dir/.lock``.

Two daemons sharing a data_dir would both page for one incident and overwrite each other's
alert state. The daemon takes a non-blocking ``flock`` on ``data_dir/.lock`` before anything
else touches the directory and holds it for the life of the process. The kernel releases the
lock when the process ends, however it ends (``kill -9`` included), so a lock file left behind
never blocks a restart; the file itself is never deleted (deleting a lock file races with the
next daemon taking it). It records the holder's pid and host for the refusal message.

On local file systems this is reliable. On NFS, Linux turns ``flock`` into a POSIX byte-range
lock handled by the server's lock manager (NLM, or NFSv4's own locking): it holds only if that
lock manager works and every host mounts with locking on (a ``nolock`` or ``local_lock`` mount
keeps the lock local to one host). Do not rely on it there: give each daemon its own data_dir.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirInUseError", "DataDirLock"]

LOCK_FILE = ".lock"


class DataDirInUseError(Exception):
    """Another live process holds the data_dir lock."""

    def __init__(self, data_dir: str, holder: str) -> None:
        self.data_dir = data_dir
        self.holder = holder
        super().__init__(
            f"data_dir {data_dir} is in use by another alivemcp ({holder}); "
            "use a different data_dir"
        )


class DataDirLock:
    """``acquire()`` once at start-up, ``release()`` on the way out (or just exit)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = os.fspath(data_dir)
        self.path = Path(self.data_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DataDirInUseError`; ``OSError`` when the directory
        or the lock file cannot be created (an unwritable data_dir)."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_RDWR without O_TRUNC: the holder's pid must stay readable until we hold the lock.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirInUseError(self.data_dir, holder) from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass  # the lock holds even if the note about who holds it could not be written
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale pid for the next reader
        os.close(fd)  # closing the only descriptor drops the flock


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    except OSError:
        text = []
    if len(text) >= 2 and text[0].isdigit():
        return f"pid {text[0]} on {text[1]}"
    return "pid unknown"
