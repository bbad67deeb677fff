"""structlog set-up: JSON lines off a TTY, readable console on one, secrets redacted everywhere.

The redaction processor runs after exception rendering (so tracebacks are covered) and before
the renderer. Tracebacks never include local variables: a secret in a local would leak.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, WrappedLogger

from alivemcp.hygiene.redact import redact
from alivemcp.hygiene.untrusted import clean_text

__all__ = ["configure_logging", "redact_processor"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def redact_processor(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    return {key: _printable(redact(value, key=key)) for key, value in event_dict.items()}


def _printable(value: Any) -> Any:
    # A lone surrogate from a target's answer would make the console renderer's write raise:
    # a log line must never be what takes a run (or the daemon) down.
    if isinstance(value, str) and not value.isascii():
        return clean_text(value, 100_000)
    return value


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_console:
        renderer: Any = structlog.dev.ConsoleRenderer(
            exception_formatter=structlog.dev.plain_traceback
        )
        tail: list[Any] = [structlog.processors.format_exc_info, redact_processor, renderer]
    else:
        tail = [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            redact_processor,
            structlog.processors.JSONRenderer(),
        ]
    structlog.configure(
        processors=[*shared, *tail],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library: route them through the same redaction.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(_LEVELS[level], logging.INFO))
    # moto's werkzeug (demo) logs one INFO line per request. aiokafka
    # logs ERROR for conditions the Kafka probes already report as results (a missing topic, a
    # coordinator moving): at info level those would double every finding.
    quiet = logging.DEBUG if level == "debug" else logging.WARNING
    # httpx logs every request URL at INFO: a webhook URL is a secret.
    for noisy in ("botocore", "aiobotocore", "werkzeug", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(quiet, logging.WARNING))
    logging.getLogger("aiokafka").setLevel(logging.DEBUG if level == "debug" else logging.CRITICAL)


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        from alivemcp.hygiene.redact import redact_text

        return redact_text(super().format(record))
