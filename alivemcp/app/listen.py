"""Checking the listen address before anything starts.

A busy port used to surface as a 30-line traceback after the demo stack (or the daemon's
alerting) had already started. :func:`port_problem` tries the bind first, the way the server
will (``SO_REUSEADDR``), so the caller can refuse with one line before starting anything.
The check and the real bind are not atomic; the window is milliseconds, and the server's own
error is still reported if something takes the port in between.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["port_problem"]


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None when it can."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None
