"""The lag probe's pure evaluation: Burrow-style windows, time-lag estimates, verdicts."""

from __future__ import annotations

import itertools
import random

import pytest
from pydantic import ValidationError

from alivemcp.plumbing.kafka_offsets import first_record_time
from alivemcp.probe import Status
from probes.kafka_consumer_lag import (
    Evaluation,
    GroupReading,
    KafkaConsumerLagParams,
    LagEvaluator,
    LagSnapshot,
    OffsetTimeTable,
    PartitionWindow,
    Sample,
    Thresholds,
    WindowState,
    classify_window,
    judge_partition,
    summarize,
)
from tests.support import free_port, run_check


def samples(*rows: tuple[int, int], step: float = 10.0) -> list[Sample]:
    return [Sample(at=i * step, committed=c, log_end=e) for i, (c, e) in enumerate(rows)]


class TestClassifyWindow:
    def test_caught_up_is_ok(self) -> None:
        state, _ = classify_window(samples((5, 5), (5, 5), (5, 5)), 3, False)
        assert state == WindowState.OK

    def test_stuck_offset_with_lag_and_no_members_is_stop(self) -> None:
        state, why = classify_window(samples((5, 8), (5, 9), (5, 12)), 3, False)
        assert state == WindowState.STOP
        assert "no commits" in why and "3 runs" in why

    def test_stuck_offset_with_members_is_stall(self) -> None:
        state, why = classify_window(samples((5, 8), (5, 9), (5, 12)), 3, True)
        assert state == WindowState.STALL
        assert "stuck at 5" in why

    def test_unknown_membership_is_stall_not_stop(self) -> None:
        state, _ = classify_window(samples((5, 8), (5, 9), (5, 12)), 3, None)
        assert state == WindowState.STALL

    def test_partial_window_never_claims_stop(self) -> None:
        state, _ = classify_window(samples((5, 8), (5, 9)), 3, False)
        assert state == WindowState.OK

    def test_rewind_anywhere_in_window(self) -> None:
        state, why = classify_window(samples((50, 60), (20, 60), (30, 60)), 3, True)
        assert state == WindowState.REWIND
        assert "from 50 to 20" in why

    def test_rewind_reported_even_when_caught_up(self) -> None:
        state, _ = classify_window(samples((50, 60), (20, 60), (60, 60)), 3, True)
        assert state == WindowState.REWIND

    def test_lag_growing_every_run_is_warn(self) -> None:
        state, why = classify_window(samples((1, 5), (2, 8), (3, 12)), 3, True)
        assert state == WindowState.WARN
        assert "4 -> 9" in why

    def test_lag_that_shrinks_once_is_ok(self) -> None:
        state, _ = classify_window(samples((1, 5), (4, 6), (5, 12)), 3, True)
        assert state == WindowState.OK

    def test_moving_but_idle_topic_is_ok(self) -> None:
        # Lag constant while consuming: keeping pace, not falling behind.
        state, _ = classify_window(samples((1, 4), (4, 7), (7, 10)), 3, True)
        assert state == WindowState.OK


class TestOffsetTimeTable:
    def test_interpolates_between_sightings(self) -> None:
        table = OffsetTimeTable()
        table.add(100, 1000.0)
        table.add(200, 1010.0)
        written = table.written_at(150)
        assert written == (1005.0, "interpolated")

    def test_message_at_a_quiet_log_end_uses_latest_sighting(self) -> None:
        table = OffsetTimeTable()
        table.add(100, 1000.0)
        table.add(100, 1500.0)
        table.add(100, 2000.0)  # still 100: replaces the latest sighting, keeps the first
        table.add(101, 2010.0)
        assert len(table) == 3
        at, how = table.written_at(100)  # type: ignore[misc]
        assert how == "interpolated"
        assert at == 2000.0

    def test_below_table_extrapolates_with_average_rate(self) -> None:
        table = OffsetTimeTable()
        table.add(100, 1000.0)
        table.add(200, 1010.0)  # 10 messages/s
        at, how = table.written_at(50)  # type: ignore[misc]
        assert how == "extrapolated"
        assert at == pytest.approx(995.0)

    def test_unknowable_cases(self) -> None:
        table = OffsetTimeTable()
        assert table.written_at(5) is None
        table.add(100, 1000.0)
        assert table.written_at(100) is None  # not written yet

    def test_below_a_table_without_rate_is_a_lower_bound(self) -> None:
        table = OffsetTimeTable()
        table.add(100, 1000.0)
        table.add(100, 1060.0)  # no writes seen: no rate to extrapolate with
        assert table.written_at(50) == (1000.0, "at least")

    def test_log_going_backwards_resets(self) -> None:
        table = OffsetTimeTable()
        table.add(100, 1000.0)
        table.add(200, 1010.0)
        table.add(5, 1020.0)
        assert len(table) == 1

    def test_bounded(self) -> None:
        table = OffsetTimeTable(max_points=5)
        for i in range(50):
            table.add(i, float(i))
        assert len(table) == 5


