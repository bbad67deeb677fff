"""``s3_event_delivery`` against moto's real S3 → SQS, SNS and EventBridge deliveries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alivemcp.testbed.moto import MotoServer
from probes.s3_event_delivery import diagnose_key, parse_message
from tests.support import run_check
from tests.support.s3_events import (
    BUCKET,
    PREFIX,
    classic_plus_bug,
    client,
    correct_decode,
    drain,
    make_bucket,
    make_queue,
    notify_queue_directly,
    notify_via_eventbridge,
    notify_via_sns,
    worker,
)
from tests.support.s3_replication import without_aws_credentials


def params(moto: MotoServer, queue_url: str | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"bucket": BUCKET, "aws": moto.aws_params(), "limit": 5, **extra}
    if queue_url is not None:
        out["queue_url"] = queue_url
    return out


def canaries_left(moto: MotoServer) -> list[str]:
    listing = client(moto, "s3").list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)
    return [item["Key"] for item in listing.get("Contents", [])]


async def test_direct_delivery_is_up_and_leaves_nothing_behind(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue)
    result = await run_check("s3_event_delivery", params(moto, queue))
    assert result.status == "up", result.reason
    assert "delivery_latency_seconds" in result.observations
    assert result.details is not None
    key = result.details["key"]
    assert " " in key and "é" in key
    assert result.details["delivered_via"] == ["s3"]
    assert canaries_left(moto) == []
    # Only moto's s3:TestEvent remains: the canary's own event was consumed.
    left = [parse_message(m["Body"]) for m in drain(moto, queue)]
    assert all(not p.events for p in left)


async def test_sns_envelope_is_understood(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_via_sns(moto, queue)
    result = await run_check("s3_event_delivery", params(moto, queue))
    assert result.status == "up", result.reason
    assert result.details is not None
    assert result.details["delivered_via"] == ["sns/s3"]


async def test_eventbridge_envelope_is_understood(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_via_eventbridge(moto, queue)
    result = await run_check("s3_event_delivery", params(moto, queue))
    assert result.status == "up", result.reason
    assert result.details is not None
    assert result.details["delivered_via"] == ["eventbridge"]


async def test_nothing_delivered_is_down(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    # The configuration covers another prefix: the canary's upload raises no event.
    notify_queue_directly(moto, queue, prefix="uploads/")
    result = await run_check("s3_event_delivery", params(moto, queue, limit=1.5))
    assert result.status == "down", result.reason
    assert "no ObjectCreated event" in result.reason
    assert "s3:TestEvent" in result.reason
    assert "delivery_latency_seconds" not in result.observations
    assert canaries_left(moto) == []


async def test_foreign_messages_survive_and_stay_visible(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "shared-work")
    notify_queue_directly(moto, queue)
    sqs = client(moto, "sqs")
    foreign_bodies = [json.dumps({"job": n}) for n in range(3)] + [
        "not json at all",
        json.dumps({"Records": [{"s3": {"bucket": {"name": "other"}, "object": {"key": "a+b"}}}]}),
    ]
    for body in foreign_bodies:
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    result = await run_check("s3_event_delivery", params(moto, queue))
    assert result.status == "up", result.reason
    # Visible at once (received with no wait right after the run) and all still there.
    bodies = sorted(m["Body"] for m in drain(moto, queue))
    for body in foreign_bodies:
        assert body in bodies


async def test_duplicate_deliveries_are_counted_and_cleared(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue)
    # A second copy of every event through SNS into the same queue.
    sns = client(moto, "sns")
    topic = sns.create_topic(Name="dup")["TopicArn"]
    from tests.support.s3_events import queue_arn

    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(moto, queue))
    s3 = client(moto, "s3")
    config = s3.get_bucket_notification_configuration(Bucket=BUCKET)
    s3.put_bucket_notification_configuration(
        Bucket=BUCKET,
        NotificationConfiguration={
            "QueueConfigurations": config["QueueConfigurations"],
            "TopicConfigurations": [{"TopicArn": topic, "Events": ["s3:ObjectCreated:*"]}],
        },
    )
    result = await run_check("s3_event_delivery", params(moto, queue), runs=2)
    assert result.status == "up", result.reason
    assert result.details is not None
    assert result.details["duplicates"] >= 1 or result.details["queue"]["stale_deleted"] >= 1
    left = [parse_message(m["Body"]) for m in drain(moto, queue)]
    assert all(not p.events for p in left)  # no canary events pile up


async def test_relay_with_plus_bug_is_an_encoding_failure(moto: MotoServer) -> None:
    make_bucket(moto)
    raw_queue = make_queue(moto, "raw-events")
    canary_queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, raw_queue)
    with worker(moto, raw_queue, classic_plus_bug, mode="relay", relay_to=canary_queue):
        result = await run_check("s3_event_delivery", params(moto, canary_queue))
    assert result.status == "down", result.reason
    assert "encoding failure" in result.reason
    assert "spaces arrived as '+'" in result.reason


async def test_correct_relay_is_up(moto: MotoServer) -> None:
    make_bucket(moto)
    raw_queue = make_queue(moto, "raw-events")
    canary_queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, raw_queue)
    with worker(moto, raw_queue, correct_decode, mode="relay", relay_to=canary_queue):
        result = await run_check("s3_event_delivery", params(moto, canary_queue))
    assert result.status == "up", result.reason


E2E = {"marker_key_template": "processed/{key}.done", "limit": 5}


async def test_end_to_end_with_a_correct_worker_is_up(moto: MotoServer) -> None:
    make_bucket(moto)
    work_queue = make_queue(moto, "work")
    notify_queue_directly(moto, work_queue)
    with worker(moto, work_queue, correct_decode, mode="read") as running:
        result = await run_check("s3_event_delivery", params(moto, None, end_to_end=E2E))
    assert result.status == "up", result.reason
    assert "end_to_end_latency_seconds" in result.observations
    assert running.handled
    listing = client(moto, "s3").list_objects_v2(Bucket=BUCKET, Prefix="processed/")
    assert listing.get("KeyCount", 0) == 0  # the marker was cleaned up


async def test_end_to_end_catches_the_plus_decoding_bug(moto: MotoServer) -> None:
    make_bucket(moto)
    work_queue = make_queue(moto, "work")
    notify_queue_directly(moto, work_queue)
    with worker(moto, work_queue, classic_plus_bug, mode="index"):
        result = await run_check(
            "s3_event_delivery", params(moto, None, end_to_end={**E2E, "limit": 2})
        )
    assert result.status == "down", result.reason
    assert "encoding failure" in result.reason
    assert "'+' kept instead of spaces" in result.reason


async def test_end_to_end_worker_that_finds_nothing_is_down(moto: MotoServer) -> None:
    make_bucket(moto)
    work_queue = make_queue(moto, "work")
    notify_queue_directly(moto, work_queue)
    with worker(moto, work_queue, classic_plus_bug, mode="read") as running:
        result = await run_check(
            "s3_event_delivery", params(moto, None, end_to_end={**E2E, "limit": 2})
        )
    assert result.status == "down", result.reason
    assert "no downstream marker" in result.reason
    assert any("+" in key for key in running.handled)  # the bug really happened


async def test_queue_and_marker_both_required_when_both_configured(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue)
    # The queue path works but nobody writes the marker.
    result = await run_check(
        "s3_event_delivery", params(moto, queue, end_to_end={**E2E, "limit": 1.5})
    )
    assert result.status == "down", result.reason
    assert "no downstream marker" in result.reason
    assert "delivery_latency_seconds" in result.observations


async def test_missing_queue_is_down_and_missing_bucket_is_down(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    gone = queue.rsplit("/", 1)[0] + "/no-such-queue"
    result = await run_check("s3_event_delivery", params(moto, gone))
    assert result.status == "down", result.reason
    assert "canary queue no-such-queue not found" in result.reason

    result = await run_check("s3_event_delivery", {**params(moto, queue), "bucket": "nope-nope"})
    assert result.status == "down", result.reason
    assert "bucket nope-nope not found" in result.reason


async def test_config_rejects_a_template_without_nonce_and_no_target(moto: MotoServer) -> None:
    import pytest

    from alivemcp.config import ConfigError

    with pytest.raises(ConfigError, match="nonce"):
        await run_check("s3_event_delivery", params(moto, "q", key_template="{prefix}x y.json"))
    with pytest.raises(ConfigError, match="queue_url, end_to_end"):
        await run_check("s3_event_delivery", params(moto, None))


def test_parse_message_handles_every_envelope_and_garbage() -> None:
    direct = {
        "Records": [
            {
                "eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "b"}, "object": {"key": "a+b%C3%A9"}},
            }
        ]
    }
    sns = {"Type": "Notification", "Message": json.dumps(direct)}
    bridge = {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": "b"}, "object": {"key": "a bé"}},
    }
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"}
    assert parse_message(json.dumps(direct)).events[0].decoded_keys() == ["a bé"]
    assert parse_message(json.dumps(sns)).events[0].via == "sns/s3"
    assert parse_message(json.dumps(bridge)).events[0].decoded_keys() == ["a bé"]
    assert parse_message(json.dumps(test_event)).test_event
    for garbage in (
        "",
        "null",
        "[1]",
        '{"Records": [1, {"s3": 5}]}',
        '{"Type": "Notification", "Message": "{"}',
    ):
        assert parse_message(garbage).events == []


def test_diagnose_key_names_the_wrong_decoding() -> None:
    key = "p/x canary café.json"
    assert diagnose_key("p%2Fx%2Bcanary%2Bcaf%C3%A9.json", key) is not None
    assert "twice" in (diagnose_key("p/x%2Bcanary%2Bcaf%25C3%25A9.json", key) or "")
    assert "Latin-1" in (diagnose_key("p/x+canary+caf%C3%83%C2%A9.json", key) or "")
    assert "normalization" in (diagnose_key("p/x+canary+cafe%CC%81.json", key) or "")
    assert diagnose_key("p/x+canary+cafe.json", key) is None


async def test_setup_sweeps_old_canaries_and_stale_canary_events_are_deleted(
    moto: MotoServer,
) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue)
    s3 = client(moto, "s3")
    # A crashed earlier run of check "t": its canary object and its (unconsumed) event.
    old_key = f"{PREFIX}t/0123456789ab canary café.json"
    keep_key = f"{PREFIX}t/not-a-canary.txt"
    s3.put_object(Bucket=BUCKET, Key=old_key, Body=b"{}")
    s3.put_object(Bucket=BUCKET, Key=keep_key, Body=b"{}")
    result = await run_check("s3_event_delivery", params(moto, queue, sweep_min_age="1ms"))
    assert result.status == "up", result.reason
    assert result.details is not None
    assert canaries_left(moto) == [keep_key]
    # The old canary's event was recognised as this check's and deleted; the other one
    # (not a canary key) was released, never consumed.
    messages = drain(moto, queue)
    left = [e.decoded_keys()[0] for m in messages for e in parse_message(m["Body"]).events]
    assert left == [keep_key]
    stats = result.details["queue"]
    assert stats["stale_deleted"] + stats["foreign_released"] >= 1


async def test_slow_delivery_is_degraded(moto: MotoServer) -> None:
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    notify_queue_directly(moto, queue)
    result = await run_check("s3_event_delivery", params(moto, queue, degraded_after="1ms"))
    assert result.status == "degraded", result.reason
    assert "slower than" in result.reason


async def test_prober_without_credentials_is_unknown(
    moto: MotoServer, monkeypatch: Any, tmp_path: Path
) -> None:
    without_aws_credentials(monkeypatch, tmp_path)
    make_bucket(moto)
    queue = make_queue(moto, "canary-events")
    aws = {"region": "us-east-1", "endpoint_url": moto.url, "max_attempts": 1}
    result = await run_check("s3_event_delivery", {**params(moto, queue), "aws": aws})
    assert result.status == "unknown", result.reason
    assert "credentials" in result.reason


async def test_marker_the_prober_may_not_read_is_unknown(moto: MotoServer) -> None:
    from alivemcp.testbed.s3_replicator import deny_head_object

    make_bucket(moto)
    make_bucket(moto, "worker-markers")
    deny_head_object(client(moto, "s3"), "worker-markers")
    e2e = {**E2E, "limit": 1.5, "marker_bucket": "worker-markers"}
    result = await run_check("s3_event_delivery", params(moto, None, end_to_end=e2e))
    assert result.status == "unknown", result.reason
    assert "may not read marker" in result.reason
