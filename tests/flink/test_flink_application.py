"""``flink_application`` against moto's kinesisanalyticsv2 and CloudWatch over HTTP."""

from __future__ import annotations

import asyncio
import re

import pytest

from alivemcp.config import ConfigError, load_config_text
from alivemcp.testbed.moto import MotoServer
from tests.support import run_check
from tests.support.firehose import stepped_check
from tests.support.flink import (
    APP,
    STREAM,
    create_application,
    incoming_records,
    job_metric,
    params,
    prober_identity,
    put_points,
    set_status,
)

# 4 parallelism at 2 per KPU: 2 KPUs for the job and the orchestration KPU.
KPUS = 3


async def test_running_with_input_is_up_with_its_kpus(moto: MotoServer) -> None:
    create_application(moto)
    incoming_records(moto, [(3, 500), (2, 800), (1, 700)])
    job_metric(moto, "uptime", [(1, 7_200_000)])
    job_metric(moto, "fullRestarts", [(10, 0), (1, 0)])
    job_metric(moto, "lastCheckpointDuration", [(1, 1_500)])
    result = await run_check("flink_application", params(moto, idle_after="30m"))
    assert result.status == "up", result.reason
    assert f"application {APP} RUNNING on {KPUS} KPUs" in result.reason
    assert "parallelism 4, 2 per KPU, autoscaling" in result.reason
    assert f"stream {STREAM}" in result.reason
    obs = result.observations
    assert obs["kpus"] == KPUS and obs["parallelism"] == 4 and obs["application_running"] == 1
    assert obs["input_records"] == 2000
    assert obs["idle_seconds"] < 120  # the last input was in the last whole minute
    assert obs["uptime_seconds"] == 7200 and obs["restarts_in_window"] == 0
    assert obs["last_checkpoint_duration_seconds"] == 1.5


async def test_any_cloudwatch_series_can_be_the_input(moto: MotoServer) -> None:
    create_application(moto)
    topic = {"Cluster Name": "mcp", "Topic": "tool-events"}
    put_points(moto, "AWS/Kafka", "BytesInPerSec", topic, [(1, 2048)])
    metric = {
        "namespace": "AWS/Kafka",
        "metric_name": "BytesInPerSec",
        "dimensions": topic,
        "stat": "Maximum",
    }
    result = await run_check(
        "flink_application", params(moto, source_stream=None, input_metric=metric)
    )
    assert result.status == "up", result.reason
    assert "AWS/Kafka BytesInPerSec" in result.reason


async def test_running_idle_beyond_idle_after_is_degraded_with_kpu_hours_and_cost(
    moto: MotoServer,
) -> None:
    create_application(moto)
    incoming_records(moto, [(50, 120), *[(m, 0) for m in range(49, 0, -1)]])
    job_metric(moto, "uptime", [(1, 3 * 3_600_000)])  # running for 3 h: all idle time billed
    result = await run_check("flink_application", params(moto, idle_after="30m"))
    assert result.status == "degraded", result.reason
    idle = result.observations["idle_seconds"]
    assert 48 * 60 <= idle <= 51 * 60  # since the end of the minute that had input
    kpu_hours = result.observations["idle_kpu_seconds"] / 3600
    assert kpu_hours == pytest.approx(KPUS * idle / 3600)
    assert result.observations["idle_cost"] == pytest.approx(kpu_hours * 0.11)
    assert f"application {APP} RUNNING while idle" in result.reason
    assert re.search(
        f"no input from stream {STREAM} \\(IncomingRecords\\) for (48|49|50|51)m;", result.reason
    ), result.reason
    assert (
        f"{KPUS} KPUs billed idle: {kpu_hours:.2f} KPU-hours, {kpu_hours * 0.11:.2f} USD "
        "at 0.11 USD/KPU-hour"
    ) in result.reason


async def test_idle_cost_counts_only_known_running_time_at_the_configured_price(
    moto: MotoServer,
) -> None:
    create_application(moto)
    incoming_records(moto, [(m, 0) for m in range(50, 0, -1)])
    job_metric(moto, "uptime", [(1, 600_000)])  # started 10 min ago: billed 10 min, not 50
    result = await run_check(
        "flink_application",
        params(moto, idle_after="30m", idle_lookback="1h", kpu_hour_price=0.2, currency="EUR"),
    )
    assert result.status == "degraded", result.reason
    assert result.observations["idle_seconds"] >= 3600  # nothing in the whole lookback
    assert result.observations["idle_kpu_seconds"] == pytest.approx(KPUS * 600)
    assert result.observations["idle_cost"] == pytest.approx(KPUS * 600 / 3600 * 0.2)
    assert "for at least 60m" in result.reason and "at 0.2 EUR/KPU-hour" in result.reason


async def test_a_misnamed_source_reads_as_idle_with_a_hint(moto: MotoServer) -> None:
    create_application(moto)
    incoming_records(moto, [(1, 500)])  # into the real stream; the check names another
    result = await run_check(
        "flink_application",
        params(moto, source_stream="typo-stream", idle_after="10m", idle_lookback="10m"),
    )
    assert result.status == "degraded", result.reason
    assert "stream typo-stream" in result.reason and "misnamed" in result.reason


