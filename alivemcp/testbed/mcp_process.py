"""A local server in a subprocess: started on a free loopback port, waited for until it accepts
connections (failing loudly, with the server's output, when it does not), stopped for good.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["REPO", "ServerProcess", "ServerUnavailable", "free_port", "spawn", "wait_listening"]

#: The repository root: the servers' working directory, and where ``.cache`` lives.
REPO = Path(__file__).resolve().parents[2]


class ServerUnavailable(RuntimeError):
    """A local server could not be started (missing tool, crash, never listened)."""


@dataclass
class ServerProcess:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    path: str = ""
    scheme: str = "http"
    _stopped: bool = field(default=False, repr=False)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + self.path

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                # A stand-in with open streams may linger in a graceful shutdown; 2 s is plenty
                # for one that is going to exit, and nothing of value is lost by killing it.
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(proc: ServerProcess, timeout: float) -> None:
    """Return once ``proc`` accepts connections; else stop it and raise, with its output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", proc.port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    log = proc.log_path.read_text(errors="replace")[-3000:] if proc.log_path.exists() else ""
    proc.stop()
    raise ServerUnavailable(
        f"{proc.name} did not listen on 127.0.0.1:{proc.port} within {timeout:g}s "
        f"(exit code {proc.process.returncode}); its output:\n{log}"
    )


def spawn(
    name: str,
    argv: list[str],
    port: int,
    path: str,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> ServerProcess:
    """Run ``argv`` (from the repository root, its output to a temporary log) and wait until
    it listens on ``port``."""
    log_fd, log_name = tempfile.mkstemp(prefix=f"alivemcp-{name}-", suffix=".log")
    try:
        process = subprocess.Popen(
            argv,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=REPO,
        )
    finally:
        os.close(log_fd)
    proc = ServerProcess(name, port, process, Path(log_name), path)
    wait_listening(proc, timeout)
    return proc
