"""Shared plumbing: long-lived clients that probes borrow instead of building their own.

One :class:`Plumbing` lives for the daemon's lifetime. Each area (AWS, Kafka, HTTP) is created
on first use and closed once at shutdown, so a thousand checks of one cluster or one AWS
account share one set of clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from alivemcp.probe import CheckContext

if TYPE_CHECKING:
    from alivemcp.plumbing.aws import AwsClients
    from alivemcp.plumbing.http import HttpClients
    from alivemcp.plumbing.kafka import KafkaClients


__all__ = ["Plumbing", "plumbing_of"]


class Plumbing:
    def __init__(self) -> None:
        self._aws: AwsClients | None = None
        self._kafka: KafkaClients | None = None
        self._http: HttpClients | None = None

    @property
    def aws(self) -> AwsClients:
        if self._aws is None:
            from alivemcp.plumbing.aws import AwsClients

            self._aws = AwsClients()
        return self._aws

    @property
    def kafka(self) -> KafkaClients:
        if self._kafka is None:
            from alivemcp.plumbing.kafka import KafkaClients

            self._kafka = KafkaClients(self)
        return self._kafka

    @property
    def http(self) -> HttpClients:
        if self._http is None:
            from alivemcp.plumbing.http import HttpClients

            self._http = HttpClients()
        return self._http

    async def aclose(self) -> None:
        """Close every client that was created. Safe to call more than once."""
        for area in (self._kafka, self._aws, self._http):
            if area is not None:
                await area.aclose()
        self._aws = self._kafka = self._http = None


def plumbing_of(context: CheckContext) -> Plumbing:
    """A probe's ``context.plumbing``, typed: the probe contract sits below the plumbing and
    cannot name this class (its ``CheckContext.plumbing`` is ``Any``)."""
    return cast(Plumbing, context.plumbing)
