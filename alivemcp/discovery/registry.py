"""The MCP registry source: the remote endpoints an MCP registry lists (API v0.1).

``GET {url}/v0.1/servers?limit=N&version=latest[&cursor=C]`` answers ``{"servers": [{"server":
{...}, "_meta": {...}}], "metadata": {"nextCursor": "...", "count": N}}``; the cursor is
opaque and copied as given until it is empty or absent (modelcontextprotocol/registry,
``docs/reference/api/openapi.yaml``). Every refresh reads the whole list (``version=latest``
keeps the old versions out of it; a registry that ignores it is filtered here all the same).

Kept: entries whose ``_meta["io.modelcontextprotocol.registry/official"]`` says ``isLatest:
true`` and whose ``status`` is not ``deleted``; one check per remote of type
``streamable-http`` or ``sse``, named ``<source>/<server name>`` (the first streamable-http
remote, else the first remote) and ``<source>/<server name>#<type>`` for the others (then
``#<type>-2``...), so that a server that moves to a new URL keeps its check and its history.
Left out and counted: see :data:`~alivemcp.discovery.found.SKIP_REASONS`. A remote that
declares a required secret header is probed without it, as auth-gated (``auth_gated_ok``).

A page that is not what the API says (not JSON, fields of the wrong type, more than
:data:`MAX_PAGE_ENTRIES` servers, over 10 MB) or a cursor that comes back fails the whole
read: the source keeps its last good set. One entry that is not what the API says is skipped
(``invalid_entry``); its page goes on.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any
from urllib.parse import quote, urlsplit

from alivemcp.config import DiscoveredOrigin
from alivemcp.config.secrets import mask_url_secrets
from alivemcp.discovery.config import McpRegistrySource
from alivemcp.discovery.found import Candidate, DiscoveryError, Found, get_json, shown
from alivemcp.hygiene.untrusted import clean_label
from alivemcp.plumbing.http import HttpClients

__all__ = ["MAX_PAGES", "MAX_PAGE_ENTRIES", "OFFICIAL_META", "McpRegistry"]

OFFICIAL_META = "io.modelcontextprotocol.registry/official"
REMOTE_TYPES = ("streamable-http", "sse")
#: Most servers one page may hold.
MAX_PAGE_ENTRIES = 1000
#: Most pages one read follows (a cursor that never ends is a loop of another shape).
MAX_PAGES = 10_000
#: A server name as the registry's schema allows it (reverse-DNS namespace / name).
_SERVER_NAME = re.compile(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+")
_MAX_NAME = 200
_MAX_VERSION = 255
_MAX_URL = 2048
_MAX_CURSOR = 4096
#: A URL template variable (`{tenant_id}`) left unresolved.
_TEMPLATE_VARIABLE = re.compile(r"\{[^{}]*\}")
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f-\x9f]")


class McpRegistry:
    """One ``mcp_registry`` source."""

    kind = "mcp_registry"

    def __init__(self, name: str, settings: McpRegistrySource, http: HttpClients) -> None:
        self.name = name
        self.settings = settings
        self.http = http
        self._servers_url = settings.url.rstrip("/") + "/v0.1/servers"

    async def read(self) -> Found:
        """Every page, from the first to the last; raises :class:`DiscoveryError`."""
        found = Found()
        urls: set[str] = set()
        cursors: set[str] = set()
        cursor: str | None = None
        for page in range(MAX_PAGES):
            url = f"{self._servers_url}?limit={self.settings.page_size}&version=latest"
            if cursor is not None:
                url += f"&cursor={quote(cursor, safe='')}"
            what = f"registry page {page + 1}"
            document = await get_json(self.http, url, what=what, timeout=self.settings.timeout)
            servers, cursor = _page(document, what)
            for entry in servers:
                self._entry(entry, found, urls)
            if not cursor:
                return found
            if cursor in cursors:
                raise DiscoveryError(
                    "cursor_loop",
                    f"{what}: nextCursor {shown(cursor, 80)} came back (a cursor loop)",
                )
            cursors.add(cursor)
        raise DiscoveryError("cursor_loop", f"more than {MAX_PAGES} pages: the cursor never ends")

    def _entry(self, entry: Any, found: Found, urls: set[str]) -> None:
        server = entry.get("server") if isinstance(entry, dict) else None
        if not isinstance(server, dict):
            found.skip("invalid_entry", f"an entry without a server object: {shown(entry, 120)}")
            return
        name = server.get("name")
        if not (isinstance(name, str) and len(name) <= _MAX_NAME and _SERVER_NAME.fullmatch(name)):
            found.skip("invalid_entry", f"server name {shown(name, 120)} is not a registry name")
            return
        meta = entry.get("_meta")
        official = meta.get(OFFICIAL_META) if isinstance(meta, dict) else None
        if not isinstance(official, dict) or official.get("isLatest") is not True:
            found.skip("not_latest", f"{name}: not marked as the latest version")
            return
        if official.get("status") == "deleted":
            found.skip("deleted", f"{name}: deleted")
            return
        version = server.get("version")
        if not (isinstance(version, str) and 0 < len(version) <= _MAX_VERSION):
            found.skip("invalid_entry", f"{name}: version {shown(version, 80)} is not a string")
            return
        remotes = server.get("remotes")
        if remotes is None or remotes == []:
            found.skip("no_remote", f"{name}: no remote endpoint (packages only)")
            return
        if not isinstance(remotes, list):
            found.skip("invalid_entry", f"{name}: remotes is {shown(remotes, 80)}, not a list")
            return
        for remote, suffix in zip(remotes, _suffixes(remotes), strict=True):
            self._remote(name, clean_label(version), remote, suffix, found, urls)

    def _remote(
        self,
        server: str,
        version: str,
        remote: Any,
        suffix: str | None,
        found: Found,
        urls: set[str],
    ) -> None:
        if not isinstance(remote, dict):
            found.skip("invalid_entry", f"{server}: a remote {shown(remote, 80)}, not an object")
            return
        kind = remote.get("type")
        url = remote.get("url")
        if suffix is None:  # (a type other than streamable-http and sse)
            found.skip("not_http", f"{server}: remote type {shown(kind, 60)}")
            return
        if not isinstance(url, str) or not url or len(url) > _MAX_URL:
            found.skip("invalid_entry", f"{server}: remote url {shown(url, 120)}")
            return
        if _TEMPLATE_VARIABLE.search(url):
            found.skip("url_template", f"{server}: {shown(url, 160)} has a template variable")
            return
        if _UNSENDABLE.search(url):
            found.skip("invalid_entry", f"{server}: {shown(url, 160)} has spaces or controls")
            return
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            found.skip("invalid_entry", f"{server}: {shown(url, 160)} is not a URL")
            return
        if parts.scheme not in ("http", "https") or not parts.hostname:
            found.skip("not_http", f"{server}: {shown(url, 160)} is not an http(s) URL")
            return
        if url in urls:
            found.skip("duplicate_url", f"{server}: {shown(url, 160)} is listed already")
            return
        urls.add(url)
        extra: dict[str, Any] = {"allow_private_addresses": self.settings.allow_private_addresses}
        if _needs_secret(remote.get("headers")):
            extra["auth_gated_ok"] = True
        added = found.add(
            Candidate(
                name=f"{self.name}/{server}{suffix}",
                target=url,
                match=server,
                origin=DiscoveredOrigin(
                    source=self.name,
                    target=mask_url_secrets(url),
                    server=server,
                    version=version,
                    transport=kind,
                ),
                identity={
                    "discovery": self.name,
                    "server": server,
                    "version": version,
                    "remote": str(kind),
                },
                extra_params=extra,
            )
        )
        if not added:  # (two entries of one server name: the first listed wins)
            found.skip("duplicate_name", f"{server}{suffix}: listed twice")


def _page(document: Any, what: str) -> tuple[list[Any], str | None]:
    """A page's servers and next cursor; raises :class:`DiscoveryError` for a page that is not
    what the API says."""
    if not isinstance(document, dict):
        raise DiscoveryError("invalid", f"{what}: a JSON {type(document).__name__}, not an object")
    servers = document.get("servers")
    if not isinstance(servers, list):
        raise DiscoveryError("invalid", f"{what}: servers is {shown(servers, 80)}, not a list")
    if len(servers) > MAX_PAGE_ENTRIES:
        raise DiscoveryError(
            "too_many_entries",
            f"{what}: {len(servers)} servers on one page (at most {MAX_PAGE_ENTRIES})",
        )
    metadata = document.get("metadata")
    if metadata is None:
        return servers, None
    if not isinstance(metadata, dict):
        raise DiscoveryError("invalid", f"{what}: metadata is {shown(metadata, 80)}")
    cursor = metadata.get("nextCursor")
    if cursor is not None and not (isinstance(cursor, str) and len(cursor) <= _MAX_CURSOR):
        raise DiscoveryError("invalid", f"{what}: nextCursor is {shown(cursor, 80)}")
    return servers, cursor or None


def _suffixes(remotes: list[Any]) -> list[str | None]:
    """Each remote's name suffix: "" for the server's main remote (its first streamable-http
    one, else its first), ``#<type>`` (then ``#<type>-2``...) for the others, None for a
    remote of no type probed here. Decided on the remotes as declared, so a remote skipped
    this time does not rename the others."""
    kinds = [r.get("type") if isinstance(r, dict) else None for r in remotes]
    typed = [i for i, kind in enumerate(kinds) if kind in REMOTE_TYPES]
    main = next((i for i in typed if kinds[i] == "streamable-http"), typed[0] if typed else None)
    seen: Counter[str] = Counter()
    out: list[str | None] = []
    for i, kind in enumerate(kinds):
        if i not in typed:
            out.append(None)
        elif i == main:
            out.append("")
        else:
            seen[str(kind)] += 1
            count = seen[str(kind)]
            out.append(f"#{kind}" if count == 1 else f"#{kind}-{count}")
    return out


def _needs_secret(headers: Any) -> bool:
    """Whether a remote declares a header that is both required and secret (credentials the
    prober does not have: the server is probed without, and judged as auth-gated)."""
    if not isinstance(headers, list):
        return False
    return any(
        isinstance(h, dict) and h.get("isRequired") is True and h.get("isSecret") is True
        for h in headers
    )
