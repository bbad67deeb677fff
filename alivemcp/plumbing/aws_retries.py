"""Retries for AWS calls that fit inside the caller's time limits.

botocore's own retry loop cannot see a caller's deadline: with it on, a call that failed with a
500 in milliseconds kept backing off until the probe's ``asyncio.timeout`` fired, and the probe
then reported "no answer" instead of the error it had been given. So every client is created
with botocore retries off (``total_max_attempts: 1``) and calls are retried here instead, by
:class:`RetryingClient`:

- ``max_attempts`` is the number of attempts, the first included: 1 never retries;
- only errors that may pass are retried (5xx, throttling, connection failures, one attempt's
  own timeout); any other answer (403, 404, a bad request) is final at once;
- backoff is exponential with jitter (longer after throttling) and never sleeps past the
  enclosing deadline: when the next attempt could not start in time, the error is raised now;
- inside :func:`aws_time_limit` (the AWS counterpart of ``asyncio.timeout``), time running out
  while a retry is in flight raises the last real error, not ``TimeoutError``:
  ``TimeoutError`` means that nothing at all came back in time;
- :func:`aws_deadline` sets a soft deadline (the check's own timeout): retries and backoff stop
  by it, and a retry in flight is cut at it with the last error; a first attempt is never cut
  by it (one that does not answer is the engine's timeout to report).

An error raised after the retry logic considered it carries :class:`Attempts` (read it with
:func:`attempts_of`), so a reason can say "3 attempts in 1.2 s". The error a caller finally
sees passes through :meth:`RetryingClient._final_error` (also when a time limit raises it), the
hook where :mod:`alivemcp.plumbing.aws` turns botocore's exceptions into ``ProbeError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)
from botocore.parsers import ResponseParserError

__all__ = [
    "AWS_ERRORS",
    "THROTTLING_CODES",
    "Attempts",
    "AwsTimeLimit",
    "RetryingClient",
    "attempts_of",
    "aws_deadline",
    "aws_time_limit",
    "call_with_retries",
]

T = TypeVar("T")

#: Every exception a botocore call raises for a failed request (an unparsable answer is not a
#: BotoCoreError).
AWS_ERRORS = (ClientError, BotoCoreError, ResponseParserError)
#: First backoff (seconds) after a failed attempt, doubled for each further one.
BACKOFF_BASE = 0.1
#: First backoff after throttling: the service asked for less traffic.
THROTTLED_BACKOFF_BASE = 0.5
#: No single backoff is longer than this.
BACKOFF_CAP = 5.0
#: botocore's throttling codes: retried with the longer backoff.
THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "EC2ThrottledException",
    }
)
#: Codes retried whatever their HTTP status: throttling plus botocore's transient codes.
_RETRYABLE_CODES = THROTTLING_CODES | {
    "RequestTimeout",
    "RequestTimeoutException",
    "PriorRequestNotComplete",
    "InternalError",
    "ServiceUnavailable",
}


@dataclass(frozen=True)
class Attempts:
    """How an AWS call ended: attempts made, seconds from the first to the error, and
    whether time ran out before every allowed attempt was made."""

    count: int
    seconds: float
    out_of_time: bool = False

    def describe(self) -> str:
        took = f"{self.seconds * 1000:.0f} ms" if self.seconds < 1 else f"{self.seconds:.1f}s"
        noun = "attempt" if self.count == 1 else "attempts"
        tail = "; out of time" if self.out_of_time else ""
        return f"{self.count} {noun} in {took}{tail}"


_ATTEMPTS_ATTR = "_alivemcp_attempts"


def attempts_of(exc: BaseException) -> Attempts | None:
    """The attempts behind ``exc``, if the retry logic raised it."""
    found = getattr(exc, _ATTEMPTS_ATTR, None)
    return found if isinstance(found, Attempts) else None


def _annotated(exc: BaseException, call: _Call, *, out_of_time: bool = False) -> BaseException:
    seconds = max(0.0, call.loop.time() - call.started)
    setattr(exc, _ATTEMPTS_ATTR, Attempts(call.attempts, seconds, out_of_time))
    return exc


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: server errors, throttling, lost connections."""
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return (
            code in _RETRYABLE_CODES or status == 429 or (isinstance(status, int) and status >= 500)
        )
    if isinstance(exc, SSLError):  # a certificate problem does not pass by retrying
        return False
    return isinstance(exc, ConnectionError | HTTPClientError)


