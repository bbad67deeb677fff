"""The one interface every receiver implements, and the HTTP plumbing they share."""

from __future__ import annotations

import email.utils
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from alivemcp.alerting.model import Notification
from alivemcp.hygiene.redact import redact_text

__all__ = ["Failure", "Receiver", "SendResult", "classify_response", "post_json", "retry_after"]

_MAX_DETAIL = 200


class _QuietOwnRequests(logging.Filter):
    """httpx logs every request with its full URL at INFO. Receiver URLs are secrets (Slack
    webhook paths, tokens in webhook URLs), so alerting's own requests are dropped from that
    log; delivery outcomes are logged by the worker without the URL."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 2:
            target = str(args[1])
            return not any(target.startswith(url) for url in self.urls)
        return True


_quiet = _QuietOwnRequests()
logging.getLogger("httpx").addFilter(_quiet)


def keep_out_of_http_logs(url: str) -> str:
    """Register a receiver URL whose requests must not appear in httpx's log; returns it."""
    _quiet.urls.add(url)
    return url


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a send stopped. ``transient``: retry later; ``permanent``: give the first ``count``
    undelivered notifications up (retrying cannot help and may get the integration disabled)."""

    kind: Literal["transient", "permanent"]
    detail: str  # safe to log: status code and the receiver's short error text, never the URL
    retry_after: float | None = None
    count: int = 0
    #: The request may have reached the destination (a timeout or a connection lost after it
    #: was sent): repeating it may deliver it twice. False when the destination answered, or
    #: when no connection was ever made.
    maybe_delivered: bool = False


@dataclass(frozen=True, slots=True)
class SendResult:
    """``delivered``: how many notifications from the head of the batch were accepted."""

    delivered: int
    failure: Failure | None = None
    skipped: int = 0  # of ``delivered``: accepted without a request (e.g. folded into a group)
    grouped: bool = False  # one message stood for several notifications (a storm)


@dataclass(slots=True)
class ReceiverState:
    """Small per-receiver state persisted with the alert state (e.g. PagerDuty groups)."""

    data: dict[str, Any] = field(default_factory=dict)


class Receiver(ABC):
    """Delivers batches of notifications to one destination. Must not raise for HTTP or
    network errors: report them as a :class:`Failure`."""

    type_name: str = ""
    #: Whether delivering a notification twice does no harm (PagerDuty: the second event
    #: carries the same dedup_key and joins the same incident). In cluster mode a replica that
    #: takes over a check re-sends a notification whose send was interrupted only to such
    #: receivers; the others must never see a duplicate.
    repeats_are_harmless: bool = False

    def __init__(self, name: str, client: httpx.AsyncClient, timeout: float) -> None:
        self.name = name
        self.client = client
        self.timeout = timeout
        self.state = ReceiverState()

    @abstractmethod
    async def send(self, batch: Sequence[Notification]) -> SendResult:
        """Deliver ``batch`` (oldest first) as few requests as the destination allows."""

    def restore_state(self, data: Any) -> None:
        """Adopt the state saved by an earlier run. Raise ``ValueError`` (saying where and
        why, without values) when it cannot be trusted: the receiver then starts empty.
        Receivers that keep no state ignore it."""
        self.state = ReceiverState()


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), None if absent or garbage."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())


def short_body(response: httpx.Response) -> str:
    try:
        text = response.text
    except (UnicodeDecodeError, httpx.HTTPError):
        return ""
    return redact_text(" ".join(text.split()))[:_MAX_DETAIL]


def classify_response(
    response: httpx.Response, count: int, permanent_codes: frozenset[int] | None = None
) -> Failure | None:
    """None for 2xx; transient for 408/429/5xx; permanent for other codes (or those listed)."""
    code = response.status_code
    if 200 <= code < 300:
        return None
    detail = f"HTTP {code} {short_body(response)}".strip()
    if permanent_codes is not None and code in permanent_codes:
        return Failure("permanent", detail, count=count)
    if code in (408, 425, 429) or code >= 500:
        return Failure("transient", detail, retry_after=retry_after(response))
    return Failure("permanent", detail, count=count)


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    timeout: float,
    headers: dict[str, str] | None = None,
    count: int = 1,
) -> httpx.Response | Failure:
    """POST ``body``; network errors and timeouts become a transient :class:`Failure` whose
    text names the error class only (exception texts can embed the URL)."""
    keep_out_of_http_logs(url)
    try:
        return await client.post(
            url,
            content=body,
            headers={"content-type": "application/json", **(headers or {})},
            timeout=timeout,
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return Failure("permanent", f"unusable URL ({type(exc).__name__})", count=count)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # No connection was made: the destination cannot have seen the request.
        return Failure("transient", f"request failed: {type(exc).__name__}")
    except httpx.TimeoutException as exc:
        return Failure(
            "transient", f"timeout after {timeout:g}s ({type(exc).__name__})", maybe_delivered=True
        )
    except (httpx.HTTPError, OSError) as exc:
        return Failure("transient", f"request failed: {type(exc).__name__}", maybe_delivered=True)
