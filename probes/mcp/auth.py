"""Credentials for the MCP probe: static headers and OAuth2 client credentials.

Token endpoint failures are the prober's own problem (its configuration or its identity
provider), so they raise :class:`TokenUnavailable`, a ``ProbeError`` of kind ``auth``, which the
probe reports as ``unknown``. The request goes through the HTTP plumbing
(:meth:`~alivemcp.plumbing.http.HttpClients.fetch`): proxies from the environment, a 64 KiB
cap on the answer, no redirects. A token is cached per check until shortly before it expires.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from pydantic import Field, SecretStr

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.plumbing.http import BodyTooLarge, HttpClients, HttpError, RequestTimeout
from alivemcp.probe import ProbeParams

__all__ = [
    "BearerChallenge",
    "ClientCredentials",
    "OAuthParams",
    "TokenUnavailable",
    "bearer_challenge",
]

#: Renew this long before expiry so a token never expires mid-probe.
_RENEW_MARGIN_SECONDS = 30.0
#: Used when a token response has no expires_in.
_DEFAULT_TOKEN_LIFETIME = 300.0
_MAX_TOKEN_RESPONSE = 64 * 1024


class OAuthParams(ProbeParams):
    """OAuth2 client-credentials grant (RFC 6749 §4.4)."""

    token_url: str = Field(description="The authorization server's token endpoint.")
    client_id: str = Field(description="OAuth client id.")
    client_secret: SecretStr = Field(description="OAuth client secret (use `${ENV}`).")
    scope: str | None = Field(None, description="Space-separated scopes to request.")
    audience: str | None = Field(None, description="`audience` form field, for IdPs that need it.")
    resource: str | None = Field(
        None, description="RFC 8707 `resource` indicator (usually the MCP server URL)."
    )
    timeout: float = Field(10.0, gt=0, description="Seconds allowed for the token request.")


class TokenUnavailable(ProbeError):
    """The token endpoint failed or refused the client: the probe cannot authenticate.

    Kind ``auth`` whatever the cause (a refused client, an identity provider that is down):
    the prober's own credentials could not be had, which says nothing about the MCP server.
    ``code`` is the OAuth ``error`` the endpoint gave, if any. Never carries the secret.
    """

    def __init__(self, token_url: str, detail: str, *, code: str | None = None) -> None:
        super().__init__(
            ErrorKind.AUTH,
            target=token_url,
            operation="OAuth token request",
            detail=detail,
            code=code,
        )


class ClientCredentials:
    """Fetches and caches one check's access token."""

    def __init__(self, params: OAuthParams) -> None:
        self.params = params
        self._token: str | None = None
        self._expires_at = 0.0
        self.fetches = 0
        #: Whether the last token handed out came from the cache.
        self.last_from_cache = False

    def forget(self) -> None:
        self._token = None

    async def token(self, http: HttpClients, *, timeout: float | None = None) -> str:
        """A valid access token; ``timeout`` caps the token request (the check's budget)."""
        now = time.monotonic()
        if self._token is not None and now < self._expires_at - _RENEW_MARGIN_SECONDS:
            self.last_from_cache = True
            return self._token
        self.last_from_cache = False
        params = self.params
        form = {
            "grant_type": "client_credentials",
            "client_id": params.client_id,
            "client_secret": params.client_secret.get_secret_value(),
        }
        for key in ("scope", "audience", "resource"):
            value = getattr(params, key)
            if value:
                form[key] = value
        url = params.token_url
        budget = params.timeout if timeout is None else max(0.05, min(params.timeout, timeout))
        try:
            response = await http.fetch(
                "POST",
                url,
                timeout=budget,
                body=urlencode(form).encode(),
                headers={
                    "Accept": "application/json",
                    "Content-Type": "application/x-www-form-urlencoded",
                },
                max_body_bytes=_MAX_TOKEN_RESPONSE,
            )
        except RequestTimeout as exc:
            raise TokenUnavailable(url, f"no answer within {budget:.3g}s") from exc
        except BodyTooLarge as exc:
            raise TokenUnavailable(url, f"answered more than {exc.limit} bytes") from exc
        except HttpError as exc:
            # The plumbing's sentence names the failure (DNS, connect, TLS...), never the form.
            raise TokenUnavailable(url, f"unreachable: {exc}") from exc
        if response.status != 200:
            error = _oauth_error(response.body)
            raise TokenUnavailable(
                url,
                f"answered HTTP {response.status}" + (f" ({error})" if error else ""),
                code=error,
            )
        try:
            payload = json.loads(response.body)
            token = payload["access_token"]
            lifetime = float(payload.get("expires_in") or _DEFAULT_TOKEN_LIFETIME)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise TokenUnavailable(url, "answered without a usable access_token") from exc
        if not isinstance(token, str) or not token:
            raise TokenUnavailable(url, "answered an empty access_token")
        self._token = token
        self._expires_at = time.monotonic() + lifetime
        self.fetches += 1
        return token


def _oauth_error(body: bytes) -> str | None:
    match = re.search(rb'"error"\s*:\s*"([A-Za-z0-9_.-]{1,64})"', body)
    return match.group(1).decode() if match else None


@dataclass(frozen=True, slots=True)
class BearerChallenge:
    error: str | None
    resource_metadata: str | None


_PARAM = re.compile(r'([A-Za-z_]+)\s*=\s*"([^"]*)"')


def bearer_challenge(headers: Mapping[str, str]) -> BearerChallenge | None:
    """The Bearer challenge of a 401/403, or None when there is none."""
    value = headers.get("WWW-Authenticate", "")
    if not re.search(r"(?i)(^|[\s,])bearer\b", value):
        return None
    params = dict(_PARAM.findall(value[:2000]))
    return BearerChallenge(params.get("error"), params.get("resource_metadata"))
