"""``firehose_freshness`` retries: every attempt counted on the wire, and retries that stop by
the check's own timeout with the error they got rather than the engine's "timeout"."""

from __future__ import annotations

from alivemcp.testbed.moto import MotoServer
from tests.support import run_check
from tests.support.failing_aws import failing_endpoint
from tests.support.firehose import create_stream, params


async def test_failing_s3_listing_is_retried_max_attempts_times_in_all(moto: MotoServer) -> None:
    # The stream lives on moto; its bucket's endpoint answers 500 to everything.
    create_stream(moto, "ev")
    async with failing_endpoint(500, "InternalError") as s3_endpoint:
        aws = moto.aws_params(max_attempts=3, endpoint_urls={"s3": s3_endpoint.url})
        result = await run_check("firehose_freshness", params(moto, "ev", aws=aws, canary=False))
    assert result.status == "down", result.reason
    assert "listing error prefixes" in result.reason and "InternalError" in result.reason
    assert "(3 attempts in " in result.reason, result.reason
    assert s3_endpoint.requests == 3


async def test_retries_stop_by_the_check_timeout_with_the_error(moto: MotoServer) -> None:
    # Ten attempts' backoff cannot fit in a 3 s check: the probe stops retrying before the
    # engine's cut and reports the 500, instead of the engine's "timeout after 3s".
    async with failing_endpoint(500, "ServiceUnavailableException") as endpoint:
        aws = moto.aws_params(max_attempts=10, endpoint_url=endpoint.url)
        result = await run_check("firehose_freshness", params(moto, "ev", aws=aws), timeout=3)
    assert result.status == "down", result.reason
    assert "timeout after" not in result.reason, result.reason
    assert "cannot describe delivery stream ev" in result.reason
    assert "ServiceUnavailableException" in result.reason and "out of time" in result.reason
    assert 2 <= endpoint.requests < 10