@pytest.mark.parametrize("status", ["READY", "DELETING"])
async def test_not_running_when_expected_is_down(moto: MotoServer, status: str) -> None:
    create_application(moto, status=status)
    result = await run_check("flink_application", params(moto))
    assert result.status == "down", result.reason
    assert f"application {APP} is {status}" in result.reason and "expected RUNNING" in result.reason
    assert result.observations["application_running"] == 0


async def test_stopped_when_not_expected_to_run_is_up(moto: MotoServer) -> None:
    create_application(moto, status="READY")
    result = await run_check("flink_application", params(moto, expect_running=False))
    assert result.status == "up", result.reason
    assert "not billing" in result.reason


async def test_a_transition_is_degraded_then_down_when_stuck(moto: MotoServer) -> None:
    create_application(moto, status="STARTING")
    async with stepped_check("flink_application", params(moto, stuck_after="1s")) as handle:
        first = await handle.run()
        assert first.status == "degraded", first.reason
        assert f"application {APP} is STARTING" in first.reason
        await asyncio.sleep(1.2)  # why: the transition's age must pass stuck_after (1 s)
        second = await handle.run()
        assert second.status == "down", second.reason
        assert f"application {APP} stuck STARTING for" in second.reason
        set_status(APP, "RUNNING")
        incoming_records(moto, [(1, 10)])
        third = await handle.run()
        assert third.status == "up", third.reason


async def test_restart_loop_is_down_and_a_single_restart_degraded(moto: MotoServer) -> None:
    create_application(moto)
    incoming_records(moto, [(1, 100)])
    job_metric(moto, "fullRestarts", [(20, 7), (12, 7), (8, 9), (2, 12)])
    result = await run_check("flink_application", params(moto))
    assert result.status == "down", result.reason
    assert f"application {APP} in a restart loop: fullRestarts rose by 5 in 15m" in result.reason
    assert result.observations["restarts_in_window"] == 5

    moto.reset()
    create_application(moto)
    incoming_records(moto, [(1, 100)])
    job_metric(moto, "fullRestarts", [(20, 7), (5, 8)])
    result = await run_check("flink_application", params(moto))
    assert result.status == "degraded", result.reason
    assert "restarted 1 time(s) in 15m" in result.reason


async def test_failing_checkpoints_are_down(moto: MotoServer) -> None:
    create_application(moto)
    incoming_records(moto, [(1, 100)])
    job_metric(moto, "numberOfFailedCheckpoints", [(14, 0), (9, 2), (3, 4)])
    job_metric(moto, "lastCheckpointDuration", [(1, 90_000)])  # over the 60 s interval
    result = await run_check("flink_application", params(moto))
    assert result.status == "down", result.reason
    assert f"application {APP}: 4 checkpoints failed in 15m" in result.reason
    assert "last checkpoint took 90s (over 60s)" in result.reason


@pytest.mark.usefixtures("aws_says_not_found")
async def test_missing_application_is_down_naming_it(moto: MotoServer) -> None:
    result = await run_check("flink_application", params(moto, application_name="gone-app"))
    assert result.status == "down", result.reason
    assert result.reason.startswith("application gone-app not found: ResourceNotFoundException")


async def test_probers_own_access_denied_is_unknown(moto: MotoServer) -> None:
    create_application(moto)
    with prober_identity(moto, ["monitoring:GetMetricData"]) as aws:
        result = await run_check("flink_application", params(moto, aws=aws))
    assert result.status == "unknown", result.reason
    assert f"not allowed to describe application {APP}" in result.reason


async def test_unreadable_cloudwatch_is_unknown_not_the_jobs_fault(moto: MotoServer) -> None:
    create_application(moto)
    with prober_identity(moto, ["kinesisanalytics:DescribeApplication"]) as aws:
        result = await run_check("flink_application", params(moto, aws=aws))
    assert result.status == "unknown", result.reason
    assert f"reading CloudWatch metrics of application {APP}: GetMetricData" in result.reason


def test_source_stream_and_input_metric_together_are_refused() -> None:
    text = (
        "checks:\n- name: f\n  probe: flink_application\n  params:\n"
        "    application_name: a\n    source_stream: s\n"
        "    input_metric: {namespace: N, metric_name: M}\n"
    )
    with pytest.raises(ConfigError, match="source_stream or input_metric, not both"):
        load_config_text(text, env={})


async def test_idle_time_billed_starts_when_the_prober_saw_it_start(moto: MotoServer) -> None:
    # No uptime metric: the prober's own sighting of READY → RUNNING bounds the billed time,
    # however long the input has been silent.
    create_application(moto, status="READY")
    incoming_records(moto, [(m, 0) for m in range(40, 0, -1)])
    check = params(moto, expect_running=False, idle_after="30m", idle_lookback="30m")
    async with stepped_check("flink_application", check) as handle:
        stopped = await handle.run()
        assert stopped.status == "up", stopped.reason
        set_status(APP, "RUNNING")
        started = await handle.run()
    assert started.status == "degraded", started.reason  # idle is idle, expected or not
    assert started.observations["idle_seconds"] >= 1800
    assert started.observations["idle_kpu_seconds"] < KPUS * 60  # seconds, not 30 min
