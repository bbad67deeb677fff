"""The results pipeline: every finished run goes to each consumer, in order, once.

Status (what metrics, the API and the page read), alerting and history are consumers; the
cluster's results stream will be one more. A consumer that raises is logged and counted; the
others still get the result, and the scheduler never sees the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter

from alivemcp.engine.results import CheckResult

__all__ = ["ResultConsumer", "ResultPipeline"]

log = structlog.get_logger("alivemcp.engine.pipeline")


class ResultConsumer(Protocol):
    #: Short name, used in the error counter's label and the log.
    name: str

    def consume(self, result: CheckResult) -> None:
        """Take one result. Must not block: hand slow work (I/O) to a queue or a task."""


class ResultPipeline:
    def __init__(self, consumers: Sequence[ResultConsumer], registry: CollectorRegistry) -> None:
        self.consumers = tuple(consumers)
        self._errors = Counter(
            "alivemcp_result_consumer_errors",
            "Results a consumer (status, alerting, history) failed to take.",
            ["consumer"],
            registry=registry,
        )
        for consumer in self.consumers:
            self._errors.labels(consumer=consumer.name)

    def __call__(self, result: CheckResult) -> None:
        for consumer in self.consumers:
            try:
                consumer.consume(result)
            except Exception:
                self._errors.labels(consumer=consumer.name).inc()
                log.exception(
                    "result consumer failed", consumer=consumer.name, check=result.check.name
                )
