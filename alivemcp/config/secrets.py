"""Which configured values are secrets, found once when a config loads.

The redaction layer (:mod:`alivemcp.hygiene.redact`) removes registered values wherever they appear,
as whole strings or inside longer ones. This module decides what to register:

* every ``SecretStr`` field, in the engine's config and in every check's validated params;
* any string under a secret-looking key (``password``, ``token``, ``api_key``, ``secret``…),
  params included;
* the values of request headers (``headers:`` mappings) other than a few well-known
  non-secret ones: ``X-Api-Key: …`` is how many MCP servers authenticate;
* a ``${VAR}`` value whose variable name looks secret (``MCP_TOKEN``, ``SLACK_WEBHOOK_URL``);
* in URLs: the userinfo password and query values under credential-like keys.

A ``${VAR}`` value in an ordinary field (a bucket name, a broker list, a URL) is not a secret:
redacting it would blank the very names a reason needs to be useful.

Each secret is also registered in its URL-encoded and JSON-escaped forms, so an echo of it in
a query string or a JSON error body is caught too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote, urlsplit

from pydantic import BaseModel, SecretStr

from alivemcp.hygiene.redact import REDACTED, SECRET_KEY, register_secret

__all__ = ["ConfigSecrets", "mask_url_secrets"]

#: Header values shorter than this are not treated as secrets ("true", "json", "v2").
_MIN_HEADER_SECRET = 8
_PUBLIC_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "connection",
        "content-type",
        "host",
        "mcp-protocol-version",
        "origin",
        "pragma",
        "referer",
        "user-agent",
    }
)
_CREDENTIAL_QUERY_KEYS = re.compile(
    r"(?i)^(key|sig|signature|code|auth|access[_-]?token|x-amz-(signature|credential|"
    r"security-token))$"
)
_SCHEME_TOKEN = re.compile(r"(?i)^(bearer|basic|token)\s+(\S+)$")


class ConfigSecrets:
    def __init__(self) -> None:
        self.values: set[str] = set()

    def _add(self, value: str, minimum: int = 4) -> None:
        if len(value) < minimum:
            return
        self.values.add(value)
        scheme = _SCHEME_TOKEN.match(value)
        if scheme:
            self.values.add(scheme.group(2))
        for variant in (quote(value, safe=""), json.dumps(value)[1:-1]):
            if variant != value:
                self.values.add(variant)

    def add_variable(self, name: str, path: str, value: str) -> None:
        """A ``${VAR}`` value interpolated at ``path``."""
        if SECRET_KEY.search(name):
            self._add(value)

    def add_model(self, obj: object, key: str | None = None) -> None:
        """Walk a validated config object (models, mappings, lists) for secrets."""
        if isinstance(obj, SecretStr):
            self._add(obj.get_secret_value())
        elif isinstance(obj, BaseModel):
            for name in type(obj).model_fields:
                self.add_model(getattr(obj, name), name)
        elif isinstance(obj, Mapping):
            is_headers = key is not None and key.lower().endswith("headers")
            for k, v in obj.items():
                if is_headers and isinstance(v, str | SecretStr):
                    # Header values are secrets (X-Api-Key...) unless the header is a standard
                    # public one; short values ("json", "café") would redact ordinary words.
                    text = v.get_secret_value() if isinstance(v, SecretStr) else v
                    if str(k).lower() not in _PUBLIC_HEADERS:
                        self._add(text, _MIN_HEADER_SECRET)
                else:
                    self.add_model(v, str(k))
        elif isinstance(obj, list | tuple | set | frozenset):
            for item in obj:
                self.add_model(item, key)
        elif isinstance(obj, str):
            if key is not None and SECRET_KEY.search(key):
                self._add(obj)
            if "://" in obj:
                self._add_url(obj)

    def _add_url(self, text: str) -> None:
        try:
            parts = urlsplit(text)
            password = parts.password
        except ValueError:
            return
        if password:
            self._add(password)
        for k, v in parse_qsl(parts.query, keep_blank_values=False):
            if SECRET_KEY.search(k) or _CREDENTIAL_QUERY_KEYS.match(k):
                self._add(v)

    def register(self) -> None:
        for value in self.values:
            register_secret(value)


def mask_url_secrets(text: str) -> str:
    """``text`` with a URL's userinfo and query values masked (for check names and labels)."""
    if "://" not in text or ("@" not in text and "?" not in text):
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        query = "&".join(
            f"{k}={REDACTED}" if sep else k
            for k, sep, _ in (item.partition("=") for item in query.split("&"))
        )
    out = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        out += f"?{query}"
    if parts.fragment:
        out += f"#{parts.fragment}"
    return out
