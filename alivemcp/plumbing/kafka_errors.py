"""The Kafka plumbing's error boundary: aiokafka's exceptions and Kafka error codes become the
engine's :class:`~alivemcp.errors.ProbeError` here, once, so probes never see a library type.

The detail keeps aiokafka's exception name (``NotEnoughReplicasError: ...``): it is the
Kafka error a broker operator recognises.
"""

from __future__ import annotations

import socket
import ssl
import struct

from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    for_code,
)

from alivemcp.errors import ErrorKind, ProbeError

__all__ = ["KafkaPlumbingError", "error_name", "kafka_error", "kind_for_code"]


class KafkaPlumbingError(ProbeError):
    """A Kafka operation failed; ``str()`` is safe to show (no secrets)."""


#: Broker error codes that say the request itself was refused as invalid.
_REJECTED_CODES = frozenset(
    {
        4,  # InvalidFetchRequest
        10,  # MessageSizeTooLarge
        17,  # InvalidTopic
        21,  # InvalidRequiredAcks
        24,  # InvalidGroupId
        35,  # UnsupportedVersion
        37,  # InvalidPartitions
        38,  # InvalidReplicationFactor
        39,  # InvalidReplicationAssignment
        40,  # InvalidConfiguration
        42,  # InvalidRequest
        44,  # PolicyViolation
    }
)
#: Broker error codes that refuse the prober's identity.
_PERMISSION_CODES = frozenset({29, 30, 31, 53})  # topic, group, cluster, transactional id
_NOT_FOUND_CODES = frozenset({3, 69})  # UnknownTopicOrPartition, GroupIdNotFound


def error_name(code: int) -> str:
    """aiokafka's name for a Kafka error code (``NotLeaderForPartitionError``)."""
    return str(for_code(code).__name__)


def kind_for_code(code: int) -> ErrorKind:
    """What a non-zero Kafka error code in a response says, as an :class:`ErrorKind`."""
    if code in _PERMISSION_CODES:
        return ErrorKind.PERMISSION
    if code in _NOT_FOUND_CODES:
        return ErrorKind.NOT_FOUND
    if code in _REJECTED_CODES:
        return ErrorKind.REJECTED
    if code == 58:  # SaslAuthenticationFailed
        return ErrorKind.AUTH
    if code == RequestTimedOutError.errno:
        return ErrorKind.TIMEOUT
    if for_code(code).retriable:  # leader elections, coordinators loading, too few replicas
        return ErrorKind.UNAVAILABLE
    return ErrorKind.OTHER


def _kind_of(exc: BaseException, unclassified: ErrorKind) -> ErrorKind:
    name = type(exc).__name__
    if isinstance(exc, TimeoutError | KafkaTimeoutError | RequestTimedOutError):
        return ErrorKind.TIMEOUT
    if isinstance(exc, ssl.SSLError):
        return ErrorKind.TLS
    if isinstance(exc, socket.gaierror):
        return ErrorKind.DNS
    if "Authentication" in name or "Sasl" in name or "authenticat" in str(exc).lower():
        return ErrorKind.AUTH
    if isinstance(exc, KafkaConnectionError | NodeNotReadyError | OSError):
        return ErrorKind.CONNECT
    if isinstance(exc, ValueError | struct.error):
        return ErrorKind.PROTOCOL  # an answer that does not decode
    if isinstance(exc, UnknownTopicOrPartitionError):
        return ErrorKind.NOT_FOUND
    errno = getattr(exc, "errno", None)
    if isinstance(exc, KafkaError) and isinstance(errno, int) and errno:
        return kind_for_code(errno)
    if isinstance(exc, KafkaError) and exc.retriable:
        return ErrorKind.UNAVAILABLE
    return unclassified


def kafka_error(
    exc: BaseException,
    *,
    target: str,
    operation: str,
    timeout: float | None = None,
    unclassified: ErrorKind = ErrorKind.OTHER,
) -> KafkaPlumbingError:
    """``exc`` (an aiokafka error, an ``OSError``, a timeout, an undecodable answer) as a
    :class:`KafkaPlumbingError`; one already translated is returned as it is. ``timeout``:
    the request timeout, named when the library's own message is empty. ``unclassified``:
    the kind of an error nothing more specific is known of (while connecting, any failure
    means the cluster cannot be reached: ``connect``)."""
    if isinstance(exc, KafkaPlumbingError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, ssl.SSLError):
        detail = f"TLS: {exc}"
    elif (isinstance(exc, TimeoutError) or not str(exc)) and timeout is not None:
        detail = f"{name}: no Kafka answer within {timeout:g}s"
    else:
        detail = f"{name}: {exc}" if str(exc) else name
    errno = getattr(exc, "errno", None) if isinstance(exc, KafkaError) else None
    return KafkaPlumbingError(
        _kind_of(exc, unclassified),
        target=target,
        operation=operation,
        detail=detail,
        code=error_name(errno) if isinstance(errno, int) and errno else None,
    )
