"""The vote header (alivemcp/cluster/vote_header.py: ``result_headers`` writes it, the view
reads it with ``decode_vote``): it says what the JSON value says, a hostile one is refused field
by field, the value is read (and must agree) when the header says it holds more or the result is
not up, and records of older replicas (no header, no location) are read as before. Also the
board's verdicts, made without ``dataclasses.replace`` and judged again only when a vote
changes. The last test runs records through a real view on the shared 3-broker Kafka."""

from __future__ import annotations

import dataclasses
import json
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from alivemcp.cluster.quorum import RESULT_FIELDS, QuorumBoard, _verdict_result
from alivemcp.cluster.result_record import decode_result
from alivemcp.cluster.shards import shard_of
from alivemcp.cluster.stream import ResultsStream, result_record
from alivemcp.cluster.view import ResultsView
from alivemcp.cluster.vote_header import (
    HEAD,
    VOTE_HEADER,
    VOTE_LABELED,
    decode_vote,
    result_headers,
)
from alivemcp.engine.results import CheckInfo, CheckResult, LocationVote
from alivemcp.engine.status import StatusStore
from alivemcp.probe import LabeledObservation, Status
from alivemcp.testbed.kafka import KafkaCluster
from tests.support.results_stream import (
    cluster_config,
    create_topics,
    metric,
    parts,
    unique,
    wait_for,
)

CHECK = CheckInfo("mcp/payments", "mcp_endpoint", {"team": "core"}, interval=30.0)
KEY = CHECK.name.encode()


def store_of(*infos: CheckInfo) -> StatusStore:
    store = StatusStore("replica-z")
    store.set_checks(infos or (CHECK,))
    return store


def a_result(**change: object) -> CheckResult:
    base = CheckResult(
        check=CHECK,
        status=Status.UP,
        reason="HTTP 200, 12 tools",
        duration_seconds=0.0123,
        started_at=1_700_000_000.125,
        finished_at=1_700_000_000.1373,
        observations={"http_status": 200.0, "tools_count": 12.0, "response_seconds": 0.0123},
    )
    return dataclasses.replace(base, **change)  # type: ignore[arg-type]


def header_of(result: CheckResult, replica: str = "eu-west-1", location: str = "eu-west") -> bytes:
    ((name, value),) = result_headers(result, replica, location)
    assert name == VOTE_HEADER
    return value


def from_header(header: bytes, key: bytes | None = KEY) -> CheckResult | str:
    return decode_vote(header, key, store_of())[1]


def fields(result: CheckResult | str) -> tuple[object, ...]:
    assert isinstance(result, CheckResult), result
    return (
        result.check,
        result.status,
        result.reason,
        result.duration_seconds,
        result.started_at,
        result.finished_at,
        dict(result.observations),
        result.replica,
        result.location,
    )


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"status": Status.DOWN, "reason": "connection refused: " + "x" * 2000},
        {"status": Status.DEGRADED, "reason": "slow — 4.2 s, ünïcödé \udc80"},
        {"duration_seconds": float("inf"), "observations": {"a": float("nan"), "b": 1.0}},
        {"duration_seconds": -3.0, "observations": {}},
        {"status": Status.UNKNOWN, "reason": "", "observations": {"n": 7}},
    ],
)
def test_the_header_says_what_the_json_value_says(change: dict[str, object]) -> None:
    result = a_result(**change)
    from_json = decode_result(result_record(result, "eu-west-1", None, "eu-west"), store_of())[1]
    assert fields(from_header(header_of(result))) == fields(from_json)


def test_labels_and_probe_type_come_from_the_config_and_flags_say_what_else_the_value_has() -> None:
    labeled = a_result(labeled_observations=(LabeledObservation("tool_ms", 3.0, {"tool": "x"}),))
    name, decoded, flags = decode_vote(header_of(labeled), KEY, store_of())
    assert name == CHECK.name and flags == VOTE_LABELED
    assert isinstance(decoded, CheckResult)
    assert decoded.check is CHECK and decoded.labeled_observations == ()
    assert decode_vote(header_of(a_result()), KEY, store_of())[2] == 0


def test_a_result_that_cannot_be_packed_has_no_header() -> None:
    assert result_headers(a_result(started_at=float("nan")), "r", "eu-west") == []
    assert result_headers(a_result(), "r" * 300, "eu-west") == []
    many = {f"o{i}": 1.0 for i in range(201)}
    assert result_headers(a_result(observations=many), "r", "eu-west") == []


def _patched(at: int, value: bytes) -> Callable[[bytes], bytes]:
    return lambda header: header[:at] + value + header[at + len(value) :]


def _head(**change: object) -> Callable[[bytes], bytes]:
    def patch(header: bytes) -> bytes:
        names = ("version", "flags", "status", "started", "finished", "duration")
        head = dict(zip(names, HEAD.unpack_from(header), strict=True))
        head.update(change)
        return HEAD.pack(*head.values()) + header[HEAD.size :]

    return patch


