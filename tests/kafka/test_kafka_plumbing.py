"""Kafka plumbing: connection settings, MSK IAM tokens, cluster_arn resolution, shared clients."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import aiokafka.client
import boto3
import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidReplicationFactorError,
    KafkaConnectionError,
    NotEnoughReplicasError,
    PolicyViolationError,
    RequestTimedOutError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnrecognizedBrokerVersion,
)
from aiokafka.protocol.metadata import MetadataRequest_v5
from moto.kafka.models import KafkaBackend, kafka_backends
from moto.kafka.responses import KafkaResponse
from pydantic import ValidationError

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.aws import AwsSettings
from alivemcp.plumbing.kafka import (
    BrokerHealth,
    KafkaConnection,
    MskIamTokenProvider,
    RunBudget,
)
from alivemcp.plumbing.kafka_errors import kafka_error, kind_for_code
from alivemcp.probe import Status
from alivemcp.testbed.kafka import KafkaCluster
from alivemcp.testbed.moto import ACCOUNT_ID, FAKE_KEY_ID, FAKE_SECRET, REGION, MotoServer
from tests.support import run_check

# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "exactly one of bootstrap_servers or cluster_arn"),
        (
            {
                "bootstrap_servers": "a:1",
                "cluster_arn": "arn:aws:kafka:us-east-1:123456789012:cluster/x/y",
            },
            "exactly one",
        ),
        ({"bootstrap_servers": " , "}, "bootstrap_servers is empty"),
        ({"bootstrap_servers": "127.0.0.1:notaport"}, "must be host:port"),
        ({"bootstrap_servers": "a:9092,::::"}, "must be host:port"),
        ({"bootstrap_servers": "127.0.0.1:99999"}, "must be host:port"),
        ({"bootstrap_servers": "broker-1"}, "must be host:port"),
        ({"cluster_arn": "arn:aws:s3:::bucket"}, "not an MSK cluster ARN"),
        ({"bootstrap_servers": "a:1", "security_protocol": "SASL_SSL"}, "needs sasl_mechanism"),
        ({"bootstrap_servers": "a:1", "sasl_mechanism": "SCRAM-SHA-512"}, "needs security_proto"),
        (
            {
                "bootstrap_servers": "a:1",
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-256",
                "username": "u",
            },
            "needs username and password",
        ),
        ({"bootstrap_servers": "a:1", "client_cert_file": "/c.pem"}, "go together"),
        ({"bootstrap_servers": "a:1", "security_protocol": "TLS"}, "PLAINTEXT"),
        ({"bootstrap_servers": "a:1", "surprise": 1}, "Extra inputs are not permitted"),
    ],
)
def test_connection_rejects_inconsistent_settings(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaConnection(**params)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({}, "BootstrapBrokerString"),
        ({"security_protocol": "SSL"}, "BootstrapBrokerStringTls"),
        ({"security_protocol": "SSL", "public_access": True}, "BootstrapBrokerStringPublicTls"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"},
            "BootstrapBrokerStringSaslIam",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "username": "u",
                "password": "p",
            },
            "BootstrapBrokerStringSaslScram",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "AWS_MSK_IAM",
                "public_access": True,
            },
            "BootstrapBrokerStringPublicSaslIam",
        ),
    ],
)
def test_broker_string_matches_auth_mode(settings: dict[str, Any], field: str) -> None:
    conn = KafkaConnection(
        cluster_arn=f"arn:aws:kafka:{REGION}:{ACCOUNT_ID}:cluster/c/1", **settings
    )
    assert conn.broker_string_field() == field


def test_password_never_shown() -> None:
    conn = KafkaConnection(
        bootstrap_servers="127.0.0.1:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="u",
        password="hunter2-secret",
    )
    assert "hunter2-secret" not in repr(conn)
    assert "hunter2-secret" not in conn.describe()
    assert "hunter2-secret" not in conn.model_dump_json()
    other = KafkaConnection(**{**conn.model_dump(), "password": "different"})
    assert conn.identity_key() != other.identity_key()  # different clients per credential


def test_run_budget_ends_before_the_check_timeout() -> None:
    now = [100.0]
    budget = RunBudget(RunBudget.for_check(8.0).seconds, clock=lambda: now[0])
    assert budget.seconds == pytest.approx(6.8)  # 85% of the check's timeout
    assert RunBudget.for_check(2.0).seconds == 1.5  # and at least half a second before it
    assert budget.step(10.0, share=0.5) == pytest.approx(3.4)
    assert budget.step(2.0) == 2.0
    assert budget.step(keep=0.8) == pytest.approx(6.0)  # set aside for the steps after it
    now[0] += 6.0
    assert budget.step(keep=2.0) == pytest.approx(0.8)  # too little left to keep: share it
    now[0] += 5.0
    assert budget.remaining() == 0.0 and budget.step(5.0) == 0.0


def test_broker_suspicion_lasts_until_an_answer_or_the_hold() -> None:
    now = [0.0]
    health = BrokerHealth(hold=45.0, clock=lambda: now[0])
    first = health.hung("127.0.0.1:9092", 2, "did not answer Metadata within 2s")
    assert first.describe() == "broker 2 (127.0.0.1:9092) did not answer Metadata within 2s"
    now[0] = 30.0
    # Hung again: held longer, named by what it first stopped answering.
    again = health.hung("127.0.0.1:9092", 2, "did not answer Produce within 3s")
    assert again.reason == "did not answer Metadata within 2s"
    now[0] = 70.0
    assert health.suspect("127.0.0.1:9092") is again  # 45 s after the last time it hung
    now[0] = 76.0
    assert health.suspect("127.0.0.1:9092") is None and health.suspects() == []
    health.hung("127.0.0.1:9093", None, "did not answer ApiVersions within 2s")
    assert [s.name for s in health.suspects()] == ["bootstrap server 127.0.0.1:9093"]
    health.answered("127.0.0.1:9093")
    assert health.suspects() == []


def test_client_metadata_requests_never_auto_create() -> None:
    # The producer/consumer metadata refresh path builds this request class.
    request = aiokafka.client.MetadataRequest(["some-topic"])
    built = request.build(MetadataRequest_v5)
    assert built.allow_auto_topic_creation is False


# -- the error boundary -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError(), ErrorKind.TIMEOUT),
        (RequestTimedOutError(), ErrorKind.TIMEOUT),
        (ssl.SSLCertVerificationError("certificate verify failed"), ErrorKind.TLS),
        (socket.gaierror(-2, "Name or service not known"), ErrorKind.DNS),
        (ConnectionRefusedError(111, "Connect call failed"), ErrorKind.CONNECT),
        (KafkaConnectionError("Unable to bootstrap"), ErrorKind.CONNECT),
        (SaslAuthenticationFailed("bad password"), ErrorKind.AUTH),
        (TopicAuthorizationFailedError(), ErrorKind.PERMISSION),
        (GroupAuthorizationFailedError(), ErrorKind.PERMISSION),
        (UnknownTopicOrPartitionError(), ErrorKind.NOT_FOUND),
        (InvalidReplicationFactorError(), ErrorKind.REJECTED),
        (PolicyViolationError(), ErrorKind.REJECTED),
        (NotEnoughReplicasError(), ErrorKind.UNAVAILABLE),
        (ValueError("unpack requires a buffer of 4 bytes"), ErrorKind.PROTOCOL),
        (UnrecognizedBrokerVersion(), ErrorKind.OTHER),
    ],
)
def test_library_errors_become_probe_errors_of_one_kind(exc: Exception, kind: ErrorKind) -> None:
    err = kafka_error(exc, target="broker 2 (127.0.0.1:9092)", operation="Produce", timeout=3)
    assert isinstance(err, ProbeError) and err.kind is kind
    assert str(err).startswith("Produce on broker 2 (127.0.0.1:9092): ")
    assert type(exc).__name__ in err.detail or kind is ErrorKind.TLS  # TLS says "TLS: ..."
    assert kafka_error(err, target="x", operation="y") is err  # translated once


def test_unclassified_errors_while_connecting_mean_unreachable() -> None:
    err = kafka_error(
        UnrecognizedBrokerVersion(),
        target="127.0.0.1:1",
        operation="admin client start",
        unclassified=ErrorKind.CONNECT,
    )
    assert err.kind is ErrorKind.CONNECT
    # An empty library message still says what did not happen, and within how long.
    assert kafka_error(TimeoutError(), target="t", operation="o", timeout=2).detail == (
        "TimeoutError: no Kafka answer within 2s"
    )


def test_error_codes_in_answers_have_kinds() -> None:
    assert kind_for_code(30) is ErrorKind.PERMISSION  # GroupAuthorizationFailed
    assert kind_for_code(15) is ErrorKind.UNAVAILABLE  # CoordinatorNotAvailable
    assert kind_for_code(7) is ErrorKind.TIMEOUT  # RequestTimedOut
    assert kind_for_code(3) is ErrorKind.NOT_FOUND
    assert kind_for_code(58) is ErrorKind.AUTH


# -- MSK IAM tokens ---------------------------------------------------------------------------


def _decode_token(token: str) -> tuple[str, dict[str, str]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urlsplit(url)
    return parts.netloc, dict(parse_qsl(parts.query, keep_blank_values=True))


def _sigv4_presign_signature(host: str, query: dict[str, str], secret: str) -> str:
    """Recompute a SigV4 query-string signature from its parts (independent of botocore)."""
    signed = {k: v for k, v in query.items() if k not in ("X-Amz-Signature", "User-Agent")}
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(signed.items())
    )
    canonical = "\n".join(
        ["GET", "/", canonical_query, f"host:{host}", "", "host", hashlib.sha256(b"").hexdigest()]
    )
    amz_date = query["X-Amz-Date"]
    _key, date, region, service, terminator = query["X-Amz-Credential"].split("/")
    scope = f"{date}/{region}/{service}/{terminator}"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, terminator):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


async def test_msk_iam_token_is_signed_and_refreshed() -> None:
    plumbing = Plumbing()
    secret = "test-secret-key/abc+def"
    settings = AwsSettings(
        region="eu-west-1",
        access_key_id="AKIATESTKEY",
        secret_access_key=secret,
        session_token="tok-123",
    )
    session = plumbing.aws.session(settings)

    async def credentials() -> Any:
        return await (await session.get_credentials()).get_frozen_credentials()

    now = [time.time()]
    provider = MskIamTokenProvider(credentials, "eu-west-1", clock=lambda: now[0])
    try:
        token = await provider.token()
        host, query = _decode_token(token)
        assert host == "kafka.eu-west-1.amazonaws.com"
        assert query["Action"] == "kafka-cluster:Connect"
        assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
        assert query["X-Amz-Credential"].startswith("AKIATESTKEY/")
        assert query["X-Amz-Credential"].endswith("/eu-west-1/kafka-cluster/aws4_request")
        assert query["X-Amz-Expires"] == "900"
        assert query["X-Amz-Security-Token"] == "tok-123"
        assert query["X-Amz-Signature"] == _sigv4_presign_signature(host, query, secret)
        assert provider.expires_at > now[0] + 600  # 15-minute tokens
        assert provider.generated == 1

        assert await provider.token() == token  # cached while fresh
        assert provider.generated == 1

        now[0] = provider.expires_at - 60  # inside the refresh margin: a new token
        await provider.token()
        assert provider.generated == 2
    finally:
        await plumbing.aclose()


async def test_msk_iam_connection_builds_oauthbearer_options(moto: MotoServer) -> None:
    plumbing = Plumbing()
    conn = KafkaConnection(
        bootstrap_servers="127.0.0.1:1",
        security_protocol="SASL_SSL",
        sasl_mechanism="AWS_MSK_IAM",
        aws=AwsSettings(**moto.aws_params()),
    )
    try:
        options = await plumbing.kafka.cluster(conn).client_options()
        assert options["sasl_mechanism"] == "OAUTHBEARER"
        token = await options["sasl_oauth_token_provider"].token()
        _host, query = _decode_token(token)
        assert query["X-Amz-Credential"].startswith(f"{FAKE_KEY_ID}/")
        assert query["X-Amz-Signature"] == _sigv4_presign_signature(_host, query, FAKE_SECRET)
    finally:
        await plumbing.aclose()


# -- cluster_arn through moto -----------------------------------------------------------------


def _get_bootstrap_brokers_backend(self: KafkaBackend, cluster_arn: str) -> dict[str, str]:
    cluster = self.clusters[cluster_arn]  # KeyError -> moto answers 500, like a missing ARN
    return dict(getattr(cluster, "bootstrap_broker_strings", {}))


def _get_bootstrap_brokers_response(self: KafkaResponse) -> str:
    path = unquote(self.parsed_url.path)
    arn = path.split("/clusters/", 1)[1].removesuffix("/bootstrap-brokers")
    brokers = self.kafka_backend.get_bootstrap_brokers(arn)
    # The wire names are camelCase (bootstrapBrokerStringSaslIam); the SDK's are not.
    return json.dumps({name[0].lower() + name[1:]: value for name, value in brokers.items()})


@pytest.fixture
def msk_moto(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """moto with GetBootstrapBrokers, which it lacks: the in-process server dispatches the
    operation to these methods; the probe's own HTTP call is unchanged."""
    monkeypatch.setattr(
        KafkaBackend, "get_bootstrap_brokers", _get_bootstrap_brokers_backend, raising=False
    )
    monkeypatch.setattr(
        KafkaResponse, "get_bootstrap_brokers", _get_bootstrap_brokers_response, raising=False
    )
    yield moto


