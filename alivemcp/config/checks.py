"""A check as the engine runs it (:class:`ResolvedCheck`), how two of them compare, and how a
load's checks share their equal values.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretBytes, SecretStr

from alivemcp.alerting.config import AlertPolicyOverride
from alivemcp.probe import ProbeParams
from alivemcp.resultsview import Reference

__all__ = [
    "FINGERPRINT_BYTES",
    "RELOAD_DIGEST_BYTES",
    "DiscoveredOrigin",
    "ResolvedCheck",
    "SharedValues",
    "sharing",
]


#: Size of :meth:`ResolvedCheck.reload_digest`.
RELOAD_DIGEST_BYTES = 16
#: Size of :meth:`ResolvedCheck.fingerprint`.
FINGERPRINT_BYTES = 16


@dataclass(frozen=True, slots=True)
class DiscoveredOrigin:
    """Where a discovered check came from: its source, the target it was made for (a URL's
    secrets masked), and for an MCP registry entry the server's name and version and the
    remote's transport (``streamable-http`` or ``sse``)."""

    source: str
    target: str
    server: str | None = None
    version: str | None = None
    transport: str | None = None
    #: At most this many runs at once against the target's host (None: no limit of its own).
    max_per_host: int | None = None

    @property
    def host(self) -> str:
        """What :attr:`max_per_host` counts against: the target URL's host, or the whole
        target when it is not a URL."""
        if "://" in self.target:
            with contextlib.suppress(ValueError):
                host = urlsplit(self.target).hostname
                if host:
                    return host
        return self.target

    def as_json(self) -> dict[str, str | None]:
        """The ``"discovered"`` object of a ``/status`` row."""
        return {
            "source": self.source,
            "target": self.target,
            "server": self.server,
            "version": self.version,
            "transport": self.transport,
        }


@dataclass(frozen=True, slots=True)
class ResolvedCheck:
    """One concrete check after target expansion and params validation."""

    name: str
    probe_type: str
    interval: float
    timeout: float
    labels: Mapping[str, str]
    params: ProbeParams
    depends_on: tuple[str, ...]
    alert: AlertPolicyOverride | None
    #: The checks whose latest results the probe reads (its params' ``referenced_checks()``),
    #: each name resolved to concrete checks and their intervals.
    reads: tuple[Reference, ...] = ()
    #: Where a discovered check came from (None: written in the config file). Not part of
    #: the fingerprint (the probe instance is built from the params and labels, which already
    #: carry the target, server and version), but part of :meth:`same_as`.
    discovered: DiscoveredOrigin | None = None
    #: Cluster mode: the locations that probe it and vote (empty: every location seen), and
    #: how many must agree (0: a majority of them). Not part of the fingerprint (the probe
    #: instance does not depend on them), but part of :meth:`same_as`.
    locations: tuple[str, ...] = ()
    quorum: int = 0
    _fingerprint: bytes | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    _reload_digest: bytes | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def fingerprint(self) -> bytes:
        """Equal fingerprints mean a reload can keep the running probe instance. Computed
        once, and kept as a 16-byte digest: a reload compares 100,000 of them, and the
        fields and params it digests were about 450 bytes a check, kept for good."""
        cached = self._fingerprint
        if cached is None:
            fields = repr(
                (
                    self.probe_type,
                    self.interval,
                    self.timeout,
                    sorted(self.labels.items()),
                    # A reader is rebuilt when what its names stand for changes (a target added
                    # to a member, a member's interval), so its view never holds the old
                    # resolution.
                    self.reads,
                )
            )
            # One hash over the fields and the params' text: a digest of the params first, its
            # hex in the fields' repr, then a digest of that took 17.6 us a check against
            # 9.8 us (a reload of 100,000 checks digests every one). The NUL between the two
            # cannot occur in a repr, so no two fields and params give the same input.
            digest = hashlib.blake2b(
                fields.encode("utf-8", "surrogatepass"), digest_size=FINGERPRINT_BYTES
            )
            digest.update(b"\0")
            digest.update(_params_text(self.params))
            cached = digest.digest()
            object.__setattr__(self, "_fingerprint", cached)
        return cached

    def same_as(self, other: ResolvedCheck) -> bool:
        """Whether ``other`` is this check as configured, field for field (the params by
        their digest, secrets included): a reload keeps the running check's objects then."""
        return self is other or (
            self.name == other.name
            and self.fingerprint() == other.fingerprint()
            and self.depends_on == other.depends_on
            and self.alert == other.alert
            and self.discovered == other.discovered
            and self.locations == other.locations
            and self.quorum == other.quorum
        )

    def probed_in(self, location: str) -> bool:
        """Whether replicas of ``location`` probe this check (cluster mode)."""
        return not self.locations or location in self.locations

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The fields in order, not dataclasses' own state (it calls ``fields()`` on every
        # check: a fifth of a second per 100,000 pickled), and unpickled through
        # _unpickled_check, which shares equal values (see sharing()).
        return _unpickled_check, (
            self.name,
            self.probe_type,
            self.interval,
            self.timeout,
            self.labels,
            self.params,
            self.depends_on,
            self.alert,
            self.reads,
            self._fingerprint,
            self._reload_digest,
            self.discovered,
            self.locations,
            self.quorum,
        )

    def reload_digest(self) -> bytes:
        """16 bytes that change whenever :meth:`same_as` would tell this check from its
        changed self: a config loader in another process is given the running checks' digests
        and sends back which checks it can keep, instead of copies of them (see
        :mod:`alivemcp.app.configload`). Computed once."""
        cached = self._reload_digest
        if cached is None:
            alert = None if self.alert is None else self.alert.model_dump_json()
            text = repr(
                (
                    self.name,
                    self.fingerprint(),
                    self.depends_on,
                    alert,
                    self.discovered,
                    self.locations,
                    self.quorum,
                )
            )
            cached = hashlib.blake2b(
                text.encode("utf-8", "surrogatepass"), digest_size=RELOAD_DIGEST_BYTES
            ).digest()
            object.__setattr__(self, "_reload_digest", cached)
        return cached


