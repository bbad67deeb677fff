"""``kinesis_canary`` against moto's Kinesis over HTTP: every failure the seed names is caught
with a reason naming the stream and shard, and a healthy stream (and consumer) is up."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest

from alivemcp.config import ConfigError
from alivemcp.testbed.moto import MotoServer
from tests.support import run_check, run_check_series
from tests.support.kinesis import (
    THROTTLED,
    Consumer,
    check_handle,
    create_stream,
    dynamodb_marker,
    fail_shard,
    kinesis,
    output_stream_marker,
    params,
    put_metric,
    route_to_open_shards,
    s3_marker,
    set_stream_status,
    shard_ids,
    split_first_shard,
    stand_in,
)

MARKERS = "consumer-markers"
TEMPLATE = "processed/{id}.done"


def s3_consumer(moto: MotoServer, sla: float = 3.0) -> dict[str, Any]:
    return {
        "marker": {"type": "s3", "bucket": MARKERS, "key_template": TEMPLATE},
        "sla": sla,
        "poll_interval": 0.1,
    }


def marker_bucket(moto: MotoServer) -> Any:
    s3 = boto3.client("s3", **moto.boto3_kwargs())
    s3.create_bucket(Bucket=MARKERS)
    return s3


def canaries_in(moto: MotoServer, stream: str, shard_id: str) -> list[bytes]:
    client = kinesis(moto)
    iterator = client.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    return [
        r["Data"]
        for r in client.get_records(ShardIterator=iterator)["Records"]
        if b"alivemcp_canary" in r["Data"]
    ]


# --- write and read path --------------------------------------------------------------------


async def test_every_open_shard_gets_a_canary_read_back(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=3)
    result = await run_check("kinesis_canary", params(moto, "events"))
    assert result.status == "up", result.reason
    assert result.reason == "stream events ACTIVE, 3 shards written, read back"
    assert result.observations["open_shards"] == 3
    assert result.observations["failed_put_records"] == 0
    assert result.observations["readback_seconds"] >= 0
    # Each shard's own write path took its canary (explicit hash keys, not one hot key).
    for shard_id in shard_ids(moto, "events"):
        assert len(canaries_in(moto, "events", shard_id)) == 1, shard_id
    assert result.details is not None
    assert [row["shard"] for row in result.details["shards"]] == shard_ids(moto, "events")


async def test_partial_failure_names_the_shard_and_error_code(moto: MotoServer) -> None:
    shards = create_stream(moto, "events", shards=3)
    async with stand_in(moto, fail=fail_shard(shards[1], "InternalFailure")) as proxy:
        result = await run_check(
            "kinesis_canary", {**params(moto, "events"), "aws": proxy.aws_params()}
        )
    assert proxy.failed == ["InternalFailure"]
    assert result.status == "down", result.reason
    assert result.reason == (
        "PutRecords failed on stream events shard shardId-000000000001: "
        "InternalFailure (Internal service failure.)"
    )
    assert result.observations["failed_put_records"] == 1
    # The other shards were written and read back.
    assert result.details is not None
    written = {row["shard"]: row["written"] for row in result.details["shards"]}
    assert written == {
        "shardId-000000000000": True,
        "shardId-000000000001": False,
        "shardId-000000000002": True,
    }


async def test_hot_shard_throttling_is_degraded_then_down_when_it_persists(
    moto: MotoServer,
) -> None:
    shards = create_stream(moto, "events", shards=2)
    async with stand_in(moto, fail=fail_shard(shards[0], THROTTLED)) as proxy:
        check = {**params(moto, "events"), "aws": proxy.aws_params(), "throttle_down_after": 3}
        results = await run_check_series("kinesis_canary", check, runs=3)
        assert [r.status for r in results] == ["degraded", "degraded", "down"]
        first, last = results[0], results[-1]
        assert first.reason.startswith(
            f"PutRecords failed on stream events shard shardId-000000000000: {THROTTLED}"
        )
        assert "hot partition key" in first.reason
        assert "(throttled run 1; down after 3 in a row)" in first.reason
        assert "(throttled 3 runs in a row)" in last.reason
        assert last.observations["throttled_runs"] == 3


async def test_throttling_that_stops_resets_the_count(moto: MotoServer) -> None:
    shards = create_stream(moto, "events", shards=2)
    async with stand_in(moto, fail=fail_shard(shards[1], THROTTLED)) as proxy:
        check = {**params(moto, "events"), "aws": proxy.aws_params(), "throttle_down_after": 2}
        async with check_handle("kinesis_canary", check) as handle:
            results = [await handle.run()]
            proxy.fail = None
            results.append(await handle.run())
            proxy.fail = fail_shard(shards[1], THROTTLED)
            results.append(await handle.run())
    assert [r.status for r in results] == ["degraded", "up", "degraded"]
    assert [r.observations["throttled_runs"] for r in results] == [1, 0, 1]
    assert "shard shardId-000000000001" in results[2].reason


async def test_whole_call_throttled_is_degraded_naming_the_stream(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=2)
    async with stand_in(moto, throttle=frozenset({"PutRecords"})) as proxy:
        result = await run_check(
            "kinesis_canary", {**params(moto, "events"), "aws": proxy.aws_params()}
        )
    assert result.status == "degraded", result.reason
    assert result.reason.startswith(
        "PutRecords on stream events throttled as a whole "
        "(shardId-000000000000, shardId-000000000001)"
    )
    assert THROTTLED in result.reason


async def test_read_throttling_is_degraded_naming_the_shard(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=2)
    async with stand_in(moto, throttle=frozenset({"GetRecords"})) as proxy:
        result = await run_check(
            "kinesis_canary", {**params(moto, "events"), "aws": proxy.aws_params()}
        )
    assert result.status == "degraded", result.reason
    # Both shards are read side by side: either one's finding may come first.
    assert result.reason.startswith("reading the canary back from stream events shard ")
    for shard in ("shardId-000000000000", "shardId-000000000001"):
        assert f"shard {shard} throttled: {THROTTLED}" in result.reason
    assert result.observations["failed_put_records"] == 0  # the writes went through


async def test_canary_not_readable_is_down_naming_the_shard(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=1)
    async with stand_in(moto, hide_records=True) as proxy:
        result = await run_check(
            "kinesis_canary",
            {**params(moto, "events", readback_timeout=0.5), "aws": proxy.aws_params()},
        )
    assert result.status == "down", result.reason
    assert (
        "written to stream events shard shardId-000000000000 (sequence 1) not readable "
        "within 0.5s" in result.reason
    )


# --- stream state -----------------------------------------------------------------------------


async def test_stream_states(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=1)
    set_stream_status("events", "UPDATING")
    result = await run_check("kinesis_canary", params(moto, "events"))
    assert result.status == "degraded", result.reason
    assert result.reason == "stream events is UPDATING (a reshard or mode change in flight)"
    assert result.observations["open_shards"] == 1  # the canary still ran
    set_stream_status("events", "CREATING")
    result = await run_check("kinesis_canary", params(moto, "events"))
    assert result.status == "down"
    assert result.reason == "stream events is CREATING, not ACTIVE"
    result = await run_check("kinesis_canary", params(moto, "missing"))
    assert result.status == "down"
    assert result.reason.startswith("stream missing not found: ResourceNotFoundException")


# --- CloudWatch -------------------------------------------------------------------------------


async def test_iterator_age_and_write_throttle_metrics(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=1)
    put_metric(moto, "events", "GetRecords.IteratorAgeMilliseconds", [1000, 420_000])
    put_metric(moto, "events", "WriteProvisionedThroughputExceeded", [0, 5, 7, 9])
    result = await run_check("kinesis_canary", params(moto, "events"))
    assert result.status == "degraded", result.reason
    assert result.observations["iterator_age_seconds"] == 420
    assert result.observations["write_throttled_records"] == 21
    assert "stream events: iterator age 420s is over 300s" in result.reason
    assert (
        "WriteProvisionedThroughputExceeded above zero in each of the last 3 periods"
        in result.reason
    )
    # Throttling in two of the last three periods is not the alarm.
    moto.reset()
    create_stream(moto, "events", shards=1)
    put_metric(moto, "events", "WriteProvisionedThroughputExceeded", [5, 0, 9])
    result = await run_check("kinesis_canary", params(moto, "events"))
    assert result.status == "up", result.reason
    assert result.observations["write_throttled_records"] == 14


# --- consumer liveness ------------------------------------------------------------------------


async def test_healthy_consumer_with_s3_markers_is_up_and_markers_are_deleted(
    moto: MotoServer,
) -> None:
    create_stream(moto, "events", shards=3)
    s3 = marker_bucket(moto)
    with Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE)) as consumer:
        result = await run_check(
            "kinesis_canary", params(moto, "events", consumer=s3_consumer(moto))
        )
    assert result.status == "up", result.reason
    assert "consumer markers in" in result.reason
    assert result.observations["consumer_missing_shards"] == 0
    assert result.observations["consumer_latency_seconds"] >= 0
    assert len(consumer.marked) == 3
    assert all(
        f"-{sid}" in marked
        for marked, sid in zip(
            sorted(consumer.marked, key=lambda m: m[-12:]), shard_ids(moto, "events"), strict=True
        )
    )
    assert s3.list_objects_v2(Bucket=MARKERS).get("KeyCount") == 0


async def test_healthy_consumer_with_output_stream_markers_is_up(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=2)
    create_stream(moto, "processed", shards=2)
    consumer_params = {
        "marker": {"type": "output_stream", "stream_name": "processed"},
        "sla": 3,
        "poll_interval": 0.1,
    }
    with Consumer(moto, "events", output_stream_marker(moto, "processed")):
        result = await run_check("kinesis_canary", params(moto, "events", consumer=consumer_params))
    assert result.status == "up", result.reason
    assert result.observations["consumer_missing_shards"] == 0


async def test_healthy_consumer_with_dynamodb_markers_is_up(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=2)
    dynamodb = boto3.client("dynamodb", **moto.boto3_kwargs())
    dynamodb.create_table(
        TableName="processed",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
    )
    consumer_params = {
        "marker": {"type": "dynamodb", "table": "processed"},
        "sla": 3,
        "poll_interval": 0.1,
    }
    with Consumer(moto, "events", dynamodb_marker(moto, "processed")):
        result = await run_check("kinesis_canary", params(moto, "events", consumer=consumer_params))
    assert result.status == "up", result.reason
    assert result.observations["consumer_missing_shards"] == 0
    assert dynamodb.scan(TableName="processed")["Count"] == 0  # markers deleted


async def test_consumer_whose_subscription_expired_is_down_naming_every_shard(
    moto: MotoServer,
) -> None:
    create_stream(moto, "events", shards=2)
    marker_bucket(moto)
    check = params(moto, "events", consumer=s3_consumer(moto, sla=1.5))
    # Five minutes, compressed to four seconds; never renewed.
    with Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE), lifetime=4) as consumer:
        before = await run_check("kinesis_canary", check)
        assert await asyncio.to_thread(consumer.expired.wait, 10)
        after = await run_check("kinesis_canary", check)
    assert before.status == "up", before.reason
    assert after.status == "down", after.reason
    assert after.reason == (
        "stream events: no consumer marker for any shard (shardId-000000000000, "
        "shardId-000000000001) within 1.5s in s3://consumer-markers/processed/{id}.done: the "
        "consumer has stopped (e.g. a SubscribeToShard subscription that expired after 5 "
        "minutes and was never renewed)"
    )
    assert after.observations["consumer_missing_shards"] == 2


async def test_reshard_children_are_covered_by_a_consumer_that_follows_them(
    moto: MotoServer,
) -> None:
    create_stream(moto, "events", shards=2)
    marker_bucket(moto)
    check = params(moto, "events", consumer=s3_consumer(moto))
    with route_to_open_shards(), Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE)):
        parent = split_first_shard(moto, "events")
        result = await run_check("kinesis_canary", check)
    assert result.status == "up", result.reason
    assert result.details is not None
    assert result.details["closed_shards"] == [parent]
    written = [row["shard"] for row in result.details["shards"]]
    assert written == ["shardId-000000000001", "shardId-000000000002", "shardId-000000000003"]
    assert canaries_in(moto, "events", parent) == []  # the closed parent is not written


async def test_consumer_without_shard_end_checkpoint_misses_the_children(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=2)
    marker_bucket(moto)
    check = params(moto, "events", consumer=s3_consumer(moto, sla=1.5))
    with (
        route_to_open_shards(),
        Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE), follow_children=False),
    ):
        before = await run_check("kinesis_canary", check)
        parent = split_first_shard(moto, "events")
        after = await run_check("kinesis_canary", check)
    assert before.status == "up", before.reason
    assert after.status == "down", after.reason
    for child in ("shardId-000000000002", "shardId-000000000003"):
        assert f"stream events shard {child}: no consumer marker for canary" in after.reason
    assert f"it is a child of {parent} after a reshard" in after.reason
    assert "SHARD_END" in after.reason
    assert "shard shardId-000000000001:" not in after.reason  # the untouched shard is fine
    assert after.observations["consumer_missing_shards"] == 2


async def test_merge_child_is_covered_and_blamed_when_unread(moto: MotoServer) -> None:
    shards = create_stream(moto, "events", shards=2)
    marker_bucket(moto)
    check = params(moto, "events", consumer=s3_consumer(moto, sla=1.5))
    with (
        route_to_open_shards(),
        Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE), follow_children=False),
    ):
        kinesis(moto).merge_shards(
            StreamName="events",
            ShardToMerge=shards[0]["ShardId"],
            AdjacentShardToMerge=shards[1]["ShardId"],
        )
        result = await run_check("kinesis_canary", check)
    assert result.status == "down", result.reason
    assert result.observations["open_shards"] == 1
    assert result.reason.startswith("stream events shard shardId-000000000002: no consumer marker")
    assert "child of shardId-000000000000, shardId-000000000001 after a reshard" in result.reason


async def test_consumer_blocked_on_a_poison_record_is_down_naming_that_shard(
    moto: MotoServer,
) -> None:
    shards = create_stream(moto, "events", shards=3)
    marker_bucket(moto)
    poisoned = shards[2]
    kinesis(moto).put_record(
        StreamName="events",
        Data=b"\x00not json",
        PartitionKey="bad",
        ExplicitHashKey=poisoned["HashKeyRange"]["StartingHashKey"],
    )
    check = params(moto, "events", consumer=s3_consumer(moto, sla=1.5))
    with Consumer(
        moto, "events", s3_marker(moto, MARKERS, TEMPLATE), block_on_poison=True
    ) as consumer:
        result = await run_check("kinesis_canary", check)
    assert consumer.blocked_on == {poisoned["ShardId"]}
    assert result.status == "down", result.reason
    assert result.reason.startswith(
        f"stream events shard {poisoned['ShardId']}: no consumer marker for canary"
    )
    assert "stuck on this shard" in result.reason and "poison record" in result.reason
    assert result.observations["consumer_missing_shards"] == 1
    # The same poison record, skipped by a consumer with a DLQ: up.
    with Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE)):
        result = await run_check("kinesis_canary", check)
    assert result.status == "up", result.reason


async def test_late_markers_are_deleted_by_the_next_run(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=1)
    s3 = marker_bucket(moto)
    check = params(moto, "events", consumer=s3_consumer(moto, sla=0.5))
    async with check_handle("kinesis_canary", check) as handle:
        results = [await handle.run()]  # no consumer yet: down
        assert results[0].details is not None
        late = results[0].details["shards"][0]["canary_id"]
        s3.put_object(Bucket=MARKERS, Key=TEMPLATE.format(id=late), Body=b"late")
        with Consumer(moto, "events", s3_marker(moto, MARKERS, TEMPLATE)):
            results.append(await handle.run())
    assert [r.status for r in results] == ["down", "up"]
    assert s3.list_objects_v2(Bucket=MARKERS).get("KeyCount") == 0


async def test_marker_store_missing_is_down_naming_it(moto: MotoServer) -> None:
    create_stream(moto, "events", shards=1)
    consumer_params = {
        "marker": {"type": "dynamodb", "table": "no-such-table"},
        "sla": 1,
        "poll_interval": 0.1,
    }
    result = await run_check("kinesis_canary", params(moto, "events", consumer=consumer_params))
    assert result.status == "down", result.reason
    assert result.reason.startswith(
        "cannot read the consumer's markers (DynamoDB table no-such-table): "
        "ResourceNotFoundException"
    )


async def test_marker_names_must_depend_on_the_canary(moto: MotoServer) -> None:
    bad = params(
        moto,
        "events",
        consumer={"marker": {"type": "s3", "bucket": MARKERS, "key_template": "processed/done"}},
    )
    with pytest.raises(ConfigError, match=r"must contain \{id\}"):
        await run_check("kinesis_canary", bad)
