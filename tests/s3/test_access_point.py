"""``s3_access_point`` against moto's real access-point endpoint over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alivemcp.testbed.moto import MotoServer
from tests.support import check_json, run_check
from tests.support.s3_access_points import (
    access_point_aws,
    create_access_point,
    deny_reads_policy,
    s3,
)

BUCKET = "tenant-data"
KEY = "data/tenant-a/profile.json"


async def _setup(moto: MotoServer) -> str:
    client = s3(moto)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key=KEY, Body=b'{"tenant": "a"}')
    return await create_access_point(moto, "mcp-tenant-a", BUCKET)


def _params(moto: MotoServer, arn: str, **extra: Any) -> dict[str, Any]:
    return {"aws": access_point_aws(moto), "access_point_arn": arn, "key": KEY, **extra}


async def test_get_through_access_point_is_up(moto: MotoServer) -> None:
    arn = await _setup(moto)
    result = await run_check("s3_access_point", _params(moto, arn))
    assert result.status == "up", result.reason
    assert result.observations["returned_bytes"] == len(b'{"tenant": "a"}')
    assert "read_latency_seconds" in result.observations


async def test_head_through_access_point_is_up(moto: MotoServer) -> None:
    arn = await _setup(moto)
    result = await run_check("s3_access_point", _params(moto, arn, method="head"))
    assert result.status == "up", result.reason
    assert result.details and result.details["content_length"] == len(b'{"tenant": "a"}')


async def test_403_is_reported_as_policy_drift(moto: MotoServer) -> None:
    arn = await _setup(moto)
    s3(moto).put_bucket_policy(Bucket=BUCKET, Policy=deny_reads_policy(BUCKET))
    for method in ("get", "head"):
        result = await run_check("s3_access_point", _params(moto, arn, method=method))
        assert result.status == "down", result.reason
        assert "403" in result.reason and "policy drift" in result.reason


async def test_missing_key_is_down(moto: MotoServer) -> None:
    arn = await _setup(moto)
    params = {**_params(moto, arn), "key": "data/tenant-a/gone.json"}
    result = await run_check("s3_access_point", params)
    assert result.status == "down"
    assert "not found" in result.reason


async def test_missing_access_point_is_down(moto: MotoServer) -> None:
    await _setup(moto)
    arn = "arn:aws:s3:us-east-1:123456789012:accesspoint/never-created"
    result = await run_check("s3_access_point", _params(moto, arn))
    assert result.status == "down", result.reason


async def test_unreachable_endpoint_is_down_not_crash(moto: MotoServer) -> None:
    arn = await _setup(moto)
    aws = {**access_point_aws(moto), "endpoint_url": "http://s3-accesspoint.localhost:9"}
    result = await run_check("s3_access_point", {**_params(moto, arn), "aws": aws})
    assert result.status == "down", result.reason


async def test_not_an_access_point_arn_is_a_config_error(moto: MotoServer) -> None:
    from alivemcp.config import ConfigError

    try:
        await run_check("s3_access_point", _params(moto, "my-bucket"))
    except ConfigError as exc:
        assert "access point ARN" in str(exc.render())
    else:
        raise AssertionError("a bucket name was accepted as an access point ARN")


async def test_cli_reports_up_and_drift(moto: MotoServer, tmp_path: Path) -> None:
    arn = await _setup(moto)
    client = s3(moto)
    client.create_bucket(Bucket="drifted")
    client.put_object(Bucket="drifted", Key=KEY, Body=b"x")
    drifted = await create_access_point(moto, "mcp-tenant-b", "drifted")
    client.put_bucket_policy(Bucket="drifted", Policy=deny_reads_policy("drifted"))
    config = {
        "checks": [
            {"name": "ap-ok", "probe": "s3_access_point", "params": _params(moto, arn)},
            {"name": "ap-drift", "probe": "s3_access_point", "params": _params(moto, drifted)},
        ]
    }
    path = tmp_path / "ap.yaml"
    path.write_text(yaml.safe_dump(config))
    code, rows = check_json(path)
    assert code == 1
    assert rows["ap-ok"]["status"] == "up", rows["ap-ok"]
    assert rows["ap-drift"]["status"] == "down"
    assert "policy drift" in rows["ap-drift"]["reason"]
