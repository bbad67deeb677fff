"""The quorum of locations: how votes become a check's verdict (alivemcp/cluster/quorum.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from alivemcp.cluster.quorum import FORGET_SECONDS, QuorumBoard
from alivemcp.cluster.verdicts import Verdicts
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.engine.status import StatusStore
from alivemcp.history.config import HistoryConfig
from alivemcp.history.store import HistoryStore
from alivemcp.probe import Status
from tests.support.results_stream import result

THREE = ("ap-south", "eu-west", "us-east")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def info(
    name: str = "payments-mcp",
    locations: tuple[str, ...] = THREE,
    quorum: int = 0,
    interval: float = 30.0,
) -> CheckInfo:
    return CheckInfo(
        name=name, probe_type="mcp_endpoint", interval=interval, locations=locations, quorum=quorum
    )


def run(
    check: CheckInfo, status: Status, reason: str, at: float, replica: str = "r"
) -> CheckResult:
    return CheckResult(
        check=check,
        status=status,
        reason=reason,
        duration_seconds=0.1,
        started_at=at - 0.1,
        finished_at=at,
        replica=replica,
    )


def board(clock: Clock, location: str = "eu-west") -> QuorumBoard:
    return QuorumBoard(location, 2.0, clock=clock)


def test_down_everywhere_names_every_location() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.DOWN, "connect refused", clock.now), "eu-west")
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "ap-south")
    assert verdict is not None
    assert verdict.result.status is Status.DOWN
    assert verdict.result.reason == (
        "down from 3 of 3 locations: ap-south (timeout), eu-west (connect refused), "
        "us-east (timeout)"
    )
    assert verdict.dissent == ()
    assert set(verdict.result.locations or {}) == set(THREE)


def test_down_from_two_of_three_is_down_and_says_who_is_up() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.DOWN, "connect refused", clock.now), "eu-west")
    b.vote(run(check, Status.UP, "ok", clock.now), "ap-south")
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.DOWN
    assert verdict.result.reason == (
        "down from 2 of 3 locations: eu-west (connect refused), us-east (timeout); ap-south up"
    )


def test_down_from_one_location_is_degraded_and_a_dissent() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.UP, "ok", clock.now), "eu-west")
    b.vote(run(check, Status.UP, "ok", clock.now), "ap-south")
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.DEGRADED
    assert "us-east (timeout)" in verdict.result.reason
    assert "quorum 2" in verdict.result.reason
    assert verdict.dissent == ("us-east",)


def test_up_from_a_quorum_with_nobody_dissenting() -> None:
    clock = Clock()
    b, check = board(clock), info()
    for location in THREE:
        verdict = b.vote(run(check, Status.UP, "ok", clock.now), location)
    assert verdict is not None
    assert verdict.result.status is Status.UP
    assert verdict.result.reason == "up from 3 of 3 locations"


def test_a_degraded_location_makes_the_verdict_degraded() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.UP, "ok", clock.now), "eu-west")
    b.vote(run(check, Status.UP, "ok", clock.now), "ap-south")
    verdict = b.vote(run(check, Status.DEGRADED, "slow: 4.2s", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.DEGRADED
    assert "us-east degraded (slow: 4.2s)" in verdict.result.reason


def test_stale_votes_do_not_count_and_the_reason_says_so() -> None:
    clock = Clock()
    b, check = board(clock), info(interval=30.0)
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "ap-south")
    clock.now += 61  # past 2 intervals
    b.vote(run(check, Status.DOWN, "refused", clock.now), "eu-west")
    verdict = b.vote(run(check, Status.UP, "ok", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.DEGRADED
    assert "ap-south stale" in verdict.result.reason
    locations = verdict.result.locations or {}
    assert locations["ap-south"].fresh is False
    assert locations["eu-west"].fresh is True


def test_quorum_three_of_three_with_one_silent_is_unknown_never_down() -> None:
    clock = Clock()
    b, check = board(clock), info(quorum=3)
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.UNKNOWN
    assert "only 2 of 3 locations decide (quorum 3)" in verdict.result.reason
    assert "ap-south stale" in verdict.result.reason


def test_unknown_votes_do_not_decide() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.UNKNOWN, "prober: no CA file", clock.now), "eu-west")
    b.vote(run(check, Status.UNKNOWN, "prober: no CA file", clock.now), "ap-south")
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    assert verdict is not None
    assert verdict.result.status is Status.UNKNOWN


def test_a_vote_going_stale_changes_the_verdict_without_a_new_vote() -> None:
    clock = Clock()
    b, check = board(clock), info(quorum=2, interval=10.0)
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    clock.now += 15
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    assert list(b.expired()) == []  # every vote still fresh
    clock.now += 6  # us-east's vote is 21 s old: past 2 x 10 s
    verdicts = list(b.expired())
    assert [v.result.status for v in verdicts] == [Status.UNKNOWN]
    assert "us-east stale" in verdicts[0].result.reason
    assert list(b.expired()) == []  # decided once


def test_one_location_keeps_its_result_as_it_is() -> None:
    clock = Clock()
    b = board(clock, "default")
    check = info(locations=())
    verdict = b.vote(run(check, Status.DOWN, "HTTP 503", clock.now), "default")
    assert verdict is not None
    assert (verdict.result.status, verdict.result.reason) == (Status.DOWN, "HTTP 503")
    clock.now += 61
    (stale,) = b.expired()
    assert stale.result.status is Status.UNKNOWN


def test_default_locations_are_every_location_seen() -> None:
    clock = Clock()
    b, check = board(clock), info(locations=())
    other = info(name="other", locations=())
    b.vote(run(other, Status.UP, "ok", clock.now), "us-east")
    b.vote(run(other, Status.UP, "ok", clock.now), "ap-south")
    assert b.known() == THREE
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    assert verdict is not None
    # Majority of three: one down location is not enough, and two others have not voted.
    assert verdict.result.status is Status.UNKNOWN
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "us-east")
    assert verdict is not None and verdict.result.status is Status.DOWN


def test_an_older_result_than_the_vote_counted_is_ignored() -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    assert b.vote(run(check, Status.UP, "ok", clock.now - 5), "eu-west") is None


def test_pacing_passes_on_a_change_at_once_and_the_same_status_once_an_interval() -> None:
    clock = Clock()
    b, check = board(clock), info(interval=30.0)
    paced = []
    for step in range(6):  # three locations, each once per interval, 10 s apart
        clock.now += 10
        location = THREE[step % 3]
        verdict = b.vote(run(check, Status.UP, "ok", clock.now), location)
        assert verdict is not None
        paced.append(verdict.paced)
    # The first verdict (unknown: one vote) and the first up are changes; after that one in
    # three (an interval apart) is passed on.
    assert paced[:2] == [True, True]
    assert paced.count(True) <= 4
    clock.now += 1
    verdict = b.vote(run(check, Status.DOWN, "timeout", clock.now), "eu-west")
    assert verdict is not None
    assert verdict.result.status is Status.DEGRADED
    assert verdict.changed and verdict.paced


def test_silent_locations() -> None:
    clock = Clock()
    b = board(clock)
    check = info(interval=30.0)
    b.vote(run(check, Status.UP, "ok", clock.now), "us-east")
    assert b.silent() == {"eu-west": False, "us-east": False}
    clock.now += 61
    assert b.silent()["us-east"] is True
    assert b.silent()["eu-west"] is False  # our own location is never silent to us
    b.name_locations(["ap-south"])
    assert "ap-south" in b.known()
    clock.now += FORGET_SECONDS + 1
    b.name_locations([])
    assert b.known() == ("eu-west",)


@pytest.mark.parametrize("reason", ["x" * 5000, "line\nbreak"])
def test_long_reasons_are_cut_in_the_verdict(reason: str) -> None:
    clock = Clock()
    b, check = board(clock), info()
    b.vote(run(check, Status.DOWN, reason, clock.now), "eu-west")
    verdict = b.vote(run(check, Status.DOWN, reason, clock.now), "us-east")
    assert verdict is not None
    assert len(verdict.result.reason) < 400


@pytest.mark.parametrize(
    ("votes", "verdict_status", "alert_status"),
    [
        ((Status.UP, Status.UP, Status.DOWN), Status.DEGRADED, Status.UP),
        ((Status.UP, Status.DOWN, None), Status.DEGRADED, Status.UNKNOWN),
        ((Status.DEGRADED, Status.DEGRADED, Status.UP), Status.DEGRADED, Status.DEGRADED),
        ((Status.DEGRADED, Status.DOWN, Status.UP), Status.DEGRADED, Status.DEGRADED),
        ((Status.DOWN, Status.DOWN, Status.UP), Status.DOWN, Status.DOWN),
    ],
)
def test_the_status_alert_goes_by_the_quorum(
    votes: tuple[Status | None, ...], verdict_status: Status, alert_status: Status
) -> None:
    clock = Clock()
    b, check = board(clock), info()
    verdict = None
    for location, status in zip(THREE, votes, strict=True):
        if status is not None:
            verdict = b.vote(run(check, status, "why", clock.now), location)
    assert verdict is not None
    assert verdict.result.status is verdict_status
    assert verdict.alert_status is alert_status


async def test_a_vote_going_stale_changes_the_status_but_is_no_run_in_history(
    tmp_path: Path,
) -> None:
    check = CheckInfo("svc-stale", "http", {}, interval=1.0)
    store = StatusStore()
    store.set_checks([check])
    history = HistoryStore(tmp_path, HistoryConfig())
    history.start()
    verdicts = Verdicts(
        QuorumBoard("eu-west", 2.0), store, None, history, lambda name: True, CollectorRegistry()
    )
    try:
        now = time.time()
        verdicts.take(result(check, Status.UP, started_at=now), "eu-west")
        assert verdicts.sweep(now + 10) == 1  # the only vote went stale: unknown
        state = store.get(check.name)
        assert state is not None and state.last is not None
        assert state.last.status is Status.UNKNOWN
        runs = (await history.uptime(check.name, "24h"))["runs"]
        assert runs == {"up": 1, "degraded": 0, "down": 0, "unknown": 0}
    finally:
        await history.stop()