def _is_answer(exc: BaseException) -> bool:
    """A real error: the service answered, refused or dropped the connection. A client-side
    timeout is not one: nothing came back."""
    return not isinstance(exc, ReadTimeoutError | ConnectTimeoutError)


def _backoff(attempt: int, exc: BaseException) -> float:
    code = ""
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 429:
            code = "TooManyRequestsException"
    base = THROTTLED_BACKOFF_BASE if code in THROTTLING_CODES else BACKOFF_BASE
    # Jitter keeps many checks that failed together from retrying in step.
    return random.uniform(0.5, 1.0) * min(BACKOFF_CAP, base * 2.0 ** (attempt - 1))


# --- deadlines -------------------------------------------------------------------------------


@dataclass(eq=False)
class _Limit:
    """One enclosing deadline (loop time). Hard limits cancel; soft ones only bound retries."""

    deadline: float
    hard: bool
    parent: _Limit | None
    #: Calls under this hard limit that have not finished (their last errors are kept).
    in_flight: set[_Call] = field(default_factory=set)

    def chain(self) -> Iterator[_Limit]:
        limit: _Limit | None = self
        while limit is not None:
            yield limit
            limit = limit.parent


_current: ContextVar[_Limit | None] = ContextVar("alivemcp_aws_limit", default=None)


def _unchanged(exc: BaseException) -> BaseException:
    return exc


@dataclass(eq=False)
class _Call:
    loop: asyncio.AbstractEventLoop
    started: float
    attempts: int = 0
    #: The latest error that came from the other side (not a client-side timeout).
    last_answer: BaseException | None = None
    #: What the caller finally sees instead of a botocore error (the client's error boundary).
    final: Callable[[BaseException], BaseException] = _unchanged


def aws_time_limit(seconds: float) -> AwsTimeLimit:
    """``async with aws_time_limit(seconds):`` see :class:`AwsTimeLimit`."""
    return AwsTimeLimit(seconds)


