"""Shared plumbing: long-lived clients that probes borrow instead of building their own.

One :class:`Plumbing` lives for the daemon's lifetime. Each area (AWS, Kafka, HTTP) is created
on first use and closed once at shutdown, so a thousand checks of one cluster or one AWS
account share one set of clients.

Every HTTP request of the probe client names the prober in its ``User-Agent``
(:func:`user_agent`): ``alivemcp/<version>``, and with a location
``alivemcp/<version> (+location eu-west)``, so a target's operators can tell the vantage points
of a several-location deployment apart. Each :class:`Plumbing` sends its own (tests run several
replicas, of several locations, in one process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from alivemcp.plumbing._http_agent import checked_user_agent, user_agent
from alivemcp.probe import CheckContext

if TYPE_CHECKING:
    from alivemcp.plumbing.aws import AwsClients
    from alivemcp.plumbing.http import HttpClients
    from alivemcp.plumbing.kafka import KafkaClients


__all__ = ["Plumbing", "plumbing_of", "user_agent"]


#: :func:`user_agent` by another name: ``Plumbing.__init__``'s parameter shadows it.
_default_user_agent = user_agent


class Plumbing:
    """``user_agent``: the ``User-Agent`` every HTTP request of the probe client sends
    (default :func:`user_agent` without a location)."""

    def __init__(self, user_agent: str | None = None) -> None:
        self.user_agent = (
            _default_user_agent() if user_agent is None else checked_user_agent(user_agent)
        )
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

            self._http = HttpClients(user_agent=self.user_agent)
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
