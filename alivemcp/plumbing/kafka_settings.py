"""How to reach a Kafka/MSK cluster: the ``cluster:`` block every Kafka probe embeds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from alivemcp.plumbing.aws import AwsSettings

__all__ = ["KafkaConnection", "split_servers"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "AWS_MSK_IAM"]


class KafkaConnection(BaseModel):
    """How to reach one Kafka/MSK cluster: the ``cluster:`` block of every Kafka probe."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str | None = Field(
        None, description="Comma-separated host:port list. Either this or cluster_arn."
    )
    cluster_arn: str | None = Field(
        None,
        description="MSK cluster ARN, resolved with kafka:GetBootstrapBrokers to the broker "
        "string matching the security settings.",
    )
    public_access: bool = Field(
        False, description="With cluster_arn: use MSK's public (internet) broker strings."
    )
    aws: AwsSettings = Field(
        default_factory=AwsSettings,
        description="AWS identity for cluster_arn resolution and MSK IAM authentication.",
    )
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL or SASL_SSL."
    )
    sasl_mechanism: SaslMechanism | None = Field(
        None,
        description="With SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM (OAUTHBEARER "
        "with MSK IAM tokens signed by the aws identity).",
    )
    username: str | None = Field(None, description="SCRAM user name.")
    password: SecretStr | None = Field(None, description="SCRAM password.")
    ca_file: Path | None = Field(
        None, description="PEM CA bundle to verify brokers (default: system trust store)."
    )
    client_cert_file: Path | None = Field(None, description="PEM client certificate (mTLS).")
    client_key_file: Path | None = Field(None, description="PEM client private key (mTLS).")
    client_key_password: SecretStr | None = Field(
        None, description="Password of an encrypted client key."
    )
    check_hostname: bool = Field(True, description="Verify broker host names against certs.")
    client_id: str = Field("alivemcp", description="Client id shown in broker logs and quotas.")
    request_timeout: float = Field(
        10.0, gt=0, le=300, description="Seconds one Kafka request may take before it fails."
    )
    metadata_max_age: float = Field(
        60.0, gt=0, description="Seconds between background metadata refreshes."
    )

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        if (self.bootstrap_servers is None) == (self.cluster_arn is None):
            raise ValueError("set exactly one of bootstrap_servers or cluster_arn")
        if self.bootstrap_servers is not None:
            servers = split_servers(self.bootstrap_servers)
            if not servers:
                raise ValueError("bootstrap_servers is empty")
            bad = [server for server in servers if not _valid_server(server)]
            if bad:
                raise ValueError(f"bootstrap_servers entries must be host:port, not {bad}")
        if self.cluster_arn is not None and not _MSK_ARN.match(self.cluster_arn):
            raise ValueError("cluster_arn is not an MSK cluster ARN (arn:aws:kafka:...)")
        if self.security_protocol == "SASL_SSL" and self.sasl_mechanism is None:
            raise ValueError("security_protocol SASL_SSL needs sasl_mechanism")
        if self.sasl_mechanism is not None and self.security_protocol != "SASL_SSL":
            raise ValueError("sasl_mechanism needs security_protocol SASL_SSL")
        if self.sasl_mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") and (
            not self.username or self.password is None
        ):
            raise ValueError(f"{self.sasl_mechanism} needs username and password")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        return self

    def identity_key(self) -> tuple[Any, ...]:
        """Everything that makes two connections different, secrets included (never shown)."""
        return (
            self.bootstrap_servers,
            self.cluster_arn,
            self.public_access,
            self.aws.identity_key(),
            self.aws.region,
            self.aws.endpoint_url,
            tuple(sorted(self.aws.endpoint_urls.items())),
            self.security_protocol,
            self.sasl_mechanism,
            self.username,
            self.password.get_secret_value() if self.password else None,
            str(self.ca_file),
            str(self.client_cert_file),
            str(self.client_key_file),
            self.client_key_password.get_secret_value() if self.client_key_password else None,
            self.check_hostname,
            self.client_id,
            self.request_timeout,
            self.metadata_max_age,
        )

    def describe(self) -> str:
        """A short, secret-free name for reasons: the ARN or the first bootstrap server."""
        if self.cluster_arn:
            return self.cluster_arn
        servers = split_servers(self.bootstrap_servers or "")
        return servers[0] + (f" (+{len(servers) - 1})" if len(servers) > 1 else "")

    @property
    def region(self) -> str | None:
        if self.cluster_arn:
            return self.cluster_arn.split(":")[3] or self.aws.region
        return self.aws.region

    def broker_string_field(self) -> str:
        """Which GetBootstrapBrokers field carries the brokers for this auth mode."""
        public = "Public" if self.public_access else ""
        if self.security_protocol == "PLAINTEXT":
            if self.public_access:
                raise ValueError("MSK public access has no plaintext brokers")
            return "BootstrapBrokerString"
        if self.security_protocol == "SSL":
            return f"BootstrapBrokerString{public}Tls"
        if self.sasl_mechanism == "AWS_MSK_IAM":
            return f"BootstrapBrokerString{public}SaslIam"
        return f"BootstrapBrokerString{public}SaslScram"


_MSK_ARN = re.compile(r"^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:(serverless-)?cluster/\S+$")


_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _valid_server(server: str) -> bool:
    match = _HOST_PORT.match(server)
    return match is not None and 0 < int(match.group(2)) < 65536


def split_servers(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]