def _msk_cluster(moto: MotoServer, brokers: dict[str, str]) -> str:
    client = boto3.client("kafka", **moto.boto3_kwargs())
    arn = client.create_cluster_v2(
        ClusterName="probes",
        Provisioned={
            "BrokerNodeGroupInfo": {"InstanceType": "kafka.m5.large", "ClientSubnets": ["s-1"]},
            "KafkaVersion": "3.6.0",
            "NumberOfBrokerNodes": 1,
        },
    )["ClusterArn"]
    kafka_backends[ACCOUNT_ID][REGION].clusters[arn].bootstrap_broker_strings = brokers
    return arn


async def test_cluster_arn_resolves_to_the_real_broker(
    msk_moto: MotoServer, kafka_single: KafkaCluster
) -> None:
    arn = _msk_cluster(
        msk_moto,
        {
            "BootstrapBrokerString": kafka_single.bootstrap,
            "BootstrapBrokerStringSaslIam": "b-1.iam.example:9098",
        },
    )
    plumbing = Plumbing()
    aws = msk_moto.aws_params()
    try:
        plain = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=kafka_single.bootstrap))
        await plain.create_topic("arn-resolved", partitions=2)
        iam = KafkaConnection(
            cluster_arn=arn, aws=aws, security_protocol="SASL_SSL", sasl_mechanism="AWS_MSK_IAM"
        )
        assert await plumbing.kafka.cluster(iam).bootstrap_servers() == "b-1.iam.example:9098"

        scram = KafkaConnection(
            cluster_arn=arn,
            aws=aws,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username="u",
            password="p",
        )
        with pytest.raises(ProbeError, match="no BootstrapBrokerStringSaslScram") as err:
            await plumbing.kafka.cluster(scram).bootstrap_servers()
        assert "BootstrapBrokerStringSaslIam" in str(err.value)  # says what is offered
        assert err.value.kind is ErrorKind.NOT_FOUND and err.value.target == arn
    finally:
        await plumbing.aclose()

    # End to end: a probe given only the ARN finds the broker and checks it.
    result = await run_check(
        "kafka_partition_health",
        {"cluster": {"cluster_arn": arn, "aws": aws}, "topics": ["arn-resolved"]},
    )
    assert result.status == Status.UP, result.reason
    assert result.observations["partitions"] == 2


