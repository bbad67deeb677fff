"""Producer ids for the idempotent producer: asked of one broker at a time, each attempt
bounded, and what the brokers answered when none handed one out.

An idempotent producer writes nothing before a broker hands it a producer id
(InitProducerId). aiokafka asks a random broker, waits a whole request timeout on one that
does not answer, and asks again and again while brokers answer "not yet". A broker hands out
ids from a block the active controller allocated to it; one without a block answers
``COORDINATOR_LOAD_IN_PROGRESS`` while it asks the controller for one. When the active KRaft
controller hangs (paused, not dead), the brokers go on asking it until their own request to it
times out (``controller.socket.timeout.ms``, 30 s by default): every broker without a block
answers "not yet" for that long, so no new idempotent producer can start, while writing to
the partitions works.

:func:`init_producer_id` asks the brokers of a bootstrapped client one at a time, healthy ones
first, each attempt bounded to a share of the time, so a broker that does not answer costs
one attempt and is asked directly in the background (it becomes a suspect only if it does
not answer that either). When only "not yet" came back by the time given, it raises
:class:`NoProducerId` saying which broker answered what.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from aiokafka.errors import (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
    for_code,
)
from aiokafka.protocol.transaction import InitProducerIdRequest

from alivemcp.plumbing.kafka_brokers import Steering, seconds_text
from alivemcp.plumbing.kafka_errors import error_name
from alivemcp.plumbing.kafka_suspects import SuspectWatch

__all__ = ["ATTEMPT_SHARE", "NoProducerId", "init_producer_id"]

#: Of the time given, the most one broker's attempt may take: a broker that does not answer
#: leaves time for the others.
ATTEMPT_SHARE = 1 / 3
#: The least an attempt may take (connecting and authenticating to a broker comes first).
MIN_ATTEMPT = 1.0
#: Back-off after a round in which every broker asked answered "not yet" (doubling, capped).
BACKOFF = (0.1, 0.5)


class NoProducerId(Exception):
    """No broker handed out a producer id in time, though some answered ("not yet")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        #: ``no broker handed out a producer id within 4.9s: broker 1 (...) answers ...``
        self.reason = reason


async def init_producer_id(
    producer: Any,
    steering: Steering,
    watch: SuspectWatch,
    seconds: float,
) -> None:
    """Give the bootstrapped idempotent ``producer`` (an ``AIOKafkaProducer``) its producer id.

    Brokers are asked one at a time, healthy ones first (in random order), each attempt
    within :data:`ATTEMPT_SHARE` of ``seconds``; a suspect only when no other is healthy. A
    broker that answers "not yet" (a retriable error) is asked again after the others; one
    that does not answer is not asked again while another can be. After ``seconds``, when a
    broker answered but none handed out an id: :class:`NoProducerId`. When none answered at
    all, it goes on asking (the caller's bound ends it and names the brokers it was waiting
    on). An error that is not retriable (the prober may not write idempotently) is raised as
    aiokafka's error."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    give_up = started + seconds
    per_attempt = min(watch.conn.request_timeout, max(MIN_ATTEMPT, seconds * ATTEMPT_SHARE))
    txn = producer._txn_manager
    request = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=txn.transaction_timeout_ms
    )
    not_yet: dict[int, str] = {}  # broker -> the error it answered
    silent: dict[int, str] = {}  # broker -> why it is not asked again
    backoff = BACKOFF[0]
    while True:
        candidates = _in_order(steering, silent)
        if not candidates and not not_yet:
            silent.clear()  # nobody answered: ask them all again, until the caller's bound
            candidates = _in_order(steering, silent)
        for node_id in candidates:
            now = loop.time()
            if not_yet and now >= give_up:
                break
            # With a "not yet" in hand, no attempt runs past the end.
            attempt = min(per_attempt, give_up - now) if not_yet else per_attempt
            try:
                async with asyncio.timeout(attempt):
                    response = await producer.client.send(node_id, request)
            except (TimeoutError, RequestTimedOutError):
                if attempt < per_attempt:
                    break  # cut short at the end: the broker had less than its share
                silent[node_id] = f"did not answer InitProducerId within {seconds_text(attempt)}"
                # Not answering one request does not make a broker the culprit: asked
                # directly, it becomes a suspect only if it does not answer that either.
                watch._background(watch.ask_brokers([node_id], min(2.0, per_attempt)))
                continue
            except (NodeNotReadyError, KafkaConnectionError, OSError) as exc:
                silent[node_id] = f"cannot be asked: {type(exc).__name__}"
                continue
            address = steering.address(node_id)
            if address is not None:
                watch.health.answered(address)
            if response.error_code == 0:
                txn.set_pid_and_epoch(response.producer_id, response.producer_epoch)
                return
            error = for_code(response.error_code)
            if not error.retriable:
                raise error()
            # Named as the protocol (and broker logs) name it: aiokafka's class names are
            # the consumer-group ones (GroupLoadInProgressError for a producer id).
            not_yet[node_id] = str(getattr(error, "message", "") or error_name(error.errno))
        if not_yet and loop.time() >= give_up:
            raise NoProducerId(_no_id_reason(steering, not_yet, silent, loop.time() - started))
        await asyncio.sleep(backoff)
        backoff = min(BACKOFF[1], backoff * 2)


def _in_order(steering: Steering, silent: Collection[int]) -> list[int]:
    """Brokers to ask this round: healthy first (random order), a suspect only when no
    other broker is healthy, none that was silent this start."""
    return [
        n
        for n in steering.order(steering.nodes())
        if n not in silent and steering.skipped(n) is None
    ]


def _no_id_reason(
    steering: Steering, not_yet: dict[int, str], silent: dict[int, str], waited: float
) -> str:
    """``no broker handed out a producer id within 4.9s: broker 1 (...), broker 2 (...)
    answer COORDINATOR_LOAD_IN_PROGRESS (waiting for the controller)``."""
    by_error: dict[str, list[str]] = {}
    for node_id, error in sorted(not_yet.items()):
        by_error.setdefault(error, []).append(steering.name(node_id))
    parts = []
    for error, names in by_error.items():
        verb = "answers" if len(names) == 1 else "answer"
        why = " (waiting for the controller)" if error == "COORDINATOR_LOAD_IN_PROGRESS" else ""
        parts.append(f"{', '.join(names)} {verb} {error}{why}")
    parts += [f"{steering.name(n)} {why}" for n, why in sorted(silent.items())]
    return f"no broker handed out a producer id within {seconds_text(waited)}: " + "; ".join(parts)
