"""The cluster's clients: built answering servers first, started in time, shared, closed.

:class:`ClientBuilds` is the third layer of :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`.
A build asks every bootstrap server directly at once (aiokafka would try them one by one,
waiting a whole request timeout on a hung one), puts those that answered first, steers the
client away from suspects and starts it; a start that runs out of time names the broker(s) it
was waiting on, and one that fails names the server and its reason (aiokafka only logs it).
The admin client and the producer are shared and built on first use; a consumer belongs to
its caller. Clients that may wait on a hung broker are closed in the background.

The idempotent producer's start asks for its producer id itself (``kafka_producer_ids``: one
broker at a time, each attempt bounded). While the brokers answer only "not yet" (the
controller they get producer ids from does not answer), a plain ``acks=all`` producer stands
in and the writer says why: the writes still reach every partition leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.kafka_access import Asks, AwsSource, alive
from alivemcp.plumbing.kafka_brokers import (
    Steering,
    broker_name,
    inner_client,
    seconds_text,
    steering_of,
)
from alivemcp.plumbing.kafka_errors import KafkaPlumbingError
from alivemcp.plumbing.kafka_partitions import PartitionReader, PartitionWriter, close_quietly
from alivemcp.plumbing.kafka_producer_ids import NoProducerId, init_producer_id
from alivemcp.plumbing.kafka_settings import KafkaConnection, split_servers
from alivemcp.plumbing.kafka_suspects import SuspectWatch

__all__ = ["WAIT_SHARE", "ClientBuilds"]

#: Of a step's time, the share spent waiting for the answer; the rest is for asking the
#: brokers it was waiting on whether they answer at all (who hung, or only waited).
WAIT_SHARE = 0.8
#: Of the producer start's time, the share brokers answering "not yet" to InitProducerId are
#: waited for before a plain producer stands in (it is built in the rest).
PRODUCER_ID_SHARE = 0.5

_PRODUCER_START = "producer start (InitProducerId)"

#: How a client is started within its seconds (``None``: unbounded).
Starter = Callable[[Any, float | None], Awaitable[None]]


class ClientBuilds(SuspectWatch):
    """Building, starting, sharing and closing the cluster's clients (the third layer of
    :class:`~alivemcp.plumbing.kafka.KafkaClusterClient`)."""

    def __init__(self, conn: KafkaConnection, plumbing: AwsSource) -> None:
        super().__init__(conn, plumbing)
        self._lock = asyncio.Lock()
        self._producer_lock = asyncio.Lock()
        self._admin: AIOKafkaAdminClient | None = None
        self._producer: AIOKafkaProducer | None = None
        #: The plain producer standing in while no producer id can be had (see producer()).
        self._stand_in: AIOKafkaProducer | None = None
        #: Bootstrap servers' direct asks still running after their build (see Asks).
        self._asking: set[Asks] = set()

    async def _rank_bootstrap(
        self, servers: list[str], timeout: float, what: str, asks: Asks
    ) -> list[str]:
        """Ask every bootstrap server at once and keep those that answered (all of them if
        none did): aiokafka bootstraps from the servers one by one in random order, waiting a
        whole request timeout on a hung one. A server still silent well after another
        answered becomes a suspect (judged in the background: the caller goes on at once).
        A server that refuses the prober's credentials ends it at once with an ``auth``
        error: a client would be refused as well, and waiting for it could only turn the
        refusal into a timeout. ``asks`` (one per server, started by the caller for the whole
        step) go on after ``timeout``: a start that runs out of time reads their answers."""
        if len(servers) < 2:  # (nothing to rank: a refusal comes from the client's start)
            return servers
        loop = asyncio.get_running_loop()
        started = asks.started
        by_task = {asks.tasks[s]: s for s in servers}
        pending = set(by_task)
        answered: list[str] = []
        until = started + timeout
        while pending:
            wait = until - loop.time()
            if wait <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                problem = task.result()
                if alive(problem):
                    self.health.answered(by_task[task])
                if problem is not None and problem.kind is ErrorKind.AUTH:
                    raise self._refused(problem, what)
                if problem is None:
                    answered.append(by_task[task])
            if answered and until == started + timeout:
                # Healthy brokers answer within moments of each other.
                elapsed = loop.time() - started
                until = min(until, loop.time() + max(0.2, 2 * elapsed))
        if pending:
            judge = self._judge_silent(
                {t: by_task[t] for t in pending}, bool(answered), started, started + timeout
            )
            self._background(judge)
        return answered or servers

    async def _judge_silent(
        self,
        asks: dict[asyncio.Future[KafkaPlumbingError | None], str],
        others_answered: bool,
        started: float,
        deadline: float,
    ) -> None:
        """Bootstrap servers still asked: one silent long after another answered (a few
        times the time a healthy one takes, at least 2 s) becomes a suspect. (The asks are the
        build's: they end by their own timeout.)"""
        loop = asyncio.get_running_loop()
        limit = min(deadline, loop.time() + 2.0)
        done, pending = await asyncio.wait(asks, timeout=max(0.0, limit - loop.time()))
        for task in done:
            if alive(task.result()):
                self.health.answered(asks[task])
        if others_answered:
            waited = loop.time() - started
            for task in pending:
                server = asks[task]
                self._suspect(
                    server,
                    self._node_at(server),
                    f"did not answer ApiVersions within {seconds_text(waited)}",
                )

    async def _start(
        self,
        client: Any,
        what: str,
        timeout: float | None,
        asks: Asks | None = None,
        start: Starter | None = None,
    ) -> Any:
        """Start ``client`` (with ``start``, else its own ``start()``) within ``timeout``; on
        running out, name the broker(s) it was waiting on and close it in the background
        (closing may wait on them too)."""
        steering = steering_of(client)
        bound = asyncio.timeout(None if timeout is None else timeout * WAIT_SHARE)
        try:
            async with bound:
                await (client.start() if start is None else start(client, timeout))
        except BaseException as exc:
            if bound.expired():
                assert timeout is not None
                self._close_later(client)
                waited = timeout * WAIT_SHARE
                if steering is not None and not steering.nodes():  # still bootstrapping
                    reason = await self._blame_bootstrap(
                        steering.bootstrap, waited, timeout, what, asks
                    )
                else:
                    stuck = steering.stuck() if steering is not None else []
                    reason = await self._blame(stuck, waited, timeout)
                raise self._error(ErrorKind.TIMEOUT, what, reason) from exc
            if isinstance(exc, NoProducerId):  # the caller builds a stand-in: do not wait
                self._close_later(client)
                raise
            with contextlib.suppress(Exception):
                await close_quietly(client)
            if isinstance(exc, KafkaError | OSError | TimeoutError):
                cause = await self._bootstrap_failure(timeout) if _is_bootstrap_error(exc) else None
                if cause is not None and cause.kind is ErrorKind.AUTH:
                    raise self._refused(cause, what) from exc
                if cause is not None:  # as the cluster's error, naming the server
                    raise KafkaPlumbingError(
                        cause.kind,
                        target=self.conn.describe(),
                        operation=what,
                        detail=f"{broker_name(self._node_at(cause.target), cause.target)} "
                        f"{cause.detail}",
                        code=cause.code,
                    ) from exc
                raise self._translate(exc, what) from exc
            raise
        return client

    async def _build(
        self,
        make: Callable[..., Any],
        what: str,
        timeout: float | None,
        start: Starter | None = None,
    ) -> Any:
        """Create a client whose bootstrap list puts answering servers first, steered away from
        suspects, and start it (with ``start``, else its own ``start()``), all within
        ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        options = await self.client_options()
        servers = split_servers(options["bootstrap_servers"])
        step = self.conn.request_timeout if timeout is None else timeout
        # Every server asked directly, once, for the whole step: the ranking reads the first
        # answers, and a start that runs out of time reads the rest (a refusal of the
        # credentials that came late is still a refusal, not a timeout).
        asks = Asks(loop.time(), {s: asyncio.ensure_future(self._ask(s, step)) for s in servers})
        try:
            ranked = await self._rank_bootstrap(servers, step / 2, what, asks)
            options["bootstrap_servers"] = ",".join(ranked)
            client = make(**options)
            Steering(inner_client(client), self.health, ranked)
            left = None if deadline is None else max(0.0, deadline - loop.time())
            return await self._start(client, what, left, asks, start)
        finally:
            self._asking.add(asks)
            asks.when_done(self._asking.discard)

    async def _shared(
        self,
        attr: str,
        lock: asyncio.Lock,
        make: Callable[..., Any],
        what: str,
        timeout: float | None,
    ) -> Any:
        """The shared client in ``attr``, built on first use (within ``timeout``, waiting for
        another caller's build included)."""
        client = getattr(self, attr)
        if client is not None:
            return client
        async with self._holding(lock, what, timeout) as left:
            client = getattr(self, attr)
            if client is None:
                client = await self._build(make, what, left)
                setattr(self, attr, client)
            return client

    @contextlib.asynccontextmanager
    async def _holding(
        self, lock: asyncio.Lock, what: str, timeout: float | None
    ) -> AsyncIterator[float | None]:
        """Hold ``lock``, waiting at most ``timeout`` for another caller's build; gives the
        seconds left of ``timeout``."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(timeout):
                await lock.acquire()
        except TimeoutError as exc:
            raise self._error(
                ErrorKind.TIMEOUT,
                what,
                f"another start still running after {seconds_text(timeout or 0)}",
            ) from exc
        try:
            yield None if timeout is None else max(0.0, timeout - (loop.time() - started))
        finally:
            lock.release()

    async def _bootstrap_failure(self, timeout: float | None) -> KafkaPlumbingError | None:
        """Why bootstrapping failed: aiokafka only logs the per-broker cause (a refused
        password, an untrusted certificate) and raises "Unable to bootstrap". The servers are
        asked again, at once and within ``timeout``; a refused password outranks the rest
        (it is the prober's own doing, whatever else went wrong)."""
        servers = split_servers(await self.bootstrap_servers())[:3]
        seconds = self.conn.request_timeout if timeout is None else max(0.1, timeout)
        problems = [
            p
            for p in await asyncio.gather(*(self._ask(s, seconds) for s in servers))
            if p is not None
        ]
        refused = [p for p in problems if p.kind is ErrorKind.AUTH]
        return next(iter(refused or problems), None)

    async def admin(self, timeout: float | None = None) -> AIOKafkaAdminClient:
        client: AIOKafkaAdminClient = await self._shared(
            "_admin", self._lock, AIOKafkaAdminClient, "admin client start", timeout
        )
        return client

    async def producer(self, timeout: float | None = None) -> PartitionWriter:
        """The shared idempotent ``acks=all`` producer, started within ``timeout``.

        While no broker hands out a producer id (they answer "not yet": the controller they
        get ids from does not answer), a plain ``acks=all`` producer stands in, kept until the
        idempotent one starts, and the writer says why
        (:attr:`~alivemcp.plumbing.kafka_partitions.PartitionWriter.without_idempotence`).
        Every call without the idempotent producer tries to start it again."""
        if self._producer is not None:
            return PartitionWriter(self._producer)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with self._holding(self._producer_lock, _PRODUCER_START, timeout) as left:
            if self._producer is None:
                try:
                    self._producer = await self._build(
                        _idempotent_producer, _PRODUCER_START, left, self._start_idempotent
                    )
                except NoProducerId as missing:
                    if self._stand_in is None:
                        rest = None if deadline is None else max(0.0, deadline - loop.time())
                        self._stand_in = await self._build(
                            _plain_producer, "producer start (without idempotence)", rest
                        )
                    return PartitionWriter(self._stand_in, without_idempotence=missing.reason)
                self._drop_stand_in()
            return PartitionWriter(self._producer)

    async def _start_idempotent(self, producer: Any, timeout: float | None) -> None:
        """``AIOKafkaProducer.start()`` with the producer id asked for here: bootstrap, then
        InitProducerId one broker at a time, giving up on "not yet" answers after
        :data:`PRODUCER_ID_SHARE` of ``timeout``; then the sender, which finds the id set."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await producer.client.bootstrap()
        steering = steering_of(producer)
        assert steering is not None
        seconds = 2 * self.conn.request_timeout if timeout is None else timeout
        left = max(0.0, seconds * PRODUCER_ID_SHARE - (loop.time() - started))
        await init_producer_id(producer, steering, self, left)
        await producer._sender.start()

    def _drop_stand_in(self) -> None:
        stand_in, self._stand_in = self._stand_in, None
        if stand_in is not None:
            self._close_later(stand_in)

    async def new_consumer(
        self, timeout: float | None = None, *, max_wait: float = 0.1
    ) -> PartitionReader:
        """A started group-less reader the caller owns (and must ``close()``), e.g. a canary
        reader: it reads the partitions it is told to follow from their end on, waiting at
        most ``max_wait`` seconds for a broker to fill a fetch."""

        def make(**options: Any) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="latest",
                fetch_max_wait_ms=int(max_wait * 1000),
                isolation_level="read_uncommitted",
                **options,
            )

        client: AIOKafkaConsumer = await self._build(make, "consumer start", timeout)
        return PartitionReader(client)

    def _close_later(self, client: Any) -> None:
        self._background(close_quietly(client))

    async def reset_producer(self) -> None:
        """Drop the producer (after a failed send its state is suspect). The old one is
        closed in the background: flushing its pending batches may wait on a hung broker."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self._close_later(producer)
        self._drop_stand_in()

    def _drop_clients(self) -> None:
        """Forget the shared clients now and close them in the background."""
        clients = (self._admin, self._producer, self._stand_in)
        self._admin = self._producer = self._stand_in = None
        self._bootstrap = None
        for client in clients:
            if client is not None:
                self._close_later(client)

    async def reset(self) -> None:
        """Close every client; the next call rebuilds them (and re-resolves the ARN). What
        the cluster learnt about hung brokers is kept."""
        admin, producer, stand_in = self._admin, self._producer, self._stand_in
        self._admin = self._producer = self._stand_in = None
        self._bootstrap = None
        for client in (admin, producer, stand_in):
            if client is not None:
                await close_quietly(client)

    async def aclose(self) -> None:
        for asks in list(self._asking):
            asks.cancel()
        if self._retest is not None:
            self._retest.cancel()
            await asyncio.gather(self._retest, return_exceptions=True)
        await self.reset()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _idempotent_producer(**options: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(enable_idempotence=True, acks="all", linger_ms=0, **options)


def _plain_producer(**options: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(enable_idempotence=False, acks="all", linger_ms=0, **options)


def _is_bootstrap_error(exc: BaseException) -> bool:
    return isinstance(exc, KafkaConnectionError) and "bootstrap" in str(exc)
