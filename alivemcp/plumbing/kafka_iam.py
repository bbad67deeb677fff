"""MSK IAM authentication: OAUTHBEARER tokens signed with the prober's AWS identity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka.abc import AbstractTokenProvider

from alivemcp.errors import ErrorKind
from alivemcp.plumbing.aws import aws_error_summary
from alivemcp.plumbing.kafka_errors import KafkaPlumbingError

__all__ = ["MskIamTokenProvider"]


class MskIamTokenProvider(AbstractTokenProvider):
    """OAUTHBEARER tokens for MSK IAM, signed with the AWS identity of the ``aws:`` block.

    Credentials come from the shared AWS plumbing (so profiles, static keys, IRSA and assumed
    roles all work); the token itself is signed in an executor because the signer is
    synchronous. Tokens last 15 minutes and are replaced ``refresh_margin`` seconds early.
    """

    def __init__(
        self,
        credentials: Callable[[], Any],
        region: str,
        *,
        refresh_margin: float = 180.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = credentials
        self._region = region
        self._refresh_margin = refresh_margin
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        #: How many tokens were signed (refreshes are observable in tests and logs).
        self.generated = 0

    @property
    def expires_at(self) -> float:
        return self._expires_at

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._expires_at - self._refresh_margin:
            return self._token
        async with self._lock:
            if self._token is not None and self._clock() < self._expires_at - self._refresh_margin:
                return self._token
            try:
                frozen = await self._credentials()
            except Exception as exc:
                raise _no_credentials(self._region, aws_error_summary(exc)) from exc
            if frozen is None or not frozen.access_key or not frozen.secret_key:
                raise _no_credentials(self._region, "none found")
            loop = asyncio.get_running_loop()
            token, expiry_ms = await loop.run_in_executor(
                None, _sign_msk_token, self._region, frozen
            )
            self._token = token
            self._expires_at = expiry_ms / 1000.0
            self.generated += 1
            return token


def _sign_msk_token(region: str, frozen: Any) -> tuple[str, int]:
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    from botocore.credentials import CredentialProvider, Credentials

    class _Fixed(CredentialProvider):  # the signer only accepts a CredentialProvider
        METHOD = "alivemcp"

        def load(self) -> Credentials:
            return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
        region, _Fixed()
    )
    return str(token), int(expiry_ms)


def _no_credentials(region: str, why: str) -> KafkaPlumbingError:
    return KafkaPlumbingError(
        ErrorKind.AUTH,
        target=f"MSK in {region}",
        operation="MSK IAM sign-in",
        detail=f"no AWS credentials: {why}",
    )