class TestJudge:
    limits = Thresholds(degraded_seconds=60, down_seconds=600, degraded_messages=1000)

    def judge(self, lag: int, seconds: float | None, state: WindowState) -> Status:
        return judge_partition(
            "g", "t", 0, lag, seconds, "record", state, state.value, self.limits
        ).status

    def test_levels(self) -> None:
        assert self.judge(0, 0.0, WindowState.OK) == Status.UP
        assert self.judge(10, 30.0, WindowState.OK) == Status.UP
        assert self.judge(10, 61.0, WindowState.OK) == Status.DEGRADED
        assert self.judge(1001, 1.0, WindowState.OK) == Status.DEGRADED
        assert self.judge(10, 601.0, WindowState.OK) == Status.DOWN

    def test_window_states(self) -> None:
        assert self.judge(10, 5.0, WindowState.STOP) == Status.DEGRADED
        assert self.judge(10, 90.0, WindowState.STOP) == Status.DOWN
        assert self.judge(10, 90.0, WindowState.STALL) == Status.DOWN
        assert self.judge(10, 5.0, WindowState.WARN) == Status.DEGRADED
        assert self.judge(0, 0.0, WindowState.REWIND) == Status.DEGRADED

    def test_unknown_time_lag_uses_messages_only(self) -> None:
        assert self.judge(10, None, WindowState.OK) == Status.UP
        assert self.judge(2000, None, WindowState.OK) == Status.DEGRADED


def snapshot(
    at: float,
    committed: dict[str, dict[tuple[str, int], int]],
    log_end: dict[tuple[str, int], int],
    *,
    named: set[str] | None = None,
    members: bool | None = True,
    record_times: dict[tuple[str, int, int], float] | None = None,
) -> LagSnapshot:
    return LagSnapshot(
        at=at,
        groups={
            g: GroupReading(committed=dict(c), members_active=members) for g, c in committed.items()
        },
        log_end=log_end,
        record_times=record_times or {},
        named_groups=frozenset(named or ()),
    )


