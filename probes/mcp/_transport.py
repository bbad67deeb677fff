"""What both MCP HTTP transports share: the answer of one request (:class:`Reply`), the failure
below the MCP layer (:class:`WireError`), and the one place the HTTP plumbing's failures are
turned into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from alivemcp.plumbing.http import (
    ClientConfigError,
    HttpError,
    InvalidRequest,
    ProtocolError,
    RequestTimeout,
)

__all__ = [
    "ACCEPT_BOTH",
    "ERROR_BODY_LIMIT",
    "HEADER_SAFE",
    "Reply",
    "WireError",
    "describe",
    "http_failures",
    "same_origin",
]

ACCEPT_BOTH = "application/json, text/event-stream"
#: Error bodies are only read for a JSON-RPC error code or a challenge: a small cap suffices.
ERROR_BODY_LIMIT = 64 * 1024
#: Printable ASCII, as a header value echoed back to a server must be (session ids, event ids).
HEADER_SAFE = re.compile(r"[\x20-\x7e]{1,1024}")


class WireError(Exception):
    """The request did not complete at the HTTP level (connect, TLS, timeout, truncation).

    A :class:`~alivemcp.plumbing.http.ClientConfigError` (the prober's own CA, certificate or
    proxy settings are unusable) is not one: it passes through, for an ``unknown`` verdict."""


@dataclass(slots=True)
class Reply:
    """An HTTP answer; ``message`` is the JSON-RPC response for our id, when there is one."""

    status: int
    headers: Mapping[str, str]
    message: dict[str, Any] | None
    content_type: str
    seconds: float
    #: Times the response's event stream was resumed (GET with Last-Event-ID).
    resumptions: int = 0


def describe(exc: HttpError) -> str:
    """One sentence for a client-side failure; never includes request headers."""
    if isinstance(exc, ProtocolError) and not isinstance(exc, InvalidRequest):
        return f"malformed HTTP response: {exc}"
    return str(exc)


@contextmanager
def http_failures(
    timed_out: str, timeouts: tuple[type[Exception], ...] = (RequestTimeout,)
) -> Iterator[None]:
    """Turn what the HTTP plumbing raises inside the block into a :class:`WireError`: one of
    ``timeouts`` into ``timed_out``, any other failure into its sentence. A
    :class:`ClientConfigError` passes through: the prober's own settings are not the
    server's fault."""
    try:
        yield
    except timeouts as exc:
        raise WireError(timed_out) from exc
    except ClientConfigError:
        raise
    except HttpError as exc:
        raise WireError(describe(exc)) from exc


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    return parts.scheme, parts.hostname, port


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (a URL that does not even parse is another origin)."""
    try:
        return _origin(a) == _origin(b)
    except ValueError:
        return False
