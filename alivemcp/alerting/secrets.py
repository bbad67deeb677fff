"""Receiver secrets, registered for redaction in pieces, not only whole.

The config registers each receiver URL, routing key and header value whole. But a receiver's
error body often quotes only part of it (Slack's 404 may echo the webhook path, a webhook
gateway its ``/hooks/<token>`` path, a 401 the bare bearer token), and a whole-value match
misses those. So the parts that carry the secret are registered too:

* a URL's path and query (everything after the host), when any part of it looks secret;
* each path segment and query value that looks secret (see :func:`looks_secret`), both as
  written and percent-decoded; each value of a query parameter whose name says secret;
* the password of a URL's userinfo;
* each word of a header value or other secret that looks secret (``Bearer <token>``).

Ordinary words are left alone on purpose: registering ``services`` or ``enqueue`` would blank
those words out of every log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import SecretStr

from alivemcp.hygiene.redact import register_secret

__all__ = ["looks_secret", "register_receiver_secrets", "secret_parts_of_url"]

_WORDLIKE = re.compile(r"[a-z]+(?:[-_.][a-z]+)*")
_SECRET_PARAM = re.compile(
    r"(?i)(token|key|secret|sig|signature|auth|pass|pwd|code|hash|credential|session)"
)
_MIN_SECRET = 8  # shorter pieces are too likely to occur in unrelated text
_SURE_SECRET = 16  # at this length even a run of lowercase letters is a token, not a word
_MIN_NAMED = 4  # register_secret's own minimum: the value of `?token=...` is secret anyway


def looks_secret(piece: str) -> bool:
    """At least 8 characters, and either 16+ characters or not a lowercase word or
    kebab/snake-case name (a digit, a capital or punctuation: ``XXXXsecretXXXX``,
    ``s3cr3t-path-token``, ``T0ABCDEFG``; not ``services``, ``alert-hook``)."""
    if len(piece) < _MIN_SECRET:
        return False
    return len(piece) >= _SURE_SECRET or _WORDLIKE.fullmatch(piece) is None


def secret_parts_of_url(url: str) -> list[str]:
    """The pieces of ``url`` worth registering (the whole URL is registered elsewhere)."""
    try:
        parts = urlsplit(url.strip())
        password = parts.password
    except ValueError:  # a malformed URL: the whole value is all we can register
        return []
    found: list[str] = []
    if password:
        found += [password, unquote(password)]
    for segment in parts.path.split("/"):
        found += [p for p in (segment, unquote(segment)) if looks_secret(p)]
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if looks_secret(value) or (_SECRET_PARAM.search(name) and len(value) >= _MIN_NAMED):
            found.append(value)
    if parts.fragment and looks_secret(parts.fragment):
        found.append(parts.fragment)
    if found:
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        found += [tail, unquote(tail), tail.lstrip("/")]
    return list(dict.fromkeys(p for p in found if p))


def _words(value: str) -> list[str]:
    return [w for w in re.split(r"[\s,;]+", value) if looks_secret(w)]


def register_receiver_secrets(config: object) -> None:
    """Register the secret-bearing pieces of one receiver's config (any receiver type):
    its URLs, routing key, HMAC secret and header values."""
    urls: list[str] = []
    values: list[str] = []
    for name in ("webhook_url", "url"):
        value = getattr(config, name, None)
        if isinstance(value, SecretStr):
            urls.append(value.get_secret_value())
        elif isinstance(value, str):
            urls.append(value)
    for name in ("routing_key", "hmac_secret"):
        value = getattr(config, name, None)
        if isinstance(value, SecretStr):
            values.append(value.get_secret_value())
    headers = getattr(config, "headers", None) or {}
    values += [v.get_secret_value() for v in headers.values() if isinstance(v, SecretStr)]
    _register(part for url in urls for part in secret_parts_of_url(url))
    _register(values)
    _register(word for value in values for word in _words(value))


def _register(values: Iterable[str]) -> None:
    for value in values:
        register_secret(value)