class TestEvaluator:
    def test_stopped_group_goes_degraded_then_down(self) -> None:
        ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=60))
        statuses = []
        for i in range(4):
            at = 1000.0 + 40 * i
            snap = snapshot(
                at,
                {"g": {("t", 0): 10}},
                {("t", 0): 10 + 5 * (i + 1)},
                members=False,
                record_times={("t", 0, 10): 990.0},
            )
            result = summarize(
                ev.evaluate(snap), per_partition_metrics=False, thresholds=ev.thresholds
            )
            statuses.append(result.status)
        # run 0: 10 s old; run 1: 50 s; run 2: 90 s (over 60 s, window full + stopped: down)
        assert statuses == [Status.UP, Status.UP, Status.DOWN, Status.DOWN]
        assert "g t[0]" in result.reason and "no commits" in result.reason
        assert result.observations["max_offset_lag_messages"] == 20

    def test_estimate_used_when_record_not_read(self) -> None:
        ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=60))
        ev.evaluate(snapshot(1000.0, {"g": {("t", 0): 0}}, {("t", 0): 0}))
        ev.evaluate(snapshot(1010.0, {"g": {("t", 0): 0}}, {("t", 0): 100}))
        out = ev.evaluate(snapshot(1100.0, {"g": {("t", 0): 50}}, {("t", 0): 100}))
        (verdict,) = out.verdicts
        assert verdict.time_lag_source == "interpolated"
        assert verdict.time_lag == pytest.approx(95.0)
        assert verdict.status == Status.DEGRADED

    def test_missing_named_group_is_down_and_named(self) -> None:
        ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=60))
        out = ev.evaluate(snapshot(1.0, {"ok": {("t", 0): 5}}, {("t", 0): 5}, named={"gone"}))
        result = summarize(out, per_partition_metrics=False, thresholds=ev.thresholds)
        assert result.status == Status.DOWN
        assert result.reason.startswith("group gone: group has no committed offsets")

    def test_history_dropped_when_partition_disappears(self) -> None:
        ev = LagEvaluator(window=2, thresholds=Thresholds(degraded_seconds=60))
        ev.evaluate(snapshot(1.0, {"g": {("t", 0): 1}}, {("t", 0): 5}, members=False))
        ev.evaluate(snapshot(2.0, {"g": {}}, {}))
        out = ev.evaluate(snapshot(3.0, {"g": {("t", 0): 1}}, {("t", 0): 5}, members=False))
        assert out.verdicts[0].state == WindowState.OK  # a fresh window, not a stop

    def test_observations_per_group_and_opt_in_partitions(self) -> None:
        ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=60))
        snap = snapshot(
            100.0,
            {"a": {("t", 0): 5, ("t", 1): 7}, "b": {("t", 0): 9}},
            {("t", 0): 10, ("t", 1): 10},
            record_times={("t", 0, 5): 90.0, ("t", 1, 7): 95.0, ("t", 0, 9): 99.0},
        )
        evaluation = ev.evaluate(snap)
        plain = summarize(evaluation, per_partition_metrics=False, thresholds=ev.thresholds)
        by = {(o.name, o.labels.get("group")): o.value for o in plain.labeled_observations}
        assert by[("group_max_offset_lag_messages", "a")] == 5
        assert by[("group_sum_offset_lag_messages", "a")] == 8
        assert by[("group_max_time_lag_seconds", "a")] == pytest.approx(10.0)
        assert by[("group_max_offset_lag_messages", "b")] == 1
        assert not any(o.name.startswith("partition_") for o in plain.labeled_observations)
        assert plain.observations["sum_offset_lag_messages"] == 9
        assert plain.problems() == []
        full = summarize(evaluation, per_partition_metrics=True, thresholds=ev.thresholds)
        rows = [o for o in full.labeled_observations if o.name == "partition_offset_lag_messages"]
        assert {(o.labels["group"], o.labels["partition"], o.value) for o in rows} == {
            ("a", "0", 5.0),
            ("a", "1", 3.0),
            ("b", "0", 1.0),
        }
        assert full.problems() == []

    def test_empty_evaluation_reason(self) -> None:
        result = summarize(
            Evaluation([], [], []),
            per_partition_metrics=False,
            thresholds=Thresholds(60),
            empty_reason="nothing matched",
        )
        assert result.status == Status.UNKNOWN
        assert result.reason == "nothing matched"


def reference_state(window: list[Sample], size: int, members: bool | None) -> WindowState:
    """Burrow's rules written plainly over the whole window (what the running counts must
    agree with)."""
    if any(b.committed < a.committed for a, b in itertools.pairwise(window)):
        return WindowState.REWIND
    if not window or window[-1].lag == 0 or len(window) < size:
        return WindowState.OK
    if all(s.committed == window[0].committed and s.lag > 0 for s in window):
        return WindowState.STOP if members is False else WindowState.STALL
    if all(b.lag > a.lag for a, b in itertools.pairwise(window)):
        return WindowState.WARN
    return WindowState.OK


def test_running_window_agrees_with_plain_rules() -> None:
    rng = random.Random(7)
    for _ in range(300):
        size = rng.randint(2, 5)
        tracker = PartitionWindow(size)
        committed, log_end, seen = 0, 0, []
        for step in range(rng.randint(1, 25)):
            log_end += rng.choice((0, 0, 1, 3))
            move = rng.random()
            if move < 0.4:
                committed = min(log_end, committed + rng.randint(0, 3))
            elif move < 0.45:
                committed = max(0, committed - rng.randint(1, 3))
            sample = Sample(float(step), committed, log_end)
            seen.append(sample)
            tracker.add(sample)
            members = rng.choice((True, False, None))
            expected = reference_state(seen[-size:], size, members)
            assert tracker.state(members)[0] == expected, (size, seen[-size:], members)


