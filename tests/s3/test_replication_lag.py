"""``s3_replication_lag`` on moto with the replicator stand-in (moto copies nothing itself).

The probe's own writing, polling and cleanup run unchanged against moto over HTTP; the
stand-in plays S3 replication: it copies after a delay, stops, or marks FAILED, and a bucket
policy makes the destination answer 403.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.plumbing import Plumbing
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.s3_replicator import allow_reads, deny_head_object
from tests.support import run_check
from tests.support.s3_replication import (
    PREFIX,
    replication_stand_in,
    s3_client,
    without_aws_credentials,
)


async def test_replica_within_sla_is_up_and_canaries_are_cleaned(moto: MotoServer) -> None:
    with replication_stand_in(moto, delay=0.3) as stand_in:
        result = await run_check("s3_replication_lag", stand_in.params())
        assert result.status == "up", result.reason
        lag = result.observations["replication_lag_seconds"]
        assert lag > 0
        assert result.details is not None
        assert result.details["key"].startswith(PREFIX)
        assert 0 <= result.details["lag_lower_bound_seconds"] <= lag
        assert stand_in.replicator.copied == 1
        assert stand_in.leftovers() == {stand_in.source: [], stand_in.destination: []}


async def test_canary_is_tagged_json_with_write_time(moto: MotoServer) -> None:
    with replication_stand_in(moto, delay=0.3) as stand_in:
        result = await run_check("s3_replication_lag", stand_in.params(cleanup=False))
        assert result.status == "up", result.reason
        assert result.details is not None
        key = result.details["key"]
        client = s3_client(moto)
        body = client.get_object(Bucket=stand_in.source, Key=key)["Body"].read()
        assert b'"written_at"' in body
        tags = client.get_object_tagging(Bucket=stand_in.source, Key=key)["TagSet"]
        assert {"Key": "alivemcp-canary", "Value": "replication"} in tags


async def test_late_replica_is_degraded(moto: MotoServer) -> None:
    with replication_stand_in(moto, delay=2.0) as stand_in:
        result = await run_check("s3_replication_lag", stand_in.params(sla=1, grace=5))
        assert result.status == "degraded", result.reason
        assert "SLA exceeded" in result.reason
        assert result.observations["replication_lag_seconds"] > 1
        assert stand_in.leftovers() == {stand_in.source: [], stand_in.destination: []}


async def test_stopped_replication_is_down(moto: MotoServer) -> None:
    with replication_stand_in(moto, mode="stopped") as stand_in:
        result = await run_check("s3_replication_lag", stand_in.params(sla=1, grace=1))
        assert result.status == "down", result.reason
        assert "replication failure" in result.reason
        assert stand_in.destination in result.reason
        assert "PENDING" in result.reason
        assert "replication_lag_seconds" not in result.observations


async def test_failed_replication_status_is_down_before_the_sla(moto: MotoServer) -> None:
    with replication_stand_in(moto, mode="fail", delay=0.2) as stand_in:
        result = await run_check(
            "s3_replication_lag", stand_in.params(sla=20, grace=10), timeout=60, interval=120
        )
        assert result.status == "down", result.reason
        assert "FAILED" in result.reason
        assert result.details is not None
        assert result.details["source_replication_status"] == "FAILED"


async def test_uncovered_prefix_hint_when_source_has_no_status(moto: MotoServer) -> None:
    # Straight to moto (no status proxy) and nothing copies: like a prefix no rule covers.
    with replication_stand_in(moto, mode="stopped") as stand_in:
        params = stand_in.params(sla=1, grace=1, source_aws=moto.aws_params())
        result = await run_check("s3_replication_lag", params)
        assert result.status == "down", result.reason
        assert "no ReplicationStatus" in result.reason


async def test_destination_403_is_a_permission_problem_naming_role_and_bucket(
    moto: MotoServer,
) -> None:
    role = "arn:aws:iam::123456789012:role/dr-reader"
    with replication_stand_in(moto) as stand_in:
        deny_head_object(s3_client(moto), stand_in.destination)
        params = stand_in.params(destination_aws=moto.aws_params(role_arn=role))
        result = await run_check("s3_replication_lag", params)
        assert result.status == "down", result.reason
        assert "permission problem" in result.reason
        assert role in result.reason
        assert stand_in.destination in result.reason
        assert "replication_lag_seconds" not in result.observations
        assert result.details is not None and result.details["failure"] == "permission"

        result = await run_check(
            "s3_replication_lag", {**params, "destination_forbidden_status": "unknown"}
        )
        assert result.status == "unknown", result.reason
        assert "permission problem" in result.reason


async def test_late_replica_of_a_failed_run_is_removed_by_the_next_run(
    moto: MotoServer,
) -> None:
    with replication_stand_in(moto, mode="stopped", delay=0.2) as stand_in:
        params = stand_in.params(sla=0.5, grace=0.5)
        loaded = load_config_text(
            yaml.safe_dump(
                {
                    "checks": [
                        {
                            "name": "t",
                            "probe": "s3_replication_lag",
                            "interval": 60,
                            "timeout": 30,
                            "params": params,
                        }
                    ]
                }
            ),
            env={},
        )
        plumbing = Plumbing()
        handle = build_handle(loaded.checks[0], plumbing)
        try:
            first = await handle.run()
            assert first.status == "down", first.reason
            assert first.details is not None
            late_key = first.details["key"]
            # Replication resumes: the first canary's replica lands after its run gave up
            # (its source version was already deleted, so copy what the source had).
            client = s3_client(moto)
            client.put_object(Bucket=stand_in.destination, Key=late_key, Body=b"{}")
            assert late_key in stand_in.leftovers()[stand_in.destination]
            stand_in.replicator.mode = "replicate"
            second = await handle.run()
            assert second.status in {"up", "degraded"}, second.reason
            assert stand_in.leftovers() == {stand_in.source: [], stand_in.destination: []}
        finally:
            await handle.teardown()
            await plumbing.aclose()


async def test_setup_sweeps_old_canaries_in_both_buckets(moto: MotoServer) -> None:
    with replication_stand_in(moto, delay=0.2) as stand_in:
        client = s3_client(moto)
        for bucket in (stand_in.source, stand_in.destination):
            for n in range(3):
                client.put_object(Bucket=bucket, Key=f"{PREFIX}crashed/{n}.json", Body=b"{}")
        # The replicator has copied the source leftovers too (each after its 0.2 s delay).
        deadline = time.monotonic() + 30
        while stand_in.replicator.copied < 3:
            assert time.monotonic() < deadline, (
                f"the replicator copied {stand_in.replicator.copied} of the 3 leftovers; "
                f"errors: {stand_in.replicator.errors}"
            )
            await asyncio.sleep(0.05)
        result = await run_check("s3_replication_lag", stand_in.params(sweep_min_age="1ms"))
        assert result.status == "up", result.reason
        assert stand_in.leftovers() == {stand_in.source: [], stand_in.destination: []}


async def test_timeout_shorter_than_sla_window_is_unknown(moto: MotoServer) -> None:
    with replication_stand_in(moto) as stand_in:
        result = await run_check(
            "s3_replication_lag", stand_in.params(sla=45, grace=15), timeout=30
        )
        assert result.status == "unknown", result.reason
        assert "raise the check's timeout" in result.reason


async def test_missing_source_bucket_is_down_and_bad_credentials_unknown(
    moto: MotoServer,
) -> None:
    with replication_stand_in(moto) as stand_in:
        result = await run_check(
            "s3_replication_lag", stand_in.params(source_bucket="no-such-bucket-here")
        )
        assert result.status == "down", result.reason
        assert "source bucket no-such-bucket-here not found" in result.reason


async def test_unreachable_destination_is_down_with_the_error(moto: MotoServer) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    with replication_stand_in(moto) as stand_in:
        params = stand_in.params(
            sla=1,
            grace=1,
            destination_aws=moto.aws_params(endpoint_url=f"http://127.0.0.1:{closed_port}"),
        )
        result = await run_check("s3_replication_lag", params)
        assert result.status == "down", result.reason
        assert "unreachable" in result.reason
        assert stand_in.leftovers()[stand_in.source] == []


async def test_one_shared_aws_block_serves_both_buckets(moto: MotoServer) -> None:
    with replication_stand_in(moto, delay=0.2) as stand_in:
        params = stand_in.params()
        del params["source_aws"], params["destination_aws"]
        result = await run_check("s3_replication_lag", {**params, "aws": moto.aws_params()})
        assert result.status == "up", result.reason
        assert stand_in.replicator.copied == 1


async def test_prober_without_credentials_is_unknown(
    moto: MotoServer, monkeypatch: Any, tmp_path: Path
) -> None:
    without_aws_credentials(monkeypatch, tmp_path)
    with replication_stand_in(moto) as stand_in:
        params = stand_in.params()
        del params["source_aws"], params["destination_aws"]
        aws = {"region": "us-east-1", "endpoint_url": moto.url, "max_attempts": 1}
        result = await run_check("s3_replication_lag", {**params, "aws": aws})
        assert result.status == "unknown", result.reason
        assert "credentials" in result.reason


async def test_403_until_the_replica_lands_is_not_a_failure(moto: MotoServer) -> None:
    # S3 answers 403 for a missing key when the reader lacks s3:ListBucket, and 200 once the
    # object exists: the policy here denies reads until the replicator has copied the canary.
    with replication_stand_in(moto, delay=1.0) as stand_in:
        client = s3_client(moto)
        deny_head_object(client, stand_in.destination)

        def lift_when_copied() -> None:
            for _ in range(100):
                if stand_in.replicator.copied:
                    allow_reads(client, stand_in.destination)
                    return
                time.sleep(0.05)

        lifter = threading.Thread(target=lift_when_copied)
        lifter.start()
        try:
            result = await run_check("s3_replication_lag", stand_in.params())
        finally:
            lifter.join()
        assert result.status == "up", result.reason
        assert result.details is not None
        assert result.details["forbidden_polls"] >= 1
        assert "s3:ListBucket" in result.details["hint"]


async def test_unversioned_source_is_named_in_the_failure(moto: MotoServer) -> None:
    with replication_stand_in(moto, mode="stopped") as stand_in:
        s3_client(moto).create_bucket(Bucket="plain-unversioned")
        params = stand_in.params(sla=1, grace=1, source_bucket="plain-unversioned")
        result = await run_check("s3_replication_lag", params)
        assert result.status == "down", result.reason
        assert "needs versioning" in result.reason