class AwsTimeLimit:
    """``async with aws_time_limit(seconds):`` bounds the AWS calls inside like
    ``asyncio.timeout``, with one difference: when time runs out after a call in flight had
    already received a real error (a 500, throttling, a refused connection) and was retrying,
    that error is raised (annotated with its attempts) instead of ``TimeoutError``.
    ``TimeoutError`` therefore means that nothing at all came back in time."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._limit: _Limit | None = None
        self._timeout: asyncio.Timeout | None = None
        self._token: Any = None

    async def __aenter__(self) -> AwsTimeLimit:
        loop = asyncio.get_running_loop()
        self._limit = _Limit(loop.time() + self._seconds, hard=True, parent=_current.get())
        self._token = _current.set(self._limit)
        self._timeout = asyncio.timeout_at(self._limit.deadline)
        await self._timeout.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._timeout is not None and self._limit is not None
        _current.reset(self._token)
        try:
            await self._timeout.__aexit__(exc_type, exc, tb)
        except TimeoutError:
            if not self._timeout.expired():
                raise
            answered = [c for c in self._limit.in_flight if c.last_answer is not None]
            if not answered:
                raise
            latest = max(answered, key=lambda c: c.started)
            assert latest.last_answer is not None
            error = _annotated(latest.last_answer, latest, out_of_time=True)
            translated = latest.final(error)
            if translated is error:
                raise error from None
            raise translated from error


@contextlib.contextmanager
def aws_deadline(seconds: float) -> Iterator[None]:
    """A soft deadline ``seconds`` from now for AWS calls inside (the check's own timeout):
    no backoff sleeps past it and a retry in flight is cut at it with the last error, but a
    first attempt is never cut by it."""
    limit = _Limit(asyncio.get_running_loop().time() + seconds, hard=False, parent=_current.get())
    token = _current.set(limit)
    try:
        yield
    finally:
        _current.reset(token)


# --- the retry loop --------------------------------------------------------------------------


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    max_attempts: int,
    final: Callable[[BaseException], BaseException] = _unchanged,
) -> T:
    """Run ``call`` up to ``max_attempts`` times in all, within the enclosing deadlines; the
    botocore error that ends it is raised as ``final(error)``."""
    loop = asyncio.get_running_loop()
    record = _Call(loop, loop.time(), final=final)
    limit = _current.get()
    limits = list(limit.chain()) if limit is not None else []
    hard = [each for each in limits if each.hard]
    for each in hard:
        each.in_flight.add(record)
    cancelled = False
    try:
        return await _attempt(record, call, max_attempts, limits)
    except AWS_ERRORS as exc:
        translated = final(exc)
        if translated is exc:
            raise
        raise translated from exc
    except asyncio.CancelledError:
        cancelled = True  # a hard limit that ran out reads this call's last error
        raise
    finally:
        if not cancelled:
            for each in hard:
                each.in_flight.discard(record)


class _SoftCut(Exception):
    """A retry was cut at a soft deadline (internal: turned into the last error)."""


async def _attempt(
    record: _Call, call: Callable[[], Awaitable[T]], max_attempts: int, limits: list[_Limit]
) -> T:
    loop = record.loop
    earliest = min(limits, key=lambda each: each.deadline) if limits else None
    # A soft deadline cuts retries itself; a hard one cancels through its own timeout.
    soft_cut = earliest.deadline if earliest is not None and not earliest.hard else None
    last: BaseException | None = None
    while True:
        record.attempts += 1
        try:
            return await _one(call, soft_cut if record.attempts > 1 else None)
        except _SoftCut:
            assert last is not None  # only retries are cut
            raise _annotated(record.last_answer or last, record, out_of_time=True) from None
        except (ClientError, BotoCoreError) as exc:
            last = exc
            if _is_answer(exc):
                record.last_answer = exc
            if not is_retryable(exc):
                if record.attempts > 1:  # e.g. a 500, then a 404: say it was a retry
                    raise _annotated(exc, record) from None
                raise
            final = record.last_answer or exc
            if record.attempts >= max_attempts:
                raise _annotated(final, record) from None
            delay = _backoff(record.attempts, exc)
            if earliest is not None and loop.time() + delay >= earliest.deadline:
                raise _annotated(final, record, out_of_time=True) from None
            await asyncio.sleep(delay)


async def _one(call: Callable[[], Awaitable[T]], cut_at: float | None) -> T:
    if cut_at is None:
        return await call()
    cut = asyncio.timeout_at(cut_at)
    try:
        async with cut:
            return await call()
    except TimeoutError:
        if cut.expired():
            raise _SoftCut() from None
        raise


class RetryingClient:
    """An aiobotocore client whose API methods, and the pages of its paginators, run through
    :func:`call_with_retries`. Everything else (``meta``, ``exceptions``, presigning) passes
    through untouched.

    Subclasses may override :meth:`_final_error` (what a failed call raises) and
    :meth:`_response` (what a successful call returns)."""

    def __init__(self, client: Any, max_attempts: int) -> None:
        self._client = client
        self._max_attempts = max_attempts
        self._operations: dict[str, str] = dict(client.meta.method_to_api_mapping)

    @property
    def unwrapped(self) -> Any:
        return self._client

    def get_paginator(self, operation_name: str) -> Any:
        paginator = self._client.get_paginator(operation_name)
        # A paginator calls the client method it was built with, for every page; hand it the
        # retrying one (botocore keeps it as ``_method``, read when ``paginate`` is called).
        paginator._method = self._retrying(operation_name, paginator._method)
        return paginator

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self._operations:
            return attr
        return self._retrying(name, attr)

    def _retrying(self, name: str, method: Callable[..., Awaitable[Any]]) -> Any:
        max_attempts = self._max_attempts
        operation = self._operations.get(name, name)

        async def retried(*args: Any, **kwargs: Any) -> Any:
            response = await call_with_retries(
                lambda: method(*args, **kwargs),
                max_attempts,
                lambda exc: self._final_error(operation, kwargs, exc),
            )
            return self._response(operation, kwargs, response)

        retried.__name__ = name
        return retried

    def _final_error(
        self, operation: str, params: Mapping[str, Any], exc: BaseException
    ) -> BaseException:
        """The exception a call of ``operation`` raises for ``exc`` (here: ``exc`` itself)."""
        return exc

    def _response(self, operation: str, params: Mapping[str, Any], response: Any) -> Any:
        """What a successful call of ``operation`` returns (here: the response itself)."""
        return response