def params(**values: object) -> KafkaConsumerLagParams:
    return KafkaConsumerLagParams.model_validate(values)


class TestParams:
    cluster = {"bootstrap_servers": "127.0.0.1:9"}

    def test_needs_groups(self) -> None:
        with pytest.raises(ValidationError, match="groups"):
            params(cluster=self.cluster)

    def test_bad_regex_is_a_config_error(self) -> None:
        with pytest.raises(ValidationError, match="not a valid regex"):
            params(cluster=self.cluster, group_pattern="(")

    def test_source_needs_its_settings(self) -> None:
        with pytest.raises(ValidationError, match="cluster"):
            params(groups=["g"])
        with pytest.raises(ValidationError, match="cloudwatch"):
            params(groups=["g"], source="cloudwatch")

    def test_down_levels_not_below_degraded(self) -> None:
        with pytest.raises(ValidationError, match="down_lag_seconds"):
            params(cluster=self.cluster, groups=["g"], down_lag_seconds=10)
        with pytest.raises(ValidationError, match="down_lag_messages"):
            params(cluster=self.cluster, groups=["g"], max_lag_messages=10, down_lag_messages=5)


async def test_unreachable_cluster_is_unknown_not_a_crash() -> None:
    port = free_port()  # nothing listens there
    result = await run_check(
        "kafka_consumer_lag",
        {
            "cluster": {"bootstrap_servers": f"127.0.0.1:{port}", "request_timeout": 2},
            "groups": ["g"],
        },
        timeout=20,
    )
    assert result.status == Status.UNKNOWN, result.reason
    assert "cannot read consumer lag" in result.reason


def test_garbage_record_bytes_give_no_timestamp() -> None:
    assert first_record_time(b"\x00" * 7, 0) is None
    assert (
        first_record_time(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x30" + b"\xff" * 60, 0)
        is None
    )


def test_window_survives_a_run_that_could_not_read_the_partition() -> None:
    ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=600))
    ev.evaluate(snapshot(1.0, {"g": {("t", 0): 1}}, {("t", 0): 5}, members=False))
    ev.evaluate(snapshot(2.0, {"g": {("t", 0): 1}}, {("t", 0): 6}, members=False))
    blind = snapshot(3.0, {"g": {("t", 0): 1}}, {}, members=False)
    blind.unreadable[("t", 0)] = "broker 1: RequestTimedOutError"
    result = summarize(ev.evaluate(blind), per_partition_metrics=False, thresholds=ev.thresholds)
    assert result.status == Status.UNKNOWN
    assert "unreadable" in result.reason and "RequestTimedOutError" in result.reason
    out = ev.evaluate(snapshot(4.0, {"g": {("t", 0): 1}}, {("t", 0): 7}, members=False))
    assert out.verdicts[0].state == WindowState.STOP  # three samples kept across the gap


def test_estimate_lower_bound_and_unknown_count() -> None:
    ev = LagEvaluator(window=3, thresholds=Thresholds(degraded_seconds=60))
    first = ev.evaluate(snapshot(1000.0, {"g": {("t", 0): 1}}, {("t", 0): 3}))
    result = summarize(first, per_partition_metrics=False, thresholds=ev.thresholds)
    assert first.verdicts[0].time_lag is None  # first sighting: nothing known yet
    assert result.observations["time_lag_unknown_partitions"] == 1
    later = ev.evaluate(snapshot(1090.0, {"g": {("t", 0): 1}}, {("t", 0): 3}))
    (verdict,) = later.verdicts
    assert (verdict.time_lag, verdict.time_lag_source) == (90.0, "at least")
    assert verdict.status == Status.DEGRADED  # a lower bound over the limit is over it
    assert "lag 2 messages / >=90s" in verdict.describe()
