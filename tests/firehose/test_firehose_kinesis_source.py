"""``firehose_freshness`` on the seed's reference stream: Kinesis-sourced, dynamically
partitioned (JQ inline parsing), optionally converted to Parquet/ORC. moto describes the
stream over HTTP; :mod:`tests.support.kinesis_firehose` delivers from the source stream."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from alivemcp.testbed.moto import MotoServer
from probes.firehose_freshness import columnar_problem, expand_prefix, jq_partition_keys
from tests.support import run_check
from tests.support.firehose import base64_twice, params, stepped_check, without_newline
from tests.support.kinesis_firehose import (
    BUCKET,
    CANARY_FIELDS,
    SEED_PREFIX,
    SEED_QUERY,
    SOURCE,
    create_kinesis_sourced_stream,
    kinesis_firehose,
    orc_file,
    parquet_file,
)

CANARY_PARTITION = "tool-events/tenant=alivemcp-canary/tool=canary/"


def seed_params(moto: MotoServer, **extra: Any) -> dict[str, Any]:
    return params(moto, "mcp-tool-events", canary_fields=CANARY_FIELDS, **extra)


def bucket_keys(moto: MotoServer) -> list[str]:
    s3 = boto3.client("s3", **moto.boto3_kwargs())
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def source_records(moto: MotoServer) -> list[dict[str, Any]]:
    kinesis = boto3.client("kinesis", **moto.boto3_kwargs())
    shard = kinesis.list_shards(StreamName=SOURCE)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=SOURCE, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    return list(kinesis.get_records(ShardIterator=iterator)["Records"])


async def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the stand-in did not deliver in time"
        await asyncio.sleep(0.05)


async def test_kinesis_sourced_partitioned_stream_is_up(moto: MotoServer) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events")
    with kinesis_firehose(moto, "mcp-tool-events") as firehose:
        result = await run_check("firehose_freshness", seed_params(moto))
    assert result.status == "up", result.reason
    assert "canary delivered in" in result.reason
    assert result.details is not None
    canary = result.details["canary"]
    hour = datetime.now(UTC)
    assert canary["status"] == "up"
    assert canary["key"].startswith(f"{CANARY_PARTITION}year={hour:%Y}/month={hour:%m}/")
    # The canary went into the source stream with the derived partition key, carrying the
    # fields the stream's JQ query reads...
    [record] = firehose.records
    assert record["PartitionKey"] == "alivemcp-canary-t"
    sent = json.loads(record["Data"])
    assert sent["tenant_id"] == "alivemcp-canary" and sent["alivemcp_canary"] == canary["id"]
    # ...and never into the delivery stream (moto would have written it under the raw prefix).
    assert all("!{" not in key for key in bucket_keys(moto))


async def test_stopped_delivery_is_down_naming_stream_and_prefix(moto: MotoServer) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events", interval=60)
    check = seed_params(moto, degraded_above="1s", down_above="2s", partition_key="tenant-7")
    async with stepped_check("firehose_freshness", check) as handle:
        first = await handle.run()  # nothing reads the source stream
        assert first.details and first.details["canary_pending"]["expected_prefix"].startswith(
            CANARY_PARTITION
        )
        await asyncio.sleep(2.3)  # why: the canary's age must pass down_above (2 s)
        missing = await handle.run()
    assert missing.status == "down", missing.reason
    assert f"put into Kinesis stream {SOURCE} (partition key tenant-7)" in missing.reason
    assert f"not found under s3://{BUCKET}/{CANARY_PARTITION}year=" in missing.reason
    # The puts succeeded (the overdue canary's, then the next run's): delivery is what stopped.
    records = source_records(moto)
    assert len(records) == 2 and {r["PartitionKey"] for r in records} == {"tenant-7"}


async def test_partition_prefix_mismatch_is_down_naming_both(moto: MotoServer) -> None:
    # The stream's prefix lost its tool= level; the Athena table (expected_prefix) still has it.
    changed = SEED_PREFIX.replace("tool=!{partitionKeyFromQuery:toolName}/", "")
    create_kinesis_sourced_stream(moto, "mcp-tool-events", prefix=changed, interval=60)
    check = seed_params(moto, degraded_above="1s", down_above="60s", expected_prefix=SEED_PREFIX)
    with kinesis_firehose(moto, "mcp-tool-events") as firehose:
        async with stepped_check("firehose_freshness", check) as handle:
            first = await handle.run()
            assert first.status == "up", first.reason
            await wait_for(lambda: firehose.written)
            await asyncio.sleep(1.2)  # why: overdue: its age must pass degraded_above (1 s)
            result = await handle.run()
    assert result.status == "down", result.reason
    assert f"landed under s3://{BUCKET}/tool-events/tenant=alivemcp-canary/year=" in result.reason
    assert f"not under the expected s3://{BUCKET}/{CANARY_PARTITION}year=" in result.reason


@pytest.mark.parametrize(
    ("lambda_bug", "says"),
    [
        (base64_twice, "base64 text where JSON was expected"),
        (without_newline, "AppendDelimiterToRecord"),
    ],
)
async def test_transformation_trap_under_expanded_prefix_is_down(
    moto: MotoServer, lambda_bug: Any, says: str
) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events")
    with kinesis_firehose(moto, "mcp-tool-events", transform=lambda_bug) as firehose:
        result = await run_check("firehose_freshness", seed_params(moto))
    assert result.status == "down", result.reason
    assert "transformation trap" in result.reason and says in result.reason
    assert firehose.written[0].startswith(CANARY_PARTITION)
    assert result.details and result.details["canary"]["key"] == firehose.written[0]


@pytest.mark.parametrize(
    ("fmt", "file", "status", "says"),
    [
        ("parquet", parquet_file, "up", "Parquet object under the canary's prefix"),
        ("orc", orc_file, "up", "ORC object under the canary's prefix"),
        ("parquet", lambda: parquet_file(complete=False), "down", "truncated"),
        ("parquet", lambda: b'{"tenant_id":"x"}\n' * 20, "down", "not a Parquet file"),
    ],
)
async def test_columnar_delivery_states_what_is_verified(
    moto: MotoServer, fmt: str, file: Any, status: str, says: str
) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events", columnar=fmt)
    with kinesis_firehose(moto, "mcp-tool-events", columnar=file):
        result = await run_check("firehose_freshness", seed_params(moto))
    assert result.status == status, result.reason
    assert says in result.reason
    assert result.details and result.details["format_conversion"] == fmt
    if status == "up":
        assert "rows not decoded" in result.reason
        verified = result.details["canary"]["verified"]
        assert "magic bytes at both ends" in verified
        assert f"under s3://{BUCKET}/{CANARY_PARTITION}" in verified
        assert "that it holds the canary is not verified" in verified


async def test_canary_in_the_error_output_is_down(moto: MotoServer) -> None:
    # partition_keys pinned by hand, but the canary lacks the fields the JQ query reads:
    # Firehose cannot partition it and writes it to partitioning-failed/.
    create_kinesis_sourced_stream(moto, "mcp-tool-events", interval=60)
    check = params(
        moto,
        "mcp-tool-events",
        degraded_above="1s",
        down_above="60s",
        partition_keys={"tenantId": "alivemcp-canary", "toolName": "canary"},
    )
    with kinesis_firehose(moto, "mcp-tool-events") as firehose:
        async with stepped_check("firehose_freshness", check) as handle:
            await handle.run()
            await wait_for(lambda: firehose.written)
            await asyncio.sleep(1.2)  # why: overdue: its age must pass degraded_above (1 s)
            result = await handle.run()
    assert result.status == "down", result.reason
    assert "was written to the error output s3://mcp-events/tool-events-errors/" in result.reason
    assert "(partitioning-failed)" in result.reason
    assert "new object(s) under the error prefix (partitioning-failed)" in result.reason


async def test_unknown_partition_values_are_unknown_and_nothing_is_put(moto: MotoServer) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events")
    # The canary carries none of the fields the JQ query reads.
    result = await run_check("firehose_freshness", params(moto, "mcp-tool-events"))
    assert result.status == "unknown", result.reason
    assert "no value for !{partitionKeyFromQuery:tenantId}" in result.reason
    assert SEED_QUERY in result.reason
    # A Lambda-computed key: only the user can say its value.
    lambda_prefix = "by-customer/!{partitionKeyFromLambda:customer}/"
    boto3.client("firehose", **moto.boto3_kwargs()).delete_delivery_stream(
        DeliveryStreamName="mcp-tool-events"
    )
    boto3.client("kinesis", **moto.boto3_kwargs()).delete_stream(StreamName=SOURCE)
    create_kinesis_sourced_stream(moto, "mcp-tool-events", prefix=lambda_prefix, query=None)
    result = await run_check("firehose_freshness", params(moto, "mcp-tool-events"))
    assert result.status == "unknown", result.reason
    assert "!{partitionKeyFromLambda:customer}" in result.reason
    assert source_records(moto) == []


async def test_missing_source_stream_is_down(moto: MotoServer) -> None:
    create_kinesis_sourced_stream(moto, "mcp-tool-events", source_exists=False)
    result = await run_check("firehose_freshness", seed_params(moto))
    assert result.status == "down", result.reason
    assert f"source Kinesis stream {SOURCE} not found" in result.reason


def test_prefix_expansion_and_simple_jq() -> None:
    moment = datetime(2026, 3, 9, 7, 5, tzinfo=UTC)
    keys = jq_partition_keys(SEED_QUERY, {"tenant_id": "a", "tool_name": "search"})
    assert keys == {"tenantId": "a", "toolName": "search"}
    values = {f"partitionKeyFromQuery:{k}": v for k, v in keys.items()}
    expanded = expand_prefix(SEED_PREFIX, moment, values)
    assert expanded.shown == "tool-events/tenant=a/tool=search/year=2026/month=03/day=09/hour=07/"
    assert expanded.listing == expanded.shown
    assert expanded.holds(expanded.shown + "mcp-tool-events-1-2026-03-09-07-05-00-x")
    random = expand_prefix("logs/!{firehose:random-string}/!{timestamp:yyyy}/", moment, {})
    assert random.listing == "logs/" and random.shown == "logs/*/2026/"
    assert random.holds("logs/abc123/2026/obj") and not random.holds("logs/a/b/2026/obj")
    assert jq_partition_keys(
        '{"t": .meta["tenant"], n: .count}', {"meta": {"tenant": "x"}, "count": 3}
    ) == {"t": "x", "n": "3"}
    assert jq_partition_keys("{t: .a}", {}) == {}  # missing: Firehose fails the record
    assert jq_partition_keys(".tenant | ascii_downcase", {}) is None  # not the simple form


def test_columnar_magic() -> None:
    good = parquet_file()
    assert columnar_problem("parquet", good[:4], good[-4:], len(good)) is None
    orc = orc_file()
    assert columnar_problem("orc", orc[:4], orc[-4:], len(orc)) is None
    assert "truncated" in (columnar_problem("orc", orc[:4], orc[-5:-1], len(orc)) or "")
    assert "not an ORC file" in (columnar_problem("orc", good[:4], good[-4:], len(good)) or "")