def _at_count(value: bytes) -> Callable[[bytes], bytes]:
    """The observation count: the byte before the two of the names' length."""

    def patch(header: bytes) -> bytes:
        at = header.index(b"\x0bhttp_status") - 3
        return header[:at] + value + header[at + 1 :]

    return patch


HOSTILE: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda h: b"",
    "truncated head": lambda h: h[:10],
    "truncated tail": lambda h: h[:-3],
    "trailing bytes": lambda h: h + b"\x00",
    "other version": _head(version=2),
    "no such status": _head(status=9),
    "NaN start": _head(started=float("nan")),
    "infinite end": _head(finished=float("inf")),
    "infinite duration": _head(duration=float("-inf")),
    "empty replica": lambda h: h[: HEAD.size] + b"\x00" + h[HEAD.size + 10 :],
    "replica not UTF-8": _patched(HEAD.size + 1, b"\xff\xfe"),
    "location not a name": _patched(HEAD.size + 11, b"eu west"),
    "reason running past the end": _patched(HEAD.size + 18, b"\xff\xff"),
    "observation name not a name": lambda h: h.replace(b"http_status", b"Http-Status"),
    "observation NaN": lambda h: h.replace(
        struct.pack("<d", 200.0), struct.pack("<d", float("nan"))
    ),
    "more observations than names": _at_count(b"\x04"),
    "too many observations": _at_count(b"\xc9"),
    "names of no observations": _at_count(b"\x00"),
}