async def test_unknown_cluster_arn_is_reported(msk_moto: MotoServer) -> None:
    arn = f"arn:aws:kafka:{REGION}:{ACCOUNT_ID}:cluster/gone/0000"
    result = await run_check(
        "kafka_partition_health", {"cluster": {"cluster_arn": arn, "aws": msk_moto.aws_params()}}
    )
    assert result.status == Status.DOWN
    assert "cannot resolve" in result.reason and arn in result.reason


# -- shared clients ---------------------------------------------------------------------------


async def test_clients_are_shared_and_rebuilt(kafka_single: KafkaCluster) -> None:
    plumbing = Plumbing()
    conn = KafkaConnection(bootstrap_servers=kafka_single.bootstrap)
    try:
        cluster = plumbing.kafka.cluster(conn)
        assert (
            plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=kafka_single.bootstrap))
            is cluster
        )
        admin = await cluster.admin()
        assert await cluster.admin() is admin
        await cluster.metadata()
        await cluster.reset()  # what a connection failure does
        rebuilt = await cluster.admin()
        assert rebuilt is not admin and admin._closed
        assert (await cluster.metadata()).brokers
    finally:
        await plumbing.aclose()


async def test_metadata_does_not_create_missing_topic(kafka_single: KafkaCluster) -> None:
    plumbing = Plumbing()
    try:
        cluster = plumbing.kafka.cluster(KafkaConnection(bootstrap_servers=kafka_single.bootstrap))
        snapshot = await cluster.metadata(["never-created"])
        assert snapshot.topics["never-created"].error_code == 3
        assert "never-created" not in (await cluster.metadata()).topics
    finally:
        await plumbing.aclose()


