"""Brokers that do not answer: suspected, asked again, and named when a step runs out of time.

:class:`SuspectWatch` is the second layer of :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`.
A broker that accepts connections but answers nothing becomes a suspect in the cluster's
:class:`~alivemcp.plumbing.kafka_brokers.BrokerHealth` (which steers every client of the
cluster away from it) and is asked again in the background every :data:`RETEST_EVERY`
seconds until it answers. When a step runs out of time, the brokers it was waiting on are
asked directly: only one that does not answer that either is blamed (waiting on a broker does
not make it the culprit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.kafka_access import Asks, AwsSource, ClusterAccess, alive
from alivemcp.plumbing.kafka_brokers import (
    BrokerHealth,
    Steering,
    Suspicion,
    broker_name,
    seconds_text,
)
from alivemcp.plumbing.kafka_errors import KafkaPlumbingError
from alivemcp.plumbing.kafka_settings import KafkaConnection

__all__ = ["RETEST_EVERY", "SuspectWatch"]

#: How often suspect brokers are asked again in the background.
RETEST_EVERY = 3.0


class SuspectWatch(ClusterAccess):
    """The brokers suspected of not answering, and asking brokers directly (the second layer
    of :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`)."""

    def __init__(self, conn: KafkaConnection, plumbing: AwsSource) -> None:
        super().__init__(conn, plumbing)
        self.health = BrokerHealth()
        #: Every broker address seen in a metadata answer, by node id.
        self._addresses: dict[int, str] = {}
        self._retest: asyncio.Task[None] | None = None

    def _address(self, node_id: int, steering: Steering | None = None) -> str | None:
        """Where a broker listens: the client's view, else any metadata answer seen (a
        fenced broker drops out of metadata, not out of the reasons)."""
        address = steering.address(node_id) if steering is not None else None
        return address or self._addresses.get(node_id)

    def broker_name(self, node_id: int) -> str:
        """``broker 2 (10.0.0.7:9092)``."""
        return broker_name(node_id, self._address(node_id))

    def suspect(self, node_id: int) -> Suspicion | None:
        """Why this broker is being avoided, if it is (it did not answer recently)."""
        return self.health.suspect(self._address(node_id))

    def _suspect(self, address: str, node_id: int | None, reason: str) -> Suspicion:
        suspicion = self.health.hung(address, node_id, reason)
        if self._retest is None or self._retest.done():
            self._retest = asyncio.ensure_future(self._retest_suspects())
        return suspicion

    async def _retest_suspects(self) -> None:
        """While any broker is suspect, ask it again every few seconds on a connection of its
        own (connect + ApiVersions): one that answers is trusted again at once."""
        while True:
            await asyncio.sleep(RETEST_EVERY)
            suspects = self.health.suspects()
            if not suspects:
                return
            timeout = min(2.0, self.conn.request_timeout)
            results = await asyncio.gather(
                *(self._answers(s.address, timeout) for s in suspects), return_exceptions=True
            )
            for suspicion, result in zip(suspects, results, strict=True):
                if result is True:
                    self.health.answered(suspicion.address)

    async def _answers_of(
        self, servers: Sequence[str], seconds: float, asks: Asks | None
    ) -> list[KafkaPlumbingError | None]:
        """Each server's answer to being asked directly: the build's own ask where there is
        one (waited for up to ``seconds`` more), else a new ask within ``seconds``."""
        loop = asyncio.get_running_loop()
        tasks = {
            s: (
                asks.tasks[s]
                if asks is not None and s in asks.tasks
                else asyncio.ensure_future(self._ask(s, seconds))
            )
            for s in servers
        }
        if tasks:
            await asyncio.wait(tasks.values(), timeout=seconds)
        answers: list[KafkaPlumbingError | None] = []
        for server, task in tasks.items():
            if task.done() and not task.cancelled():
                answers.append(task.result())
                continue
            since = asks.started if asks is not None and server in asks.tasks else None
            silent = seconds if since is None else loop.time() - since
            answers.append(
                self._error(
                    ErrorKind.TIMEOUT,
                    "ApiVersions",
                    f"did not answer ApiVersions within {seconds_text(silent)}",
                    target=server,
                )
            )
            if since is None:
                task.cancel()
        return answers

    async def _blame_bootstrap(
        self,
        servers: Sequence[str],
        waited: float,
        timeout: float,
        what: str,
        asks: Asks | None = None,
    ) -> str:
        """Why bootstrapping ran out of time: the servers asked directly (the build's own asks
        when it has them, else now; with what is left of ``timeout``); a silent one is named,
        and a suspect. One that refuses the prober's credentials raises an ``auth`` error
        instead: the time ran out on a refusal."""
        head = f"no Kafka answer within {seconds_text(waited)}"
        answers = await self._answers_of(servers, max(0.0, timeout - waited), asks)
        refused = next((p for p in answers if p is not None and p.kind is ErrorKind.AUTH), None)
        if refused is not None:
            raise self._refused(refused, what)
        silent = []
        for server, problem in zip(servers, answers, strict=True):
            if problem is None:
                self.health.answered(server)
            else:
                silent.append(
                    self._suspect(server, self._node_at(server), problem.detail).describe()
                )
        if silent:
            return f"{head}: " + "; ".join(silent)
        return f"{head} (bootstrapping from {', '.join(servers)})"

    async def _blame(self, stuck: Sequence[int], waited: float, timeout: float) -> str:
        """Why a step ran out of time, naming the brokers it was waiting on. Waiting on a
        broker does not make it the culprit (a leader waits for its followers, a broker for
        the controller): each is asked directly, with what is left of ``timeout``, and only
        one that does not answer that either becomes a suspect."""
        head = f"no Kafka answer within {seconds_text(waited)}"
        if not stuck:
            return head
        checked = await self.ask_brokers(stuck, max(0.0, timeout - waited))
        silent = [s.describe() for s in checked.values() if s is not None]
        if silent:
            return f"{head}: " + "; ".join(silent)
        waiting = ", ".join(self.broker_name(n) for n in stuck)
        if len(checked) < len(stuck):
            return f"{head} (waiting on {waiting})"
        return (
            f"{head} (waiting on {waiting}, which answer{'s' if len(stuck) == 1 else ''} otherwise)"
        )

    async def ask_brokers(
        self, node_ids: Iterable[int], timeout: float
    ) -> dict[int, Suspicion | None]:
        """Ask brokers directly (ApiVersions, each on a connection of its own, all at once):
        one that does not answer within ``timeout`` becomes a suspect, one that answers is
        one no more. Per broker: its suspicion, or None if it answered."""
        targets = [(n, self._address(n)) for n in dict.fromkeys(node_ids)]
        known = [(n, a) for n, a in targets if a is not None]
        answers = await asyncio.gather(*(self._ask(a, timeout) for _, a in known))
        found: dict[int, Suspicion | None] = {}
        for (node_id, address), problem in zip(known, answers, strict=True):
            if alive(problem):  # (refusing the prober's credentials is an answer too)
                self.health.answered(address)
                found[node_id] = None
            else:
                assert problem is not None
                found[node_id] = self._suspect(address, node_id, problem.detail)
        return found

    async def ask_every_broker(self, timeout: float) -> list[Suspicion]:
        """Ask every broker of the last metadata answer (:meth:`ask_brokers`); the current
        suspects. A hung broker whose partitions still look fine in metadata (nothing was
        written to them since it hung, or it leads them) is found this way, whichever broker
        the other requests of the run happened to ask."""
        await self.ask_brokers(list(self.brokers), timeout)
        return self.health.suspects()