@pytest.mark.parametrize("damage", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_header_is_refused(damage: Callable[[bytes], bytes]) -> None:
    header = header_of(a_result())
    assert header[HEAD.size : HEAD.size + 11] == b"\x09eu-west-1\x07"  # the layout
    damaged = damage(header)
    assert damaged != header
    assert from_header(damaged) == "invalid"


def test_the_key_names_the_check() -> None:
    header = header_of(a_result())
    assert from_header(header, None) == "invalid"
    assert from_header(header, b"\xff") == "invalid"
    assert decode_vote(header, b"not/configured", store_of())[:2] == (
        "not/configured",
        "unknown_check",
    )


def test_the_verdict_copies_every_field_of_the_latest_result() -> None:
    """The board makes verdicts without ``dataclasses.replace`` (it runs for every vote): what
    it makes is what ``replace`` made."""
    assert tuple(f.name for f in dataclasses.fields(CheckResult)) == RESULT_FIELDS
    latest = a_result(
        details={"k": 1},
        lateness_seconds=0.5,
        replica="us-east-1",
        location="us-east",
        labeled_observations=(LabeledObservation("x", 1.0, {}),),
    )
    votes = {"us-east": LocationVote(Status.UP, "ok", 1.0, 2.0, "us-east-1", True)}
    made = _verdict_result(latest, Status.DEGRADED, "why", 5.0, 6.0, votes)
    assert made == dataclasses.replace(
        latest,
        status=Status.DEGRADED,
        reason="why",
        started_at=5.0,
        finished_at=6.0,
        locations=votes,
        surface=None,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = Status.UP  # type: ignore[misc]


def test_a_vote_changing_only_its_reason_or_freshness_is_judged_again() -> None:
    """Verdicts of unchanged votes reuse their words; a new reason or a vote going stale and
    coming back must not."""
    now = [1_000_000.0]
    board = QuorumBoard("eu-west", 2.0, clock=lambda: now[0])
    check = dataclasses.replace(CHECK, locations=("ap-south", "eu-west", "us-east"))

    def vote(location: str, status: Status, reason: str) -> str:
        t = now[0]
        run = a_result(check=check, status=status, reason=reason, started_at=t, finished_at=t)
        verdict = board.vote(run, location)
        assert verdict is not None
        return verdict.result.reason

    vote("eu-west", Status.DOWN, "timeout")
    vote("us-east", Status.DOWN, "timeout")
    assert vote("ap-south", Status.UP, "ok") == (
        "down from 2 of 3 locations: eu-west (timeout), us-east (timeout); ap-south up"
    )
    assert "eu-west (connection refused)" in vote("eu-west", Status.DOWN, "connection refused")
    now[0] += 61  # every vote stale, then eu-west and ap-south come back
    vote("eu-west", Status.DOWN, "timeout")
    assert vote("ap-south", Status.UP, "ok") == (
        "down from 1 of 3 locations (quorum 2): eu-west (timeout); ap-south up; us-east stale"
    )


# -- through a real view ----------------------------------------------------------------------

INFOS = [CheckInfo(f"mcp/loc-{i}", "http", {"team": "core"}, interval=30.0) for i in range(9)]


async def test_the_view_reads_headers_and_refuses_a_value_that_disagrees(
    kafka3: KafkaCluster, tmp_path: Path
) -> None:
    prefix = unique("vote")
    config = cluster_config(kafka3.bootstrap, prefix=prefix, replica="replica-a")
    await create_topics(kafka3.bootstrap, config)
    reader = parts(config)
    store = store_of(*INFOS)
    view = ResultsView(config, reader.kafka, store, None, tmp_path, reader.registry)
    # What a replica of another location writes, through its own stream.
    writer = parts(config.model_copy(update={"replica_id": "us-east-1", "location": "us-east"}))
    stream = ResultsStream(writer.config, writer.kafka, CollectorRegistry())
    producer = AIOKafkaProducer(bootstrap_servers=kafka3.bootstrap, acks="all")
    await producer.start()
    await view.start()
    await stream.start()
    now = time.time()

    async def send(
        info: CheckInfo,
        result: CheckResult,
        *,
        body: CheckResult | None = None,
        header: bytes | None = None,
        partition: int | None = None,
        location: str = "eu-west",
        replica: str = "eu-west-1",
    ) -> None:
        value = result_record(body or result, replica, None, location)
        if header is None:
            header = result_headers(result, replica, location)[0][1]
        await producer.send_and_wait(
            config.topics.results,
            value,
            key=info.name.encode(),
            partition=shard_of(info.name, config.shards) if partition is None else partition,
            headers=[(VOTE_HEADER, header)],
        )

    try:
        run = a_result(check=INFOS[0], started_at=now, finished_at=now + 0.01)
        # 0: written by a stream of us-east: read from its header.
        stream.consume(run)
        # 1: an older replica's record: no header, no location.
        old = json.loads(result_record(dataclasses.replace(run, check=INFOS[1]), "old-1"))
        del old["location"]
        await producer.send_and_wait(
            config.topics.results,
            json.dumps(old).encode(),
            key=INFOS[1].name.encode(),
            partition=shard_of(INFOS[1].name, config.shards),
        )
        # 2: labeled observations: the value is read too, and agrees.
        labeled = (LabeledObservation("tool_ms", 3.0, {"tool": "x"}),)
        await send(INFOS[2], dataclasses.replace(run, check=INFOS[2], labeled_observations=labeled))
        # 3: the header says down, the value up: refused.
        down = dataclasses.replace(run, check=INFOS[3], status=Status.DOWN, reason="timeout")
        await send(INFOS[3], down, body=dataclasses.replace(down, status=Status.UP))
        # 4: labeled observations, and the value has another start: refused.
        other = dataclasses.replace(run, check=INFOS[4], labeled_observations=labeled)
        await send(INFOS[4], other, body=dataclasses.replace(other, started_at=now - 1))
        # 5: a header that is not one: refused, not an error.
        await send(INFOS[5], dataclasses.replace(run, check=INFOS[5]), header=b"\x01garbage")
        # 6: not in its check's shard.
        wrong = (shard_of(INFOS[6].name, config.shards) + 1) % config.shards
        await send(INFOS[6], dataclasses.replace(run, check=INFOS[6]), partition=wrong)
        # 7: a down result whose value agrees: taken, reason and all.
        await send(INFOS[7], dataclasses.replace(down, check=INFOS[7]), location="ap-south")
        # 8: this replica's own id from another location (a hand-set id repeated): taken as
        # that location's vote, and the clash told.
        clash = dataclasses.replace(run, check=INFOS[8])
        await send(INFOS[8], clash, location="ap-south", replica=config.replica_id)

        def taken() -> float:
            return metric(
                reader.registry, "alivemcp_cluster_view_records_total", {"outcome": "status"}
            )

        def dropped(reason: str) -> float:
            return metric(
                reader.registry, "alivemcp_cluster_view_dropped_records_total", {"reason": reason}
            )

        await wait_for(lambda: taken() == 5 and dropped("invalid") == 3, 20, "9 records read")
        assert dropped("wrong_partition") == 1 and dropped("error") == 0

        def last(info: CheckInfo) -> CheckResult | None:
            state = store.get(info.name)
            assert state is not None
            return state.last

        from_stream, from_old, with_labels, down_taken = (last(INFOS[i]) for i in (0, 1, 2, 7))
        assert from_stream is not None
        assert (from_stream.replica, from_stream.location) == ("us-east-1", "us-east")
        assert dict(from_stream.observations) == dict(run.observations)
        assert from_stream.started_at == run.started_at
        assert from_old is not None
        assert (from_old.replica, from_old.location) == ("old-1", "default")
        assert with_labels is not None and tuple(with_labels.labeled_observations) == labeled
        assert down_taken is not None
        assert (down_taken.status, down_taken.reason, down_taken.location) == (
            Status.DOWN,
            "timeout",
            "ap-south",
        )
        for refused in (3, 4, 5, 6):
            assert last(INFOS[refused]) is None
        clashed = last(INFOS[8])
        assert clashed is not None and clashed.location == "ap-south"
        assert view.id_clashes == {"ap-south"}
        assert metric(reader.registry, "alivemcp_cluster_view_replica_id_clashes") == 1.0
    finally:
        await producer.stop()
        await stream.stop(5)
        await view.stop(5)
        await writer.aclose()
        await reader.aclose()