async def test_unreachable_cluster_is_down_not_a_crash() -> None:
    result = await run_check(
        "kafka_partition_health",
        {"cluster": {"bootstrap_servers": "127.0.0.1:1", "request_timeout": 2}},
        timeout=20,
    )
    assert result.status == Status.DOWN
    assert "cluster unreachable" in result.reason


@pytest.mark.parametrize("probe", ["kafka_partition_health", "kafka_canary"])
async def test_non_kafka_listeners_are_down(probe: str) -> None:
    """A port that accepts and never answers, and one that answers HTTP: down, with a reason,
    within the check's timeout."""
    black_hole = socket.socket()
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(5)
    http = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        for port in (black_hole.getsockname()[1], http.server_port):
            result = await run_check(
                probe,
                {"cluster": {"bootstrap_servers": f"127.0.0.1:{port}", "request_timeout": 2}},
                timeout=20,
            )
            assert result.status == Status.DOWN, result.reason
            assert "no Kafka answer within" in result.reason
            assert f"127.0.0.1:{port}" in result.reason  # what did not answer is named
    finally:
        http.shutdown()
        http.server_close()
        black_hole.close()


async def test_connection_failure_rebuilds_clients(kafka_single: KafkaCluster) -> None:
    plumbing = Plumbing()
    try:
        cluster = plumbing.kafka.cluster(
            KafkaConnection(bootstrap_servers=kafka_single.bootstrap, request_timeout=2)
        )
        before = await cluster.admin()
        with kafka_single.paused(1):
            with pytest.raises(ProbeError, match="no Kafka answer") as raised:
                await cluster.metadata()
            assert "broker 1 (127.0.0.1:" in str(raised.value)  # the hung broker is named
            assert raised.value.kind is ErrorKind.TIMEOUT
            # The broken clients are closed (in the background: closing may wait on the
            # hung broker), not leaked.
            for _ in range(50):
                if before._closed:
                    break
                await asyncio.sleep(0.1)
            assert before._closed
        assert (await cluster.metadata()).brokers  # and rebuilt on the next call
        assert await cluster.admin() is not before
    finally:
        await plumbing.aclose()
