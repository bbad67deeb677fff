"""The results pipeline: every finished run goes through each stage, in order, once.

A pipeline is an optional gate followed by consumers. The gate decides whether a result goes on
at all (cluster mode: only while this replica holds the check's shard and its lease is live);
each consumer then takes it in turn. A consumer that raises is logged and counted; the others
still get the result, and the scheduler never sees the error.

Which stages the daemon's pipeline has, and in which order, is declared in one place:
:func:`alivemcp.app.route.result_route`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter

from alivemcp.engine.results import CheckResult

__all__ = ["ResultConsumer", "ResultGate", "ResultPipeline"]

log = structlog.get_logger("alivemcp.engine.pipeline")


class ResultConsumer(Protocol):
    #: Short name, used in the error counter's label and the log.
    name: str

    def consume(self, result: CheckResult) -> None:
        """Take one result. Must not block: hand slow work (I/O) to a queue or a task."""


class ResultGate(Protocol):
    @property
    def name(self) -> str:
        """Short name: the pipeline's first stage in :attr:`ResultPipeline.stages`."""
        ...

    def admit(self, result: CheckResult) -> bool:
        """Whether ``result`` goes on to the consumers (the gate counts what it withholds)."""


class ResultPipeline:
    def __init__(
        self,
        consumers: Sequence[ResultConsumer],
        registry: CollectorRegistry,
        gate: ResultGate | None = None,
    ) -> None:
        self.gate = gate
        self.consumers = tuple(consumers)
        self._errors = Counter(
            "alivemcp_result_consumer_errors",
            "Results a consumer (status, alerting, history) failed to take.",
            ["consumer"],
            registry=registry,
        )
        for consumer in self.consumers:
            self._errors.labels(consumer=consumer.name)

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages' names in order (the gate first): what the route declared."""
        names = tuple(consumer.name for consumer in self.consumers)
        return names if self.gate is None else (self.gate.name, *names)

    def __call__(self, result: CheckResult) -> None:
        gate = self.gate
        if gate is not None and not gate.admit(result):
            return
        for consumer in self.consumers:
            try:
                consumer.consume(result)
            except Exception:
                self._errors.labels(consumer=consumer.name).inc()
                log.exception(
                    "result consumer failed", consumer=consumer.name, check=result.check.name
                )
