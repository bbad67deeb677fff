"""Set-up for the ``s3_replication_lag`` tests: versioned bucket pairs on moto, the replicator
stand-in copying between them, and the proxy that reports ``ReplicationStatus``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.s3_replicator import (
    ReplicationStatusProxy,
    ReplicatorMode,
    S3Replicator,
    create_replicated_buckets,
)

PREFIX = "alivemcp-canary/replication/"


def s3_client(moto: MotoServer) -> Any:
    """A blocking client for set-up (one attempt: moto's 500s must not be retried)."""
    one_attempt = Config(retries={"total_max_attempts": 1})
    return boto3.client("s3", config=one_attempt, **moto.boto3_kwargs())


@dataclass
class ReplicationStandIn:
    source: str
    destination: str
    replicator: S3Replicator
    proxy: ReplicationStatusProxy
    moto: MotoServer

    def params(self, **extra: Any) -> dict[str, Any]:
        """Probe params: the source through the status proxy, the destination straight to
        moto (its own settings block, as a DR region would have)."""
        return {
            "source_bucket": self.source,
            "destination_bucket": self.destination,
            "source_aws": self.moto.aws_params(endpoint_url=self.proxy.url),
            "destination_aws": self.moto.aws_params(),
            "prefix": PREFIX,
            "sla": 3,
            "grace": 2,
            "poll_initial": 0.1,
            "poll_max": 0.5,
            "source_status_every": 0.3,
            **extra,
        }

    def leftovers(self) -> dict[str, list[str]]:
        client = s3_client(self.moto)
        found: dict[str, list[str]] = {}
        for bucket in (self.source, self.destination):
            listing = client.list_object_versions(Bucket=bucket, Prefix=PREFIX)
            found[bucket] = [
                item["Key"]
                for group in ("Versions", "DeleteMarkers")
                for item in listing.get(group, [])
            ]
        return found


@contextmanager
def replication_stand_in(
    moto: MotoServer,
    *,
    source: str = "mcp-data-primary",
    destination: str = "mcp-data-dr",
    delay: float = 0.3,
    mode: ReplicatorMode = "replicate",
) -> Iterator[ReplicationStandIn]:
    client = s3_client(moto)
    create_replicated_buckets(client, source, destination, prefix=PREFIX)
    replicator = S3Replicator(
        s3_client(moto), source, destination, prefix=PREFIX, delay=delay, mode=mode
    ).start()
    proxy = ReplicationStatusProxy(moto.url, replicator).start()
    try:
        yield ReplicationStandIn(source, destination, replicator, proxy, moto)
    finally:
        proxy.stop()
        replicator.stop()


def without_aws_credentials(monkeypatch: Any, tmp_path: Any) -> None:
    """An environment where the default credential chain finds nothing (the prober's own
    credentials are broken)."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
