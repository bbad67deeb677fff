"""The canary lifecycle (plumbing.canary, and plumbing.s3 for S3 objects) on moto: written
tagged with the shared body, deleted with every version, failed deletes kept for a later run
(bounded), leftovers swept by age."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.aws import AwsClients, AwsSettings
from alivemcp.plumbing.canary import CANARY_TAG, check_slug, document
from alivemcp.plumbing.s3 import S3Canaries
from alivemcp.testbed.moto import MotoServer
from tests.support.failing_aws import closed_port
from tests.support.s3_replication import s3_client

BUCKET = "canaries"
PREFIX = "alivemcp-canary/test/"


@pytest.fixture
async def clients() -> AsyncIterator[AwsClients]:
    shared = AwsClients()
    try:
        yield shared
    finally:
        await shared.aclose()


def _versioned(moto: MotoServer, bucket: str = BUCKET) -> Any:
    client = s3_client(moto)
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return client


def _versions(client: Any, bucket: str = BUCKET, prefix: str = "") -> list[str]:
    listing = client.list_object_versions(Bucket=bucket, Prefix=prefix)
    return sorted(
        item["Key"] for group in ("Versions", "DeleteMarkers") for item in listing.get(group, [])
    )


async def _s3(clients: AwsClients, moto: MotoServer) -> Any:
    return await clients.client("s3", AwsSettings.model_validate(moto.aws_params()))


async def _unreachable_s3(clients: AwsClients) -> Any:
    settings = AwsSettings.model_validate(
        {
            "region": "us-east-1",
            "endpoint_url": f"http://127.0.0.1:{closed_port()}",
            "access_key_id": "testing",
            "secret_access_key": "testing",
            "max_attempts": 1,
        }
    )
    return await clients.client("s3", settings)


def test_check_slug_and_document() -> None:
    assert check_slug("orders / DR: eu-west-1") == "orders-DR-eu-west-1"
    assert check_slug("///") == "check"
    doc = document("s3_x", "orders", fields={"key": "k"}, body_fields={"team": "dr"})
    assert {doc["probe"], doc["check"], doc["key"], doc["team"]} == {"s3_x", "orders", "k", "dr"}
    assert isinstance(doc["written_at"], str) and doc["written_at_epoch"] > 0


async def test_write_tags_the_canary_and_returns_its_version(
    moto: MotoServer, clients: AwsClients
) -> None:
    blocking = _versioned(moto)
    canaries = S3Canaries()
    s3 = await _s3(clients, moto)
    doc = document("s3_x", "orders", body_fields={"team": "dr"})
    version = await canaries.write(s3, BUCKET, f"{PREFIX}a café.json", doc, {CANARY_TAG: "test"})
    assert version is not None
    stored = blocking.get_object(Bucket=BUCKET, Key=f"{PREFIX}a café.json")
    assert json.loads(stored["Body"].read())["team"] == "dr"
    tags = blocking.get_object_tagging(Bucket=BUCKET, Key=f"{PREFIX}a café.json")["TagSet"]
    assert tags == [{"Key": CANARY_TAG, "Value": "test"}]

    blocking.create_bucket(Bucket="plain")
    assert await canaries.write(s3, "plain", "k.json", doc, {}) is None


async def test_delete_removes_every_version_and_marker_of_exactly_that_key(
    moto: MotoServer, clients: AwsClients
) -> None:
    blocking = _versioned(moto)
    key = f"{PREFIX}k.json"
    for _ in range(2):
        blocking.put_object(Bucket=BUCKET, Key=key, Body=b"{}")
    blocking.delete_object(Bucket=BUCKET, Key=key)  # a delete marker on top
    blocking.put_object(Bucket=BUCKET, Key=f"{key}.other", Body=b"{}")  # same prefix, kept
    assert _versions(blocking).count(key) == 3
    canaries = S3Canaries()
    assert await canaries.delete(await _s3(clients, moto), BUCKET, key) is None
    assert _versions(blocking) == [f"{key}.other"]
    assert canaries.pending == []


async def test_a_failed_delete_is_kept_and_retried_by_a_later_run(
    moto: MotoServer, clients: AwsClients
) -> None:
    blocking = _versioned(moto)
    key = f"{PREFIX}k.json"
    blocking.put_object(Bucket=BUCKET, Key=key, Body=b"{}")
    canaries = S3Canaries()
    err = await canaries.delete(await _unreachable_s3(clients), BUCKET, key)
    assert err is not None and err.kind is ErrorKind.CONNECT
    assert canaries.pending == [(BUCKET, key)]
    await canaries.delete_deferred()  # still unreachable: kept
    assert canaries.pending == [(BUCKET, key)]
    assert _versions(blocking) == [key]

    canaries.defer(await _s3(clients, moto), BUCKET, key)  # reachable again
    await canaries.delete_deferred()
    assert canaries.pending == []
    assert _versions(blocking) == []


async def test_pending_deletes_are_bounded_oldest_dropped(
    moto: MotoServer, clients: AwsClients
) -> None:
    canaries = S3Canaries(max_pending=2)
    s3 = await _s3(clients, moto)
    for n in range(3):
        canaries.defer(s3, BUCKET, f"{PREFIX}{n}.json")
    assert canaries.pending == [(BUCKET, f"{PREFIX}1.json"), (BUCKET, f"{PREFIX}2.json")]


async def test_sweep_deletes_only_old_canaries_under_the_prefix(
    moto: MotoServer, clients: AwsClients
) -> None:
    blocking = _versioned(moto)
    for name in ("crashed/1.json", "crashed/2.json", "notes.txt"):
        blocking.put_object(Bucket=BUCKET, Key=f"{PREFIX}{name}", Body=b"{}")
    blocking.delete_object(Bucket=BUCKET, Key=f"{PREFIX}crashed/1.json")
    blocking.put_object(Bucket=BUCKET, Key="elsewhere/3.json", Body=b"{}")
    canaries = S3Canaries()
    s3 = await _s3(clients, moto)

    def is_canary(key: str) -> bool:
        return key.endswith(".json")

    # Younger than the minimum age: they may belong to a run in flight elsewhere.
    assert await canaries.sweep(s3, BUCKET, PREFIX, 3600, is_canary) == 0
    assert len(_versions(blocking, prefix=PREFIX)) == 4
    # why: the objects' age must pass the 0.5 s minimum; S3's LastModified has whole seconds
    await asyncio.sleep(1.1)
    assert await canaries.sweep(s3, BUCKET, PREFIX, 0.5, is_canary) == 3
    assert _versions(blocking) == ["alivemcp-canary/test/notes.txt", "elsewhere/3.json"]


async def test_sweep_never_lists_a_whole_bucket_and_reports_errors(
    moto: MotoServer, clients: AwsClients
) -> None:
    blocking = _versioned(moto)
    blocking.put_object(Bucket=BUCKET, Key="x.json", Body=b"{}")
    canaries = S3Canaries()
    assert await canaries.sweep(await _s3(clients, moto), BUCKET, "", 0, bool) == 0
    assert _versions(blocking) == ["x.json"]
    failed = await canaries.sweep(await _unreachable_s3(clients), BUCKET, PREFIX, 0, bool)
    assert not isinstance(failed, int) and failed.kind is ErrorKind.CONNECT
