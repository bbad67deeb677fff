"""Prometheus service discovery sources: ``http_sd`` and ``file_sd``, in Prometheus' formats.

Both read target groups, ``[{"targets": ["..."], "labels": {"name": "value"}}]``: each target
string fills the probe's target param (for ``mcp_endpoint``, the URL), and the group's labels
become the check's labels, but ``__``-prefixed ones (Prometheus' meta labels), which are
dropped. A check is named ``<source>/<target>`` (a URL's credentials masked).

* ``http_sd``: ``GET url`` with ``X-Prometheus-Refresh-Interval-Seconds``; the answer must be
  200 with ``Content-Type: application/json`` and holds the full list every time (``[]`` when
  empty).
* ``file_sd``: files matched by globs relative to the config file's directory, JSON
  (``.json``) or YAML (``.yml``, ``.yaml``), read again every refresh and whenever one of them
  changes (:meth:`FileSd.changed`). A file that cannot be read or parsed fails the whole read
  (the source keeps its last good set).

A document that is not a list, or lists more than :data:`MAX_TARGETS` targets, fails the read;
one group or target that is not what the format says is skipped (``invalid_entry``).
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
from pathlib import Path
from typing import Any

from alivemcp.config import DiscoveredOrigin
from alivemcp.config.secrets import mask_url_secrets
from alivemcp.config.yamlfile import YamlFileError, decode_utf8, load_yaml
from alivemcp.discovery.config import FileSdSource, HttpSdSource
from alivemcp.discovery.found import (
    MAX_DOCUMENT_BYTES,
    Candidate,
    DiscoveryError,
    Found,
    get_json,
    shown,
)
from alivemcp.hygiene.untrusted import clean_label
from alivemcp.plumbing.http import HttpClients

__all__ = ["MAX_TARGETS", "FileSd", "HttpSd", "read_groups"]

#: Most targets one source may list.
MAX_TARGETS = 100_000
_MAX_TARGET = 2048
_MAX_LABEL_VALUE = 1024
_UNSAFE_TARGET = re.compile(r"[\x00-\x20\x7f-\x9f]")
_FILE_SUFFIXES = (".json", ".yml", ".yaml")


class HttpSd:
    """One ``http_sd`` source."""

    kind = "http_sd"

    def __init__(self, name: str, settings: HttpSdSource, http: HttpClients) -> None:
        self.name = name
        self.settings = settings
        self.http = http

    async def read(self) -> Found:
        document = await get_json(
            self.http,
            self.settings.url,
            what="http_sd",
            timeout=self.settings.timeout,
            headers={"X-Prometheus-Refresh-Interval-Seconds": f"{self.settings.refresh:g}"},
            json_content_type=True,
        )
        found = Found()
        read_groups(document, "http_sd", self.name, self.settings.allow_private_addresses, found)
        return found


class FileSd:
    """One ``file_sd`` source; ``base_dir`` is where relative globs start (the config file's
    directory)."""

    kind = "file_sd"

    def __init__(self, name: str, settings: FileSdSource, base_dir: Path) -> None:
        self.name = name
        self.settings = settings
        self.base_dir = base_dir
        self._stamp: tuple[tuple[str, int, int], ...] | None = None

    def paths(self) -> list[str]:
        """The files the globs match now, sorted, each once."""
        found: set[str] = set()
        for pattern in self.settings.files:
            found.update(glob.glob(str(self.base_dir / pattern)))
        return sorted(p for p in found if os.path.isfile(p))

    def stamp(self) -> tuple[tuple[str, int, int], ...]:
        """(path, modification time, size) of each file: what tells a change."""
        out = []
        for path in self.paths():
            try:
                stat = os.stat(path)
            except OSError:
                continue  # removed meanwhile: the next stamp no longer lists it
            out.append((path, stat.st_mtime_ns, stat.st_size))
        return tuple(out)

    def changed(self) -> bool:
        """Whether a file was added, removed or modified since the last read."""
        return self._stamp is not None and self.stamp() != self._stamp

    async def read(self) -> Found:
        # Kept before reading: a file fixed after a failed read is a change, read at once.
        stamp = self._stamp = self.stamp()
        documents = await asyncio.to_thread(_read_files, [path for path, _, _ in stamp])
        found = Found()
        for path, document in documents:
            read_groups(
                document, f"file_sd {path}", self.name, self.settings.allow_private_addresses, found
            )
        return found


def _read_files(paths: list[str]) -> list[tuple[str, Any]]:
    """Each file's document; raises :class:`DiscoveryError` for the first that fails."""
    out = []
    for path in paths:
        what = f"file_sd {path}"
        if not path.endswith(_FILE_SUFFIXES):
            raise DiscoveryError("invalid", f"{what}: not a .json, .yml or .yaml file")
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise DiscoveryError("read", f"{what}: {exc.strerror or exc}") from None
        if len(data) > MAX_DOCUMENT_BYTES:
            raise DiscoveryError("too_large", f"{what}: larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            if path.endswith(".json"):
                document = json.loads(data)
            else:
                document = load_yaml(decode_utf8(data), path)
        except (ValueError, RecursionError, YamlFileError) as exc:
            reason = "not_json" if path.endswith(".json") else "invalid"
            raise DiscoveryError(
                reason, f"{what}: cannot be parsed: {shown(str(exc), 160)}"
            ) from None
        out.append((path, [] if document is None else document))
    return out


def read_groups(document: Any, what: str, source: str, allow_private: bool, found: Found) -> None:
    """Add the targets of one document of Prometheus target groups to ``found`` (a target
    already listed by this source is skipped as ``duplicate_target``)."""
    if not isinstance(document, list):
        raise DiscoveryError(
            "invalid", f"{what}: a {type(document).__name__}, not a list of target groups"
        )
    for index, group in enumerate(document):
        targets = group.get("targets") if isinstance(group, dict) else None
        if not isinstance(targets, list):
            found.skip("invalid_entry", f"{what}: group {index} has no list of targets")
            continue
        if len(found.candidates) + len(targets) > MAX_TARGETS:
            raise DiscoveryError("too_many_entries", f"{what}: more than {MAX_TARGETS} targets")
        labels = _group_labels(group.get("labels"))
        if labels is None:
            found.skip(
                "invalid_entry",
                f"{what}: group {index} has labels that are not a map of strings",
                count=len(targets) or 1,
            )
            continue
        for target in targets:
            _add_target(target, labels, what, source, allow_private, found)


def _group_labels(raw: Any) -> dict[str, str] | None:
    """The group's labels without Prometheus' ``__`` meta labels, values cleaned; None when
    they are not a map of strings."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        return None
    labels: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            return None
        if name.startswith("__"):
            continue
        if len(value) > _MAX_LABEL_VALUE:
            return None
        labels[name] = clean_label(value)
    return labels


def _add_target(
    target: Any, labels: dict[str, str], what: str, source: str, allow_private: bool, found: Found
) -> None:
    if not isinstance(target, str) or not target or len(target) > _MAX_TARGET:
        found.skip("invalid_entry", f"{what}: target {shown(target, 120)} is not a string")
        return
    if _UNSAFE_TARGET.search(target):
        found.skip("invalid_entry", f"{what}: target {shown(target, 120)} has spaces or controls")
        return
    masked = mask_url_secrets(target)
    candidate = Candidate(
        name=f"{source}/{masked}",
        target=target,
        match=target,
        origin=DiscoveredOrigin(source=source, target=masked),
        identity={"discovery": source},
        labels=labels,
        extra_params={"allow_private_addresses": allow_private},
    )
    if not found.add(candidate):
        found.skip("duplicate_target", f"{what}: {shown(target, 120)} is listed already")
