"""Loading a large config for a reload in a child process.

A reload of a big config (100,000 checks is a 5 MB file) parses YAML, validates and resolves
every check: seconds of CPU and a few hundred MB of short-lived objects (YAML nodes with two
position marks each, the raw document, validation's own). Done in a thread of the daemon it
competed with the event loop for the GIL, and the memory it used for a moment stayed in the
daemon for good: the allocator cannot give back pages that the new config's objects, made in
between, also sit on (RSS grew by about 250 MB at 100,000 checks after the first reload).

Here a child process (``python -m alivemcp.app.configload FILE``, the same interpreter,
import path and environment: ``${VAR}`` references resolve as the daemon's would) loads the file and
sends the result back over a pipe: the config, then the checks in pickled chunks, which the
daemon unpickles a chunk at a time with its loop let run in between. Only the objects the
daemon keeps are ever made in it. The child is the daemon's own code on the daemon's own file,
so pickle is safe here; nothing from the network is unpickled.

A reload usually changes a few checks of many. The daemon writes the running checks'
:meth:`~alivemcp.config.ResolvedCheck.reload_digest` values to the child's stdin (16 bytes
each, in order, then end of file); for a loaded check whose digest is among them the child
sends that running check's position instead of the check, and the daemon puts the running
check itself there. At 100,000 checks and nothing changed, the daemon then unpickles numbers,
not 100,000 checks it would compare and free again (the copies left about 70 MB of holes in
its heap).

Frames on the child's stdout: one kind byte, an 8-byte big-endian length, a pickle.
``C`` the :class:`LoadedConfig` without its checks; ``K`` a list of checks and positions of
running checks; ``D`` the end; ``E`` the config's errors (a :class:`ConfigError`'s ``errors``
and ``source``). The child writes nothing else anywhere: its stderr is dropped, since an
unexpected exception's message may quote a config value (a secret) and the daemon's stderr is
its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO

from alivemcp.config import (
    RELOAD_DIGEST_BYTES,
    ConfigError,
    LoadedConfig,
    ResolvedCheck,
    SharedValues,
    load_config,
    sharing,
)
from alivemcp.hygiene.collector import collector_paused
from alivemcp.hygiene.redact import register_secret

__all__ = [
    "CHECKS_PER_FRAME",
    "LOAD_IN_CHILD_BYTES",
    "LoaderFailedError",
    "file_size",
    "load_in_child",
    "load_off_loop",
]

#: A config file at least this large is loaded for a reload in a child process (about 15,000
#: checks; below it the thread is cheaper than starting a Python process).
LOAD_IN_CHILD_BYTES = 1 << 20

#: Checks per pickled chunk: unpickling one takes about 15 ms.
CHECKS_PER_FRAME = 1000
#: Running checks whose digests are computed between two turns of the loop.
_DIGESTS_PER_SLICE = 1000
_HEADER = struct.Struct(">cQ")


class LoaderFailedError(RuntimeError):
    """The child could not load the config for a reason other than the config's errors (it
    crashed, was killed, or sent something unreadable)."""


async def load_in_child(path: Path, running: Sequence[ResolvedCheck] = ()) -> LoadedConfig:
    """``load_config(path)`` in a child process; raises :class:`ConfigError` as it would, or
    :class:`LoaderFailedError`. Cancelled, the child is killed. A loaded check equal to one of
    ``running`` (the config in use) is that running object, not a copy of it.

    Started with :class:`subprocess.Popen`, which uses ``vfork``, not the event loop's own
    spawn: uvloop's forks the whole daemon first, and copying the page tables of 100,000
    checks' worth of memory held the loop for a quarter of a second (Popen: 2 ms)."""
    digests = bytearray()
    for i, check in enumerate(running):
        digests += check.reload_digest()  # computed once per check, on its first reload
        if i % _DIGESTS_PER_SLICE == _DIGESTS_PER_SLICE - 1:
            await asyncio.sleep(0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(  # noqa: ASYNC220 - vfork: two milliseconds (see above)
        [sys.executable, "-m", "alivemcp.app.configload", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    frames = _Frames(proc.stdout)
    try:
        # The child reads all of it before it starts: a thread writes it (1.6 MB at 100,000
        # checks, more than a pipe holds) while the loop goes on.
        await asyncio.to_thread(_feed, proc.stdin, bytes(digests))
        frames.start()
        loaded = await _read(frames, running)
        code = await asyncio.to_thread(proc.wait)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(BaseException):
            await asyncio.shield(asyncio.to_thread(proc.wait))
        raise
    finally:
        # The reader ends at the end of the child's output (it exited, or was killed).
        await asyncio.shield(asyncio.to_thread(frames.close))
    if code != 0:
        raise LoaderFailedError(f"the config loader exited with code {code}")
    # Registered here too: redaction lives in this process.
    for secret in loaded.secrets:
        register_secret(secret)
    return loaded


async def load_off_loop(path: Path, running: Sequence[ResolvedCheck]) -> LoadedConfig:
    """``load_config`` off the event loop: a large config takes seconds to load, and a stop
    must not wait for a load it no longer needs. A file of :data:`LOAD_IN_CHILD_BYTES` or more
    loads in a child process (:func:`load_in_child`: no GIL shared with the loop, and the
    load's short-lived objects never touch the daemon's memory); a smaller one in a daemon
    thread (``asyncio.to_thread``'s workers are joined when the loop closes), where starting
    a Python process would cost more than the load. ``running``: the checks in use, which a
    load in a child keeps instead of copying (the daemon compares the others itself)."""
    if file_size(path) >= LOAD_IN_CHILD_BYTES:
        loaded = await load_in_child(path, running)
        gc.freeze()  # the new config's objects, out of the collector's reach (see settle_heap)
        return loaded
    loop = asyncio.get_running_loop()
    future: asyncio.Future[LoadedConfig] = loop.create_future()

    def settle(outcome: LoadedConfig | BaseException) -> None:
        if future.done():
            return  # the reload was cancelled meanwhile
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def work() -> None:
        outcome: LoadedConfig | BaseException
        try:
            with collector_paused():
                outcome = load_config(path)
                # Here, not on the loop: the reload compares every check's fingerprint.
                for check in outcome.checks:
                    check.fingerprint()
                # The new config's objects leave the collector's reach before it resumes:
                # its first young collection would otherwise walk all of them at once.
                gc.freeze()
        except BaseException as exc:  # handed to the awaiting reload, which decides
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=work, name="alivemcp-config-load", daemon=True).start()
    return await future


def file_size(path: Path) -> int:
    """The file's size in bytes (0 when it cannot be read: loading it says why)."""
    try:
        return path.stat().st_size  # one stat call: not worth a thread
    except OSError:
        return 0  # load_config says why it cannot read it


def _feed(stdin: IO[bytes], digests: bytes) -> None:
    try:
        with stdin:
            stdin.write(digests)
    except BrokenPipeError:  # the child is gone: its stdout says so (no end frame)
        pass


class _Frames:
    """The child's frames as a thread of their own reads them off its stdout, a few ahead of
    the loop's unpickling.

    Not a read transport of the loop's: uvloop's closes the descriptor itself a loop turn after
    ``close()``, and the Popen's file object closes it too; in between, the loop accepted an
    HTTP connection on the freed number and the transport's late close cut it (a scrape of
    /metrics reset during a large reload). Here the Popen's file object is the one owner, read
    by one thread and closed once, after that thread is done."""

    #: Frames read ahead of the loop's unpickling (a frame is a thousand checks).
    AHEAD = 4

    def __init__(self, stdout: IO[bytes]) -> None:
        self._stdout = stdout
        self._loop = asyncio.get_running_loop()
        self._frames: asyncio.Queue[tuple[bytes, bytes] | None] = asyncio.Queue()
        self._room = threading.Semaphore(self.AHEAD)
        self._closing = False
        self._thread = threading.Thread(target=self._read, name="alivemcp-config-frames")

    def start(self) -> None:
        self._thread.start()

    async def next(self) -> tuple[bytes, bytes] | None:
        """The next frame, (kind, payload); None at the end of the output (or a cut frame)."""
        frame = await self._frames.get()
        if frame is None:
            self._frames.put_nowait(None)  # the end, for every later call too
        else:
            self._room.release()
        return frame

    def close(self) -> None:
        """Blocking: let the reader run to the end of the output (the child must have exited
        or been killed) without handing more over, join it, close the pipe."""
        self._closing = True
        self._room.release()  # a reader waiting for room goes on, and hands nothing more over
        if self._thread.ident is not None:
            self._thread.join()
        self._stdout.close()

    def _read(self) -> None:
        try:
            while True:
                head = self._stdout.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    return
                kind, size = _HEADER.unpack(head)
                payload = self._stdout.read(size)
                if len(payload) < size:
                    return
                if not self._closing:
                    self._room.acquire()
                if not self._closing:
                    self._hand_over((kind, payload))
        except (OSError, ValueError):
            return  # the pipe broke: a cut frame, told as the end
        finally:
            self._hand_over(None)

    def _hand_over(self, frame: tuple[bytes, bytes] | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._frames.put_nowait, frame)


async def _read(frames: _Frames, running: Sequence[ResolvedCheck]) -> LoadedConfig:
    head: LoadedConfig | None = None
    checks: list[ResolvedCheck] = []
    # Pickle shares an object only within a frame: the label sets and durations the child's
    # checks share are shared again as they are unpickled (see SharedValues).
    with collector_paused(), sharing(SharedValues()):
        while True:
            frame = await frames.next()
            if frame is None:
                raise LoaderFailedError("the config loader stopped before it was done")
            kind, payload = frame
            try:
                value = pickle.loads(payload)  # our own child: see the module docstring
            except Exception as exc:
                raise LoaderFailedError(
                    f"unreadable answer from the config loader: {type(exc).__name__}"
                ) from None
            if kind == b"E":
                errors, source = value
                raise ConfigError(list(errors), source)
            if kind == b"C":
                head = value
            elif kind == b"K":
                for item in value:
                    if isinstance(item, int):  # a running check's position: kept
                        if not 0 <= item < len(running):
                            raise LoaderFailedError(
                                "the config loader kept a check that is not running"
                            )
                        item = running[item]
                    checks.append(item)
            elif kind == b"D" and head is not None:
                # Out of the collector's reach before it is back on: its first young
                # collection would walk every object unpickled while it was off (half a
                # second at 100,000 checks, on the loop).
                gc.freeze()
                return dataclasses.replace(head, checks=tuple(checks))
            else:
                raise LoaderFailedError(f"unexpected frame {kind!r} from the config loader")


def _write(out: BinaryIO, kind: bytes, value: Any) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(kind, len(payload)))
    out.write(payload)


def _child(path: str) -> int:
    out = sys.stdout.buffer
    digests = sys.stdin.buffer.read()  # the running checks' (see the module docstring)
    running = {
        digests[at : at + RELOAD_DIGEST_BYTES]: at // RELOAD_DIGEST_BYTES
        for at in range(0, len(digests), RELOAD_DIGEST_BYTES)
    }
    try:
        loaded = load_config(Path(path))
        # A running check's position for each check unchanged, the check itself otherwise,
        # with its fingerprint computed here (inside the digest): the reload compares them.
        sent: list[ResolvedCheck | int] = [running.get(c.reload_digest(), c) for c in loaded.checks]
    except ConfigError as exc:
        _write(out, b"E", (exc.errors, exc.source))
        return 0
    except Exception as exc:  # the message may quote a value: the type only
        _write(out, b"E", ([f"the config could not be loaded: {type(exc).__name__}"], path))
        return 0
    _write(out, b"C", dataclasses.replace(loaded, checks=()))
    for start in range(0, len(sent), CHECKS_PER_FRAME):
        _write(out, b"K", sent[start : start + CHECKS_PER_FRAME])
    _write(out, b"D", None)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
