"""``firehose_freshness`` against moto over HTTP: every documented verdict."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import yaml

from alivemcp.testbed.moto import MotoServer
from probes.firehose_freshness import inspect_delivery, scan_delivery
from tests.support import check_json, run_check
from tests.support.firehose import (
    BUCKET,
    base64_twice,
    clients,
    create_stream,
    drop_deliveries,
    gzipped,
    params,
    put_metric,
    rewrite_deliveries,
    set_stream_status,
    stepped_check,
    without_newline,
    write_error_objects,
)

FRESHNESS = "DeliveryToS3.DataFreshness"
SUCCESS = "DeliveryToS3.Success"


async def test_fresh_stream_is_up_with_canary_delivered(moto: MotoServer) -> None:
    create_stream(moto, "ev")
    put_metric(moto, "ev", FRESHNESS, 20)
    put_metric(moto, "ev", SUCCESS, 1)
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "up", result.reason
    assert result.observations["data_freshness_seconds"] == 20
    assert result.observations["delivery_success_ratio"] == 1
    assert result.observations["canary_freshness_seconds"] >= 0
    assert result.details and result.details["canary"]["status"] == "up"
    assert "canary delivered" in result.reason


async def test_stale_metric_is_degraded_then_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=0)
    put_metric(moto, "ev", FRESHNESS, 200)  # over buffer 0 + margin 60
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "degraded", result.reason
    assert "DataFreshness 200s" in result.reason
    put_metric(moto, "ev", FRESHNESS, 1200)  # the seed's 900 s alarm
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "down", result.reason
    assert "over the 900s limit" in result.reason


async def test_buffer_interval_sets_the_default_threshold(moto: MotoServer) -> None:
    create_stream(moto, "slow-buffer", interval=300)
    put_metric(moto, "slow-buffer", FRESHNESS, 200)  # normal for a 300 s buffer
    result = await run_check("firehose_freshness", params(moto, "slow-buffer", canary=False))
    assert result.status == "up", result.reason
    assert result.details and result.details["degraded_above_seconds"] == 360


async def test_failed_s3_deliveries_are_degraded(moto: MotoServer) -> None:
    create_stream(moto, "ev")
    put_metric(moto, "ev", SUCCESS, 0.5)
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "degraded", result.reason
    assert "Success 0.50" in result.reason


async def test_canary_across_runs_then_missing_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60)  # longer than the inline wait: verified later
    check = params(moto, "ev", degraded_above="1s", down_above="2s")
    async with stepped_check("firehose_freshness", check) as handle:
        first = await handle.run()
        assert first.status == "up", first.reason
        assert first.details and "canary_pending" in first.details
        assert drop_deliveries(moto) == 1  # the record never reaches the destination
        await asyncio.sleep(2.5)  # why: the canary's age must pass down_above (2 s)
        missing = await handle.run()
        assert missing.status == "down", missing.reason
        assert "not found under s3://mcp-events/tool-events/" in missing.reason


async def test_canary_found_in_a_later_run(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60)
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        first = await handle.run()
        assert first.details and "canary_pending" in first.details
        second = await handle.run()
        assert second.status == "up", second.reason
        assert second.details and second.details["canary"]["status"] == "up"
        assert "canary_freshness_seconds" in second.observations


async def test_canary_delivered_as_base64_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60)
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        await handle.run()
        assert rewrite_deliveries(moto, base64_twice) == 1
        result = await handle.run()
        assert result.status == "down", result.reason
        assert "base64" in result.reason and "transformation trap" in result.reason
        # A garbled verdict holds until a newer canary resolves: this one arrives intact.
        again = await handle.run()
        assert again.status == "up", again.reason


async def test_canary_run_together_without_newline_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60)
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        await handle.run()
        rewrite_deliveries(moto, without_newline)
        result = await handle.run()
        assert result.status == "down", result.reason
        assert "run together" in result.reason and "newline" in result.reason


async def test_canary_missing_trailing_newline_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60)
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        await handle.run()
        rewrite_deliveries(moto, lambda body: body.rstrip(b"\n"))
        result = await handle.run()
        assert result.status == "down", result.reason
        assert "trailing newline" in result.reason


async def test_gzip_deliveries_are_decompressed(moto: MotoServer) -> None:
    create_stream(moto, "ev", interval=60, compression="GZIP")
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        await handle.run()
        rewrite_deliveries(moto, gzipped)  # what Firehose does with CompressionFormat GZIP
        result = await handle.run()
        assert result.status == "up", result.reason
        assert result.details and result.details["canary"]["status"] == "up"


async def test_new_error_objects_are_down_once(moto: MotoServer) -> None:
    create_stream(moto, "ev")
    async with stepped_check("firehose_freshness", params(moto, "ev")) as handle:
        assert (await handle.run()).status == "up"
        keys = write_error_objects(moto, 3)
        result = await handle.run()
        assert result.status == "down", result.reason
        assert "3 new object(s) under the error prefix (processing-failed)" in result.reason
        assert result.details and result.details["new_error_objects"]["count"] == 3
        assert set(result.details["new_error_objects"]["sample_keys"]) == set(keys)
        assert result.observations["new_error_objects"] == 3
        again = await handle.run()
        assert again.status == "up", again.reason  # seen ones do not re-alert
        write_error_objects(moto, 1, kind="format-conversion-failed")
        newer = await handle.run()
        assert newer.status == "down" and "1 new object(s)" in newer.reason


async def test_old_error_objects_do_not_alert(moto: MotoServer) -> None:
    create_stream(moto, "ev")
    write_error_objects(moto, 2)
    # why: the objects' age must pass error_lookback (1 s); S3 LastModified has whole seconds
    await asyncio.sleep(2.2)
    result = await run_check("firehose_freshness", params(moto, "ev", error_lookback="1s"))
    assert result.status == "up", result.reason


async def test_stream_not_active_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev")
    set_stream_status("ev", "CREATING")
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "down"
    assert "CREATING, not ACTIVE" in result.reason


async def test_missing_stream_is_down(moto: MotoServer) -> None:
    result = await run_check("firehose_freshness", params(moto, "never-created"))
    assert result.status == "down"
    assert "not found" in result.reason


async def test_canary_put_failure_is_down(moto: MotoServer) -> None:
    create_stream(moto, "ev", bucket="gone")
    clients(moto)[0].delete_bucket(Bucket="gone")  # moto's delivery then fails the PutRecord
    result = await run_check("firehose_freshness", params(moto, "ev"))
    assert result.status == "down", result.reason


def test_inspect_delivery_verdicts() -> None:
    rid = "0123456789abcdef0123456789abcdef"
    line = b'{"alivemcp_canary":"%s","sent_at":"x"}\n' % rid.encode()
    assert inspect_delivery(b'{"a":1}\n' + line, rid).problem is None
    assert "base64" in (inspect_delivery(base64_twice(line), rid).problem or "")
    assert "run together" in (inspect_delivery(without_newline(line), rid).problem or "")
    assert not inspect_delivery(b"nothing here", rid).found
    assert "not valid JSON" in (inspect_delivery(b"xx " + line, rid).problem or "")


async def test_cli_reports_the_documented_verdicts(moto: MotoServer, tmp_path: Path) -> None:
    for name in ("fresh", "stale", "erroring", "creating"):
        create_stream(moto, name)
    put_metric(moto, "fresh", FRESHNESS, 10)
    put_metric(moto, "stale", FRESHNESS, 1500)
    put_metric(moto, "erroring", FRESHNESS, 10)
    write_error_objects(moto, 2)
    set_stream_status("creating", "CREATING")
    checks = [
        {
            "name": name,
            "probe": "firehose_freshness",
            "params": params(moto, name, **({"error_prefixes": []} if name != "erroring" else {})),
        }
        for name in ("fresh", "stale", "erroring", "creating")
    ]
    path = tmp_path / "firehose.yaml"
    path.write_text(yaml.safe_dump({"checks": checks}))
    code, rows = check_json(path)
    assert code == 1
    assert rows["fresh"]["status"] == "up", rows["fresh"]
    assert rows["fresh"]["details"]["canary"]["status"] == "up"
    assert rows["stale"]["status"] == "down" and "DataFreshness 1500s" in rows["stale"]["reason"]
    assert rows["erroring"]["status"] == "down"
    assert "2 new object(s)" in rows["erroring"]["reason"]
    assert rows["creating"]["status"] == "down" and "not ACTIVE" in rows["creating"]["reason"]
    assert BUCKET  # all four deliver into the shared demo-style bucket


async def _chunked(body: bytes, size: int = 100_003) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_scan_finds_the_canary_deep_in_large_objects() -> None:
    rid = "fedcba9876543210fedcba9876543210"
    canary = b'{"alivemcp_canary":"%s","sent_at":"x"}\n' % rid.encode()
    other = b'{"tool":"summarise","tenant":"a","ok":true,"pad":"%s"}\n' % (b"x" * 200)
    body = other * 20_000 + canary + other * 10  # ~5 MB, canary near the end
    for delivered in (body, gzipped(body), gzipped(body[:1_000_000]) + gzipped(body[1_000_000:])):
        check = await scan_delivery(_chunked(delivered), rid)
        assert check.found and check.problem is None
    assert not (await scan_delivery(_chunked(body), rid, max_bytes=1_000_000)).found
    garbled = base64_twice(other * 20_000 + canary)  # one base64 run, cut across chunks
    check = await scan_delivery(_chunked(garbled), rid)
    assert check.found and "base64" in (check.problem or "")
    run_together = (other.rstrip(b"\n") * 30_000) + canary.rstrip(b"\n")
    check = await scan_delivery(_chunked(run_together), rid)
    assert check.found and "run together" in (check.problem or "")


async def test_scan_flags_undecodable_bytes() -> None:
    check = await scan_delivery(_chunked(bytes(range(256)) * 1000), "0" * 32)
    assert not check.found and check.binary


def test_error_prefixes_never_cover_the_whole_bucket() -> None:
    from probes.firehose_freshness import DEFAULT_ERROR_PREFIXES, _error_listing_prefixes

    assert _error_listing_prefixes("") == list(DEFAULT_ERROR_PREFIXES)
    assert _error_listing_prefixes("!{timestamp:yyyy}/") == list(DEFAULT_ERROR_PREFIXES)
    typed = _error_listing_prefixes("!{firehose:error-output-type}/!{timestamp:yyyy}/")
    assert typed[0] == "processing-failed/" and "" not in typed
    assert _error_listing_prefixes("errors/!{firehose:error-output-type}/x")[1] == (
        "errors/format-conversion-failed/x"
    )
    assert _error_listing_prefixes("errors/") == ["errors/"]
