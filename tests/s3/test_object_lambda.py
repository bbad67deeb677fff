"""``s3_object_lambda`` through the local Object Lambda stand-in, originals on moto over HTTP.

The probe's aiobotocore call is unchanged: GetObject with the Object Lambda ARN, resolved to
``<name>-<account>.<endpoint host>`` and signed for ``s3-object-lambda``; the stand-in checks
that signing scope and reads the original through a presigned URL from moto.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.object_lambda import ObjectLambdaStandIn, TransformMode
from probes.s3_object_lambda import DEFAULT_PII_SAMPLES
from tests.support import check_json, run_check
from tests.support.s3_access_points import BACKING, object_lambda_aws, s3

KEY = "canary/object-lambda.txt"
MARKERS = ["[SSN REDACTED]", "[EMAIL REDACTED]", "[PHONE REDACTED]", "[CARD REDACTED]"]


def _params(
    moto: MotoServer, olap: ObjectLambdaStandIn, name: str, mode: TransformMode, **extra: Any
) -> dict[str, Any]:
    arn = olap.add_access_point(name, BACKING, mode, delay=extra.pop("delay", 0.0))
    return {
        "aws": object_lambda_aws(moto, olap),
        "access_point_arn": arn,
        "key": KEY,
        "seed": {"bucket": BACKING, "aws": moto.aws_params()},
        "expected_markers": MARKERS,
        **extra,
    }


async def test_correct_redactor_is_up_and_canary_is_seeded_and_tagged(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    result = await run_check("s3_object_lambda", _params(moto, olap, "pii-clean", "redact"))
    assert result.status == "up", result.reason
    assert result.observations["returned_bytes"] > 0
    assert "transform_latency_seconds" in result.observations
    raw = s3(moto).get_object(Bucket=BACKING, Key=KEY)["Body"].read().decode()
    assert all(value in raw for value in DEFAULT_PII_SAMPLES.values())
    tags = s3(moto).get_object_tagging(Bucket=BACKING, Key=KEY)["TagSet"]
    assert {"Key": "alivemcp-canary", "Value": "true"} in tags
    assert olap.requests >= 1


async def test_fail_open_transformer_is_down_loudly(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    result = await run_check("s3_object_lambda", _params(moto, olap, "leaky", "fail_open"))
    assert result.status == "down"
    assert result.reason.startswith("FAILED OPEN")
    assert result.details and set(result.details["leaked_samples"]) == set(DEFAULT_PII_SAMPLES)
    # The reason names which kinds leaked, never the values themselves.
    assert not any(value in result.reason for value in DEFAULT_PII_SAMPLES.values())


async def test_failing_transformer_500_is_down(moto: MotoServer, olap: ObjectLambdaStandIn) -> None:
    result = await run_check("s3_object_lambda", _params(moto, olap, "broken", "fail"))
    assert result.status == "down"
    assert "TransformationFailed" in result.reason and "500" in result.reason


async def test_slow_transformer_is_down_at_the_limit(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    params = _params(moto, olap, "sluggish", "slow", delay=3.0, limit="1s")
    result = await run_check("s3_object_lambda", params, timeout=10)
    assert result.status == "down"
    assert "within 1s" in result.reason


async def test_missing_markers_is_degraded(moto: MotoServer, olap: ObjectLambdaStandIn) -> None:
    result = await run_check("s3_object_lambda", _params(moto, olap, "masker", "mask"))
    assert result.status == "degraded", result.reason
    assert result.details and result.details["missing_markers"] == MARKERS


async def test_large_object_redirect_is_followed(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    result = await run_check("s3_object_lambda", _params(moto, olap, "big", "redirect"))
    assert result.status == "up", result.reason
    written_back = s3(moto).list_objects_v2(Bucket=BACKING, Prefix="transformed/")
    assert written_back.get("KeyCount") == 1  # the 307 path ran: the result was written back


async def test_redirect_to_raw_object_is_still_caught(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    # The stand-in redirects with redacted bytes; flip to fail-open after one healthy run,
    # on the same probe instance, to prove the verdict follows the transformer's behaviour.
    params = _params(moto, olap, "flip", "redirect")
    assert (await run_check("s3_object_lambda", params)).status == "up"
    olap.set_mode("flip", "fail_open")
    assert (await run_check("s3_object_lambda", params)).status == "down"


async def test_missing_document_without_seed_is_down(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    params = _params(moto, olap, "pii-clean", "redact")
    del params["seed"]
    result = await run_check("s3_object_lambda", params)
    assert result.status == "down"
    assert "NoSuchKey" in result.reason


async def test_unknown_access_point_is_down(moto: MotoServer, olap: ObjectLambdaStandIn) -> None:
    params = _params(moto, olap, "pii-clean", "redact")
    params["access_point_arn"] = ObjectLambdaStandIn.arn("never-created")
    result = await run_check("s3_object_lambda", params)
    assert result.status == "down"
    assert "NoSuchAccessPoint" in result.reason


async def test_seed_failure_is_unknown(moto: MotoServer, olap: ObjectLambdaStandIn) -> None:
    params = _params(moto, olap, "pii-clean", "redact")
    params["seed"] = {"bucket": "no-such-bucket", "aws": moto.aws_params()}
    result = await run_check("s3_object_lambda", params)
    assert result.status == "unknown"
    assert "no-such-bucket" in result.reason


async def test_cli_reports_each_verdict(
    moto: MotoServer, olap: ObjectLambdaStandIn, tmp_path: Path
) -> None:
    # A canary key per check: the four run at once, and moto's server can answer 500 to
    # concurrent PUTs of one key (seen under a loaded test run).
    checks = [
        {
            "name": name,
            "probe": "s3_object_lambda",
            "params": _params(moto, olap, name, mode, key=f"canary/{name}.txt"),
        }
        for name, mode in (
            ("ok", "redact"),
            ("leaky", "fail_open"),
            ("broken", "fail"),
            ("masker", "mask"),
        )
    ]
    path = tmp_path / "olap.yaml"
    path.write_text(yaml.safe_dump({"checks": checks}))
    code, rows = check_json(path)
    assert code == 1
    assert rows["ok"]["status"] == "up", rows["ok"]
    assert rows["leaky"]["status"] == "down"
    assert "FAILED OPEN" in rows["leaky"]["reason"]
    assert rows["broken"]["status"] == "down"
    assert rows["masker"]["status"] == "degraded"


async def test_stand_in_refuses_requests_not_signed_for_object_lambda(
    moto: MotoServer, olap: ObjectLambdaStandIn
) -> None:
    # The up verdicts above therefore prove the probe's call is signed for s3-object-lambda.
    import aiohttp

    olap.add_access_point("pii-clean", BACKING, "redact")
    url = f"http://127.0.0.1:{olap.port}/{KEY}"
    host = f"pii-clean-123456789012.s3-object-lambda.localhost:{olap.port}"
    plain_s3 = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, x"
    async with aiohttp.ClientSession() as http:
        for headers in ({"Host": host}, {"Host": host, "Authorization": plain_s3}):
            async with http.get(url, headers=headers) as resp:
                assert resp.status == 403
                assert "SignatureDoesNotMatch" in await resp.text()
