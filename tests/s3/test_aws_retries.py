"""AWS retries fit inside the probe's limit, count every attempt, and never turn an error into
"no answer": Object Lambda through the stand-in, access points against a failing endpoint.

Requests are counted where they land (the stand-in, the failing endpoint), so
``max_attempts: N`` is checked as N requests on the wire.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from alivemcp.config import ConfigError
from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.aws import AwsClients, AwsSettings, aws_error_summary
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.object_lambda import ObjectLambdaStandIn, TransformMode
from tests.support import run_check
from tests.support.failing_aws import closed_port, failing_endpoint
from tests.support.s3_access_points import BACKING, LOOPBACK, object_lambda_aws

KEY = "canary/object-lambda.txt"
ACCESS_POINT_ARN = "arn:aws:s3:us-east-1:123456789012:accesspoint/mcp-tenant-a"


def _olap_params(
    moto: MotoServer,
    olap: ObjectLambdaStandIn,
    name: str,
    mode: TransformMode,
    *,
    max_attempts: int,
    delay: float = 0.0,
    fail_first: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    arn = olap.add_access_point(name, BACKING, mode, delay=delay, fail_first=fail_first)
    return {
        "aws": object_lambda_aws(moto, olap) | {"max_attempts": max_attempts},
        "access_point_arn": arn,
        "key": KEY,
        "seed": {"bucket": BACKING, "aws": moto.aws_params()},
        **extra,
    }


async def test_fast_500_with_retries_is_reported_as_the_error_in_every_run(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    # Before the fix (botocore retries with its own backoff, max_attempts + 1 attempts) this
    # read "did not answer within 5s" in about one run in four.
    params = _olap_params(moto, olap, "broken", TransformMode.FAIL, max_attempts=3)
    for run in range(5):
        before = olap.requests_to("broken")
        result = await run_check("s3_object_lambda", params)
        assert result.status == "down", (run, result.reason)
        assert "did not answer" not in result.reason, (run, result.reason)
        assert "TransformationFailed" in result.reason and "500" in result.reason
        assert "(3 attempts in " in result.reason, result.reason
        assert olap.requests_to("broken") - before == 3


async def test_max_attempts_one_sends_exactly_one_request(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    params = _olap_params(moto, olap, "broken", TransformMode.FAIL, max_attempts=1)
    result = await run_check("s3_object_lambda", params)
    assert result.status == "down"
    assert "TransformationFailed" in result.reason and "(1 attempt in " in result.reason
    assert olap.requests_to("broken") == 1


async def test_a_4xx_answer_is_not_retried(moto: MotoServer, olap: ObjectLambdaStandIn) -> None:
    params = _olap_params(moto, olap, "pii-clean", TransformMode.REDACT, max_attempts=3)
    del params["seed"]  # the document is missing: 404 NoSuchKey, which retrying cannot fix
    result = await run_check("s3_object_lambda", params)
    assert result.status == "down" and "NoSuchKey" in result.reason
    assert olap.requests_to("pii-clean") == 1


async def test_a_500_then_a_404_reports_the_404_as_the_retry_it_was(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    params = _olap_params(
        moto, olap, "pii-clean", TransformMode.REDACT, max_attempts=3, fail_first=1
    )
    del params["seed"]
    result = await run_check("s3_object_lambda", params)
    assert result.status == "down" and "NoSuchKey" in result.reason
    assert "(2 attempts in " in result.reason, result.reason
    assert olap.requests_to("pii-clean") == 2


async def test_a_500_then_silence_reports_the_500_not_a_timeout(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    # The retry is in flight when the limit runs out: the error already received wins.
    params = _olap_params(
        moto, olap, "flaky", TransformMode.SLOW, max_attempts=3, delay=5.0, fail_first=1, limit="2s"
    )
    result = await run_check("s3_object_lambda", params, timeout=10)
    assert result.status == "down"
    assert "did not answer" not in result.reason, result.reason
    assert "TransformationFailed" in result.reason
    assert "(2 attempts in " in result.reason and "out of time" in result.reason
    assert olap.requests_to("flaky") == 2


async def test_a_transformer_that_never_answers_is_still_a_timeout(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    params = _olap_params(
        moto, olap, "sluggish", TransformMode.SLOW, max_attempts=3, delay=5.0, limit="2s"
    )
    result = await run_check("s3_object_lambda", params, timeout=10)
    assert result.status == "down"
    assert "did not answer within 2s" in result.reason, result.reason
    assert olap.requests_to("sluggish") == 1  # nothing came back, so nothing was retried


def _access_point_params(endpoint_url: str, max_attempts: int, **extra: Any) -> dict[str, Any]:
    aws = {
        "region": "us-east-1",
        "endpoint_url": endpoint_url,
        "resolve_all_to": LOOPBACK,
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "max_attempts": max_attempts,
    }
    return {"aws": aws, "access_point_arn": ACCESS_POINT_ARN, "key": "k.json", **extra}


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_access_point_500_makes_exactly_max_attempts_requests(max_attempts: int) -> None:
    async with failing_endpoint(500, "InternalError") as endpoint:
        params = _access_point_params(endpoint.access_point_url, max_attempts)
        result = await run_check("s3_access_point", params)
    assert result.status == "down"
    assert "InternalError" in result.reason and "no answer" not in result.reason
    noun = "attempt" if max_attempts == 1 else "attempts"
    assert f"({max_attempts} {noun} in " in result.reason, result.reason
    assert endpoint.requests == max_attempts


async def test_access_point_throttling_is_degraded_after_its_retries() -> None:
    async with failing_endpoint(503, "SlowDown") as endpoint:
        params = _access_point_params(endpoint.access_point_url, 2, limit="3s")
        result = await run_check("s3_access_point", params)
    assert result.status == "degraded", result.reason
    assert "SlowDown" in result.reason and "(2 attempts in " in result.reason
    assert endpoint.requests == 2


async def test_access_point_refused_connection_is_named_with_its_attempts() -> None:
    params = _access_point_params(f"http://s3-accesspoint.localhost:{closed_port()}", 3)
    result = await run_check("s3_access_point", params)
    assert result.status == "down"
    assert "cannot reach the access point" in result.reason, result.reason
    assert "(3 attempts in " in result.reason


async def test_retries_that_outlast_the_limit_stop_with_the_error() -> None:
    # Ten attempts' backoff (0.05 s doubling, jittered, over 3 s in all) cannot fit in 2 s:
    # the probe stops retrying before the limit and reports the 500 it got.
    async with failing_endpoint(500, "InternalError") as endpoint:
        params = _access_point_params(endpoint.access_point_url, 10, limit="2s")
        result = await run_check("s3_access_point", params)
    assert result.status == "down"
    assert "InternalError" in result.reason and "out of time" in result.reason, result.reason
    assert 2 <= endpoint.requests < 10
    took = re.search(
        r"attempts in (\d+) ms; out of time|attempts in ([\d.]+)s; out of time", result.reason
    )
    assert took is not None, result.reason
    seconds = int(took[1]) / 1000 if took[1] else float(took[2])
    # It stopped by the limit (all ten attempts' backoff would take over 8 s); the margin is
    # for a loaded machine, where the cut of the attempt in flight lands a little late.
    assert seconds < 2.5, result.reason


@pytest.mark.parametrize("value", [0, 11, -1])
async def test_max_attempts_out_of_range_is_a_config_error(value: int) -> None:
    with pytest.raises(ConfigError, match="max_attempts"):
        await run_check("s3_access_point", _access_point_params("http://localhost:1", value))


async def test_paginator_pages_are_retried_like_calls() -> None:
    clients = AwsClients()
    try:
        async with failing_endpoint(500, "InternalError") as endpoint:
            settings = AwsSettings.model_validate(
                _access_point_params(endpoint.url, 2)["aws"] | {"resolve_all_to": None}
            )
            s3_client = await clients.client("s3", settings)
            with pytest.raises(ProbeError) as raised:
                async for _page in s3_client.get_paginator("list_objects_v2").paginate(
                    Bucket="any"
                ):
                    pass
        assert endpoint.requests == 2
        assert raised.value.kind is ErrorKind.UNAVAILABLE
        assert raised.value.operation == "ListObjectsV2"
        assert raised.value.target == "s3://any"
        assert "(2 attempts in " in aws_error_summary(raised.value)
    finally:
        await clients.aclose()