_V = TypeVar("_V")


def _params_text(params: ProbeParams) -> bytes:
    """Every param *including secret values* (``model_dump_json`` masks them, so a changed
    password alone would keep the probe with the old one), as canonical JSON. Only a digest of
    it is kept."""
    text = _PARAMS_JSON.encode(params.model_dump(mode="python"))
    return text.encode("utf-8", "surrogatepass")


class SharedValues:
    """One object for each distinct label set, probe type and duration among the checks of one
    load. A generated config of 100,000 checks repeats a few label sets (the defaults' and a
    team's) and one or two intervals in every check: as copies that was a dict of labels, two
    strings and two floats per check (about 300 bytes with two labels), kept for good and made
    again by a reload. The shared label dicts are read-only like the checks that hold them
    (``ResolvedCheck.labels`` and ``CheckInfo.labels`` are typed ``Mapping``: nothing
    writes to them)."""

    __slots__ = ("_labels", "_values")

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._values: dict[tuple[type, object], object] = {}

    def labels(self, labels: dict[str, str]) -> dict[str, str]:
        return self._labels.setdefault(tuple(labels.items()), labels)

    def value(self, value: _V) -> _V:
        # Keyed by type too: 60 and 60.0 are equal keys, and a float field stays a float.
        return typing.cast(_V, self._values.setdefault((type(value), value), value))


#: While set, unpickled checks share their equal values through it (see :func:`sharing`).
_UNPICKLED_SHARE: contextvars.ContextVar[SharedValues | None] = contextvars.ContextVar(
    "alivemcp_unpickled_share", default=None
)


@contextlib.contextmanager
def sharing(shared: SharedValues) -> Iterator[None]:
    """Checks unpickled meanwhile (in this context) share their label sets and durations
    through ``shared``: pickle shares an object only within one ``loads``, and a reload
    loaded in a child process arrives a frame of checks at a time."""
    token = _UNPICKLED_SHARE.set(shared)
    try:
        yield
    finally:
        _UNPICKLED_SHARE.reset(token)


def _unpickled_check(
    name: str,
    probe_type: str,
    interval: float,
    timeout: float,
    labels: Mapping[str, str],
    params: ProbeParams,
    depends_on: tuple[str, ...],
    alert: AlertPolicyOverride | None,
    reads: tuple[Reference, ...],
    fingerprint: bytes | None,
    reload_digest: bytes | None,
    discovered: DiscoveredOrigin | None = None,
    locations: tuple[str, ...] = (),
    quorum: int = 0,
) -> ResolvedCheck:
    shared = _UNPICKLED_SHARE.get()
    if shared is not None:
        probe_type, interval, timeout = (
            shared.value(probe_type),
            shared.value(interval),
            shared.value(timeout),
        )
        if type(labels) is dict:
            labels = shared.labels(labels)
    check = ResolvedCheck(
        name,
        probe_type,
        interval,
        timeout,
        labels,
        params,
        depends_on,
        alert,
        reads,
        discovered,
        locations,
        quorum,
    )
    object.__setattr__(check, "_fingerprint", fingerprint)
    object.__setattr__(check, "_reload_digest", reload_digest)
    return check


def _reveal(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes):
        return repr(value.get_secret_value())
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)


#: One encoder for every check's params: ``json.dumps`` with options builds one per call
#: (2.6 us a check against 5.0 us).
_PARAMS_JSON = json.JSONEncoder(sort_keys=True, default=_reveal, ensure_ascii=False)
