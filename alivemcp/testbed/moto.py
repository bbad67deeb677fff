"""moto in server mode: real AWS APIs over real HTTP on loopback."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alivemcp.plumbing.aws import AwsSettings

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
# moto accepts any keys; these fixed fake values keep the demo and tests reproducible.
FAKE_KEY_ID = "testing"
FAKE_SECRET = "testing"


def moto_settings(endpoint_url: str, **more: Any) -> AwsSettings:
    """AWS settings of a demo part or test talking to moto at ``endpoint_url``: the fixed
    region and fake keys, one attempt (moto answers unsupported calls with 500s that would
    otherwise be retried)."""
    from alivemcp.plumbing.aws import AwsSettings

    return AwsSettings(
        region=REGION,
        endpoint_url=endpoint_url,
        max_attempts=1,
        access_key_id=FAKE_KEY_ID,
        secret_access_key=FAKE_SECRET,
        **more,
    )


class MotoUnavailable(RuntimeError):
    """moto is not installed (install the ``demo`` extra) or would not start."""


@dataclass
class MotoServer:
    host: str = "127.0.0.1"
    port: int = 0
    _server: Any = field(default=None, repr=False)

    def start(self) -> MotoServer:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MotoUnavailable(
                "moto is not installed: `pip install 'alivemcp[demo]'` (make test/demo do it)"
            ) from exc
        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def localhost_url(self) -> str:
        """The same server named ``localhost``: botocore prefixes account ids and access-point
        names to the host for s3control and access points, which an IP address cannot take."""
        return f"http://localhost:{self.port}"

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def aws_params(self, **extra: Any) -> dict[str, Any]:
        """The ``aws:`` params block that points a probe at this server."""
        return {
            "region": REGION,
            "endpoint_url": self.url,
            "access_key_id": FAKE_KEY_ID,
            "secret_access_key": FAKE_SECRET,
            # One attempt: moto answers calls it lacks with 500s, which would be retried.
            "max_attempts": 1,
            **extra,
        }

    def boto3_kwargs(self) -> dict[str, Any]:
        """kwargs for boto3/aiobotocore clients used by test set-up code."""
        return {
            "endpoint_url": self.url,
            "region_name": REGION,
            "aws_access_key_id": FAKE_KEY_ID,
            "aws_secret_access_key": FAKE_SECRET,
        }
