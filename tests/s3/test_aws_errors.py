"""The AWS error boundary: botocore's exceptions leave plumbing only as ``ProbeError``, with the
kind that decides the verdict, the API operation and the target, over real HTTP (moto, and
loopback servers that answer like a failing AWS endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.aws import AwsClients, AwsSettings, aws_error_summary
from alivemcp.testbed.moto import MotoServer
from alivemcp.verdict import status_for
from tests.support.failing_aws import closed_port, failing_endpoint
from tests.support.s3_replication import s3_client, without_aws_credentials

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@asynccontextmanager
async def aws_clients() -> AsyncIterator[AwsClients]:
    clients = AwsClients()
    try:
        yield clients
    finally:
        await clients.aclose()


def _settings(endpoint_url: str, **extra: Any) -> AwsSettings:
    return AwsSettings.model_validate(
        {
            "region": "us-east-1",
            "endpoint_url": endpoint_url,
            "access_key_id": "testing",
            "secret_access_key": SECRET,
            "max_attempts": 1,
            **extra,
        }
    )


async def test_missing_bucket_is_not_found_naming_the_bucket(moto: MotoServer) -> None:
    async with aws_clients() as clients:
        s3 = await clients.client("s3", _settings(moto.url))
        with pytest.raises(ProbeError) as raised:
            await s3.put_object(Bucket="no-such-bucket", Key="canary.json", Body=b"{}")
    err = raised.value
    assert err.kind is ErrorKind.NOT_FOUND
    assert err.operation == "PutObject"
    assert err.target == "s3://no-such-bucket/canary.json"
    assert err.code == "NoSuchBucket"
    assert str(err).startswith("PutObject on s3://no-such-bucket/canary.json: NoSuchBucket ")
    assert "(HTTP 404)" in err.detail


async def test_missing_key_on_head_is_not_found(moto: MotoServer) -> None:
    s3_client(moto).create_bucket(Bucket="present")
    async with aws_clients() as clients:
        s3 = await clients.client("s3", _settings(moto.url))
        with pytest.raises(ProbeError) as raised:
            await s3.head_object(Bucket="present", Key="absent")
    assert raised.value.kind is ErrorKind.NOT_FOUND
    assert raised.value.target == "s3://present/absent"


async def test_missing_stream_and_queue_name_their_target(moto: MotoServer) -> None:
    async with aws_clients() as clients:
        firehose = await clients.client("firehose", _settings(moto.url))
        with pytest.raises(ProbeError) as raised:
            await firehose.describe_delivery_stream(DeliveryStreamName="gone-stream")
        assert raised.value.kind is ErrorKind.NOT_FOUND
        assert raised.value.target == "delivery stream gone-stream"
        assert raised.value.operation == "DescribeDeliveryStream"

        sqs = await clients.client("sqs", _settings(moto.url))
        queue_url = f"{moto.url}/123456789012/gone-queue"
        with pytest.raises(ProbeError) as raised:
            await sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)
        # SQS says "gone" with a 400 and its own code: still not found, not a rejected request.
        assert raised.value.kind is ErrorKind.NOT_FOUND
        assert raised.value.target == "queue gone-queue"


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (403, "InvalidAccessKeyId", ErrorKind.AUTH),
        (403, "SignatureDoesNotMatch", ErrorKind.AUTH),
        (400, "ExpiredToken", ErrorKind.AUTH),
        (403, "AccessDenied", ErrorKind.PERMISSION),
        (400, "ThrottlingException", ErrorKind.THROTTLED),
        (503, "SlowDown", ErrorKind.THROTTLED),
        (500, "InternalError", ErrorKind.UNAVAILABLE),
        (400, "InvalidArgument", ErrorKind.REJECTED),
    ],
)
async def test_answers_are_classified_by_code_and_status(
    status: int, code: str, kind: ErrorKind
) -> None:
    async with failing_endpoint(status, code) as endpoint, aws_clients() as clients:
        s3 = await clients.client("s3", _settings(endpoint.url))
        with pytest.raises(ProbeError) as raised:
            await s3.get_object(Bucket="data", Key="k")
    assert raised.value.kind is kind
    assert raised.value.code == code
    assert code in raised.value.detail and f"(HTTP {status})" in raised.value.detail
    if kind in (ErrorKind.THROTTLED, ErrorKind.UNAVAILABLE):  # retryable: attempts are named
        assert "(1 attempt in " in raised.value.detail


async def test_bad_credentials_are_the_probers_own_problem_and_stay_secret() -> None:
    async with failing_endpoint(403, "InvalidAccessKeyId") as endpoint, aws_clients() as clients:
        s3 = await clients.client("s3", _settings(endpoint.url))
        with pytest.raises(ProbeError) as raised:
            await s3.head_bucket(Bucket="data")
    err = raised.value
    # HEAD answers carry no body: the kind comes from the status alone.
    assert err.kind is ErrorKind.PERMISSION
    assert status_for(err.kind).value == "unknown"
    for text in (str(err), repr(err), err.detail, aws_error_summary(err)):
        assert SECRET not in text and "testing" not in text


async def test_no_credentials_at_all_is_auth(
    moto: MotoServer, monkeypatch: Any, tmp_path: Path
) -> None:
    without_aws_credentials(monkeypatch, tmp_path)
    settings = AwsSettings.model_validate(
        {"region": "us-east-1", "endpoint_url": moto.url, "max_attempts": 1}
    )
    async with aws_clients() as clients:
        s3 = await clients.client("s3", settings)
        with pytest.raises(ProbeError) as raised:
            await s3.list_objects_v2(Bucket="any")
    assert raised.value.kind is ErrorKind.AUTH
    assert raised.value.target == "s3://any"
    assert "NoCredentialsError" in raised.value.detail


async def test_unknown_profile_fails_at_client_creation_as_auth(
    monkeypatch: Any, tmp_path: Path
) -> None:
    without_aws_credentials(monkeypatch, tmp_path)
    settings = AwsSettings.model_validate({"region": "us-east-1", "profile": "nobody"})
    async with aws_clients() as clients:
        with pytest.raises(ProbeError) as raised:
            await clients.client("s3", settings)
    assert raised.value.kind is ErrorKind.AUTH
    assert raised.value.operation == "create s3 client"


async def test_refused_connection_is_connect_with_every_attempt() -> None:
    settings = _settings(f"http://127.0.0.1:{closed_port()}", max_attempts=2)
    async with aws_clients() as clients:
        firehose = await clients.client("firehose", settings)
        with pytest.raises(ProbeError) as raised:
            await firehose.describe_delivery_stream(DeliveryStreamName="events")
    assert raised.value.kind is ErrorKind.CONNECT
    assert raised.value.target == "delivery stream events"
    assert "(2 attempts in " in raised.value.detail


async def test_silence_past_the_read_timeout_is_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aws_clients() as clients:
            s3 = await clients.client("s3", _settings(f"http://127.0.0.1:{port}", read_timeout=0.3))
            with pytest.raises(ProbeError) as raised:
                await s3.get_object(Bucket="data", Key="k")
    finally:
        server.close()
    assert raised.value.kind is ErrorKind.TIMEOUT


async def test_a_body_cut_short_raises_probe_error_on_read() -> None:
    # The headers promise 100 bytes; the server sends 10 and hangs up.
    async def cut_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n0123456789"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(cut_short, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aws_clients() as clients:
            s3 = await clients.client("s3", _settings(f"http://127.0.0.1:{port}"))
            response = await s3.get_object(Bucket="data", Key="big.bin")
            with pytest.raises(ProbeError) as raised:
                while await response["Body"].read(4096):
                    pass
    finally:
        server.close()
    assert raised.value.operation == "GetObject"
    assert raised.value.target == "s3://data/big.bin"
    assert raised.value.kind in (ErrorKind.CONNECT, ErrorKind.PROTOCOL)
