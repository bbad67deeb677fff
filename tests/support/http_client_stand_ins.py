"""Stand-ins the HTTP client tests plug into the client's hooks."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any

#: Runs a coroutine to completion on a fresh event loop (the ``run`` fixture).
Run = Callable[[Coroutine[Any, Any, Any]], Any]


class Lookups:
    """A ``getaddrinfo`` stand-in: ``answers`` maps names to IP literals (answered through the
    real ``getaddrinfo`` with a numeric host: no DNS), names in ``hung`` block until
    :meth:`release`, others are NXDOMAIN. Every call is recorded in :attr:`calls`."""

    def __init__(
        self, answers: dict[str, list[str]] | None = None, hung: set[str] | None = None
    ) -> None:
        self.answers = answers or {}
        self.hung = hung or set()
        self.calls: list[str] = []
        self.released = threading.Event()

    def __call__(
        self, host: str, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Any]:
        self.calls.append(host)
        if host in self.hung:
            self.released.wait(60)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host in self.answers:
            infos: list[Any] = []
            for ip in self.answers[host]:
                infos += socket.getaddrinfo(ip, port, type=type, flags=socket.AI_NUMERICHOST)
            return infos
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def release(self) -> None:
        self.released.set()
