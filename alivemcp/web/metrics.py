"""Prometheus exposition: check results become metrics in this one place.

Per-check series are produced at scrape time from the :class:`StatusStore` (no per-check
metric objects to hold in memory), rendered in a worker thread from the store's immutable
entries, so a scrape of 100,000 checks never holds the event loop. Engine-wide metrics are
ordinary prometheus-client objects on the registry, encoded on the loop (a few milliseconds).
"""

from __future__ import annotations

import asyncio
import functools
import operator
import platform
import threading
import time
from collections.abc import Callable, Mapping

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from alivemcp import __version__
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.status import CheckState, StatusStore
from alivemcp.outcome import (
    CHECK_IDENTITY_LABELS,
    CHECK_SERIES_LABELS,
    OBSERVATION_PREFIX,
    engine_label_owners,
)
from alivemcp.probe import Status
from alivemcp.web.metrics_locations import FAMILY as LOCATION_STATUS_FAMILY
from alivemcp.web.metrics_locations import LocationStatusFamily

__all__ = [
    "CHECK_IDENTITY_LABELS",
    "CHECK_SERIES_LABELS",
    "ENGINE_METRIC_NAMES",
    "OBSERVATION_PREFIX",
    "Metrics",
    "engine_label_owners",
]

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

_STATUSES = tuple(Status)

#: Every metric family the engine itself exports (alerting adds its own).
ENGINE_METRIC_NAMES = frozenset(
    {
        "alivemcp_check_up",
        "alivemcp_check_status",
        "alivemcp_check_duration_seconds",
        "alivemcp_check_runs_total",
        "alivemcp_check_last_run_timestamp_seconds",
        "alivemcp_check_status_since_timestamp_seconds",
        LOCATION_STATUS_FAMILY,
        "alivemcp_scheduler_lateness_seconds",
        "alivemcp_scheduler_runs_in_flight",
        "alivemcp_scheduler_skipped_runs_total",
        "alivemcp_scheduler_abandoned_probes",
        "alivemcp_checks_configured",
        "alivemcp_build_info",
        "alivemcp_config_last_reload_successful",
        "alivemcp_config_last_reload_success_timestamp_seconds",
        "alivemcp_config_reloads_total",
        "alivemcp_metrics_render_seconds",
    }
)


#: check name, window → (up_ratio, available_ratio); None when no decided runs.
UptimeSource = Callable[[str, str], tuple[float | None, float | None]]

_CHECK_FAMILIES = (
    ("alivemcp_check_up", "gauge", "1 when the check's last run was up."),
    ("alivemcp_check_status", "gauge", "State set of the check's last status: 1 for the current."),
    ("alivemcp_check_duration_seconds", "gauge", "Duration of the check's last run."),
    ("alivemcp_check_runs", "counter", "Runs of the check by result."),
    ("alivemcp_check_last_run_timestamp_seconds", "gauge", "Unix time the last run started."),
    (
        "alivemcp_check_status_since_timestamp_seconds",
        "gauge",
        "Unix time the check's current status began.",
    ),
)


_STATUS_LABEL = CHECK_SERIES_LABELS["alivemcp_check_status"]
_RESULT_LABEL = CHECK_SERIES_LABELS["alivemcp_check_runs_total"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())


#: Lines joined into one piece of the body at most: each join and encode is one call that
#: holds the interpreter lock throughout (the loop cannot take it back in between), so the
#: render thread hands it back to the loop at least every few hundred microseconds.
RENDER_CHUNK = 4000

#: Seconds of its own work after which the render thread lets the loop have the interpreter
#: lock (see :class:`_Breather`), and how long it sleeps to do so.
RENDER_BREATH_EVERY = 0.001
RENDER_BREATH_SLEEP = 0.0001
#: States the render goes through between two looks at the clock.
_STATES_PER_LOOK = 128


class _Breather:
    """Called by the render thread between pieces of its work: every
    :data:`RENDER_BREATH_EVERY` seconds it sleeps :data:`RENDER_BREATH_SLEEP`.

    Left to the interpreter, the loop thread got the lock back only when its wait for it ran
    out (the 5 ms switch interval), once per loop turn, so runs started while a scrape
    rendered ran late: p99 99-122 ms over six scrapes of 100,000 checks, against 2.5 ms in
    steady state (``benchmarks/engine.py --steady 5 --scrapes 6``). A sleep is what gives the
    lock away: released with nobody having asked for it (``time.sleep(0)``), the render thread
    takes it straight back before the waiting thread is even scheduled, on one core always. The
    cost: about a tenth more wall time per render, no more CPU."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= RENDER_BREATH_EVERY:
            time.sleep(RENDER_BREATH_SLEEP)
            self._since = time.perf_counter()


class _CheckLines:
    """One check's exposition lines, per family, as of one state of the check (the state is
    told by the keys; see :meth:`CheckExposition._render`).

    The ``up`` and ``status`` lines are not kept: they are the labels and one of four fixed
    endings, put together by each scrape (:func:`_status_families`). Kept, they were about
    500 bytes a check, 50 MB at 100,000 checks, to save a concatenation or two a check."""

    __slots__ = (
        "duration",
        "info",
        "labels",
        "last_run",
        "observed",
        "runs",
        "runs_key",
        "since",
        "since_key",
        "started_key",
        "status_key",
    )

    def __init__(self, info: CheckInfo, labels: bytes) -> None:
        self.info = info
        self.labels = labels  # the label pairs, escaped, as UTF-8
        self.started_key: float | None = None
        self.runs_key: tuple[int, int, int, int] | None = None
        self.since_key: float | None = None
        self.status_key: Status | None = None  # the last result's status (None: no result)
        # UTF-8 already: a scrape joins bytes it keeps, it encodes only what changed.
        self.duration = self.runs = self.last_run = self.since = b""
        self.observed: tuple[tuple[str, bytes], ...] = ()


class CheckExposition:
    """Renders the per-check families straight to exposition text.

    At 100,000 checks these are ~1,000,000 lines: building prometheus-client ``Sample`` objects
    for each took tens of seconds and hundreds of MB, so lines are formatted directly, and each
    check's lines are kept until its state changes (between two scrapes most checks ran once at
    most, many not at all; of a check that ran, only the families its result changed are
    formatted again). The render runs in a worker thread: it hands the interpreter's lock to
    the loop every millisecond or so (:class:`_Breather`), and no single call of it holds the
    lock long (the body is joined and encoded in pieces of :data:`RENDER_CHUNK` lines).
    Rendered on the loop instead, even in slices, a scrape of 100,000 checks held it 20-400 ms
    at a time. Engine-wide metrics still go through prometheus-client (on the loop), which
    also does the content negotiation.
    """

    def __init__(self, store: StatusStore) -> None:
        self._store = store
        self._lines: dict[str, _CheckLines] = {}
        self._uptime: tuple[str, UptimeSource] | None = None
        self._owned: Callable[[str], bool] | None = None
        #: Cluster mode, several locations: each location's vote (:mod:`.metrics_locations`).
        self.locations = LocationStatusFamily()
        #: Held by a render: the kept lines are one thread's at a time, even if the scrape
        #: that started a render was abandoned while its thread went on.
        self._lock = threading.Lock()

    def set_owned(self, owned: Callable[[str], bool] | None) -> None:
        """Cluster mode: export only the checks ``owned`` says this replica probes, so that
        Prometheus scraping every replica sees each check once (None: all checks)."""
        self._owned = owned

    def set_uptime_source(self, window: str | None, source: UptimeSource) -> None:
        """Export uptime over ``window`` per check (history.metrics_window; None: off)."""
        self._uptime = None if window is None else (window, source)

    def _lines_for(self, state: CheckState) -> _CheckLines:
        """Fresh lines for ``state``, reusing what its kept lines say that still holds."""
        info = state.info
        cached = self._lines.get(info.name)
        if cached is not None and cached.info is info:
            lines = _CheckLines(info, cached.labels)
        else:
            cached = None
            check, probe = CHECK_IDENTITY_LABELS
            lines = _CheckLines(
                info, _utf8(_label_text({check: info.name, probe: info.probe_type, **info.labels}))
            )
        labels = lines.labels.decode()
        lines.runs_key = state.runs
        lines.since_key = state.since
        runs = "".join(
            [
                f"alivemcp_check_runs_total{{{labels}{_RESULT_OF[code]}{float(count)!r}\n"
                for code, count in enumerate(state.runs)
                if count
            ]
        )
        lines.runs = _utf8(runs)
        last = state.last
        if last is not None:
            lines.started_key = last.started_at
            lines.status_key = last.status
            lines.duration = _utf8(
                f"alivemcp_check_duration_seconds{{{labels}}} {last.duration_seconds!r}\n"
            )
            lines.last_run = _utf8(
                f"alivemcp_check_last_run_timestamp_seconds{{{labels}}} {last.started_at!r}\n"
            )
            if state.since is not None:
                if (
                    cached is not None
                    and cached.since_key == state.since
                    and cached.status_key is not None
                ):
                    lines.since = cached.since  # made from the same since, with the same labels
                else:
                    lines.since = _utf8(
                        f"alivemcp_check_status_since_timestamp_seconds{{{labels}}} "
                        f"{state.since!r}\n"
                    )
            observed = [
                (name, _utf8(f"{OBSERVATION_PREFIX}{name}{{{labels}}} {float(value)!r}\n"))
                for name, value in last.observations.items()
            ]
            for item in last.labeled_observations:
                extra = item.labels
                if any(k in info.labels or k in CHECK_IDENTITY_LABELS for k in extra):
                    # Validation refuses such user labels for probes that declare theirs; for
                    # one that does not, a duplicate label name would fail the whole scrape.
                    extra = {
                        k: v
                        for k, v in extra.items()
                        if k not in info.labels and k not in CHECK_IDENTITY_LABELS
                    }
                more = f",{_label_text(extra)}" if extra else ""
                observed.append(
                    (
                        item.name,
                        _utf8(
                            f"{OBSERVATION_PREFIX}{item.name}{{{labels}{more}}} "
                            f"{float(item.value)!r}\n"
                        ),
                    )
                )
            lines.observed = tuple(observed)
        self._lines[info.name] = lines
        return lines

    def snapshot(self) -> list[CheckState]:
        """The entries a render will show, taken on the event loop (each is immutable)."""
        return self._store.states()

    def render(self, openmetrics: bool, states: list[CheckState]) -> list[bytes]:
        """The per-check families of ``states``, as UTF-8 parts to concatenate. Runs in a
        worker thread (one render at a time: the kept lines are its own); reads nothing the
        loop mutates in place."""
        with self._lock:
            return self._render(openmetrics, states)

    def _render(self, openmetrics: bool, states: list[CheckState]) -> list[bytes]:
        owned = self._owned
        if owned is not None:
            states = [s for s in states if owned(s.info.name)]
        rendered: list[_CheckLines] = []
        observed: dict[str, list[bytes]] = {}
        uptime: list[str] = []
        available: list[str] = []
        lines_for = self._lines_for
        kept = self._lines.get
        breathe = _Breather()
        for n, state in enumerate(states):
            if not n % _STATES_PER_LOOK:
                breathe()
            # Whether the kept lines still say what the state says (inlined: once per check
            # per scrape). A state is replaced whole on every result, and a result's start
            # time, the run counts and the status's start tell one state of a check from the
            # next (the state itself is not kept: a scrape must not hold every replaced result
            # in memory until the next one).
            lines = kept(state.info.name)
            last = state.last
            if (
                lines is None
                or state.runs != lines.runs_key
                or state.info is not lines.info
                or state.since != lines.since_key
                or (last.started_at if last is not None else None) != lines.started_key
            ):
                lines = lines_for(state)
            rendered.append(lines)
            for name, line in lines.observed:
                observed.setdefault(name, []).append(line)
            if self._uptime is not None and state.last is not None:
                # Not kept: the window slides with the clock, not with the check's state.
                window, source = self._uptime
                up_ratio, available_ratio = source(state.info.name, window)
                if up_ratio is not None and available_ratio is not None:
                    labels = lines.labels.decode()
                    uptime.append(
                        f'alivemcp_check_uptime_ratio{{{labels},window="{window}"}} {up_ratio!r}\n'
                    )
                    available.append(
                        f"alivemcp_check_availability_ratio{{{labels},"
                        f'window="{window}"}} {available_ratio!r}\n'
                    )
        if len(self._lines) > len(rendered):  # checks gone since the last render
            keep = {lines.info.name for lines in rendered}
            for stale in [name for name in self._lines if name not in keep]:
                del self._lines[stale]
        parts: list[bytes] = []
        decided = [lines for lines in rendered if lines.status_key is not None]
        for (family, kind, doc), field in zip(_CHECK_FAMILIES, _FAMILY_FIELDS, strict=True):
            parts.append(_family_header(family, kind, doc, openmetrics).encode())
            if isinstance(field, str):
                _join_bytes_into(parts, list(map(operator.attrgetter(field), rendered)), breathe)
            else:
                field(parts, decided, breathe)
        if self._uptime is not None:
            for family, doc, lines_of in (
                (
                    "alivemcp_check_uptime_ratio",
                    "Share of decided runs (unknown excluded) that "
                    "were up over the window (history.metrics_window).",
                    uptime,
                ),
                (
                    "alivemcp_check_availability_ratio",
                    "Share of decided runs (unknown excluded) "
                    "that were up or degraded over the window (history.metrics_window).",
                    available,
                ),
            ):
                parts.append(_family_header(family, "gauge", doc, openmetrics).encode())
                _join_into(parts, lines_of, breathe)
        self.locations.render_into(parts, states, breathe, RENDER_CHUNK)
        helps = _observable_help()
        for name, observed_lines in observed.items():
            doc = helps.get(name) or f"{name} as reported by a probe that does not declare it."
            text = _family_header(OBSERVATION_PREFIX + name, "gauge", doc, openmetrics)
            parts.append(text.encode("utf-8", "replace"))
            _join_bytes_into(parts, observed_lines, breathe)
        return parts


def _utf8(text: str) -> bytes:
    """A check's line as UTF-8. Text reaching labels was made safe when results entered the
    engine; "replace" is the last guard, so one odd string can never turn every scrape into an
    HTTP 500 (per line or per piece, it replaces the same characters: lines end with "\\n")."""
    return text.encode("utf-8", "replace")


def _join_bytes_into(parts: list[bytes], lines: list[bytes], breathe: _Breather) -> None:
    """Kept ``lines``, in pieces of :data:`RENDER_CHUNK` lines."""
    for at in range(0, len(lines), RENDER_CHUNK):
        breathe()
        parts.append(b"".join(lines[at : at + RENDER_CHUNK]))


def _up_family(parts: list[bytes], decided: list[_CheckLines], breathe: _Breather) -> None:
    """The ``alivemcp_check_up`` lines of the checks that have a result, in pieces of
    :data:`RENDER_CHUNK`: the head and the labels, then the ending the status takes."""
    head = b"alivemcp_check_up{"
    for at in range(0, len(decided), RENDER_CHUNK):
        breathe()
        parts.append(
            b"".join(
                [
                    head + lines.labels + _UP_ENDING_OF[lines.status_key]
                    for lines in decided[at : at + RENDER_CHUNK]
                ]
            )
        )


def _status_family(parts: list[bytes], decided: list[_CheckLines], breathe: _Breather) -> None:
    """The ``alivemcp_check_status`` lines (one per status) of the checks that have a result,
    in pieces of :data:`RENDER_CHUNK` lines: a line head with the labels before each of the
    fixed endings the check's status takes."""
    head = b"alivemcp_check_status{"
    mid = f',{_STATUS_LABEL}="'.encode()
    per_piece = RENDER_CHUNK // len(_STATUSES)
    for at in range(0, len(decided), per_piece):
        breathe()
        piece = []
        for lines in decided[at : at + per_piece]:
            line_head = head + lines.labels + mid
            piece.append(line_head + line_head.join(_STATUS_ENDINGS_OF[lines.status_key]))
        parts.append(b"".join(piece))


def _join_into(parts: list[bytes], lines: list[str], breathe: _Breather) -> None:
    """``lines`` as UTF-8, in pieces of :data:`RENDER_CHUNK` lines. Text reaching labels was
    made safe when results entered the engine; "replace" is the last guard, so one odd string
    can never turn every scrape into an HTTP 500."""
    for at in range(0, len(lines), RENDER_CHUNK):
        breathe()
        parts.append("".join(lines[at : at + RENDER_CHUNK]).encode("utf-8", "replace"))


#: Per status: the rest of each alivemcp_check_status line after ``status="`` (1.0 for it).
_STATUS_ENDINGS_OF: dict[Status | None, tuple[bytes, ...]] = {
    current: tuple(f'{s.value}"}} {1.0 if s is current else 0.0}\n'.encode() for s in _STATUSES)
    for current in _STATUSES
}
#: Per status: the rest of the alivemcp_check_up line after the labels.
_UP_ENDING_OF: dict[Status | None, bytes] = {
    s: f"}} {1.0 if s is Status.UP else 0.0}\n".encode() for s in _STATUSES
}
#: Per status code of CheckState.runs: the runs_total line between the labels and the count.
_RESULT_OF = tuple(f',{_RESULT_LABEL}="{s.value}"}} ' for s in _STATUSES)

#: Per family of _CHECK_FAMILIES, in order: the _CheckLines field its kept lines are in, or
#: the function that makes its lines on each scrape (see _CheckLines).
_FAMILY_FIELDS: tuple[str | Callable[[list[bytes], list[_CheckLines], _Breather], None], ...] = (
    _up_family,
    _status_family,
    "duration",
    "runs",
    "last_run",
    "since",
)


@functools.cache
def _observable_help() -> dict[str, str]:
    """Help text of every declared observation, from the probe types' own declarations."""
    from alivemcp.config.registry import registry

    helps: dict[str, str] = {}
    reg = registry()
    for probe_type in reg.names():
        for observable in reg.get(probe_type).observables or ():
            helps.setdefault(observable.name, _escape_help(observable.help))
    return helps


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _family_header(name: str, kind: str, doc: str, openmetrics: bool) -> str:
    exposed = name if openmetrics or kind != "counter" else f"{name}_total"
    return f"# HELP {exposed} {doc}\n# TYPE {exposed} {kind}\n"


class Metrics:
    """The daemon's registry, the checks' families and the render's own gauge. Engine and
    app instruments are declared beside their owners and registered into :attr:`registry`
    (see :mod:`alivemcp.engine.instruments`)."""

    def __init__(self, store: StatusStore) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.checks = CheckExposition(store)
        r = self.registry
        # The standard process_* (CPU, memory, open files) and python_* (GC, version) series
        # every Prometheus user expects from a daemon.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Info("alivemcp_build", "Build information.", registry=r).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self.render_seconds = Gauge(
            "alivemcp_metrics_render_seconds", "Time the last /metrics render took.", registry=r
        )
        self._render: asyncio.Future[tuple[list[bytes], str]] | None = None
        self._render_accept: str | None = None
        self._rendering = asyncio.Lock()  # one render thread at a time

    async def render(self, accept: str | None) -> tuple[bytes, str]:
        """The whole body, joined off the loop (the HTTP server streams the parts instead)."""
        parts, content_type = await self.render_parts(accept)
        return await asyncio.to_thread(b"".join, parts), content_type

    async def render_parts(self, accept: str | None) -> tuple[list[bytes], str]:
        """The body as parts to send in order (never mutated once returned), rendered in a
        worker thread (see :class:`CheckExposition`); concurrent scrapes with the same Accept
        share a render. Parts, not one joined body: at 100,000 checks the body is ~70 MB, and
        joining it cost a copy of all of it per scrape, handed to the socket in one write
        that buffered most of it again on the loop."""
        if self._render is not None and not self._render.done() and self._render_accept == accept:
            return await asyncio.shield(self._render)
        self._render_accept = accept
        render = self._render = asyncio.ensure_future(self._render_now(accept))
        render.add_done_callback(self._forget_render)
        return await asyncio.shield(render)

    def _forget_render(self, render: asyncio.Future[tuple[list[bytes], str]]) -> None:
        # Its waiters hold the result; kept here too, the last body (~70 MB at 100,000
        # checks) stayed in memory until the next scrape replaced it.
        if self._render is render:
            self._render = None

    async def _render_now(self, accept: str | None) -> tuple[list[bytes], str]:
        async with self._rendering:
            started = time.perf_counter()
            encoder, content_type = choose_encoder(accept or "")
            openmetrics = content_type.startswith("application/openmetrics-text")
            states = self.checks.snapshot()
            parts = await asyncio.to_thread(self.checks.render, openmetrics, states)
            # On the loop: collectors of engine-wide metrics read state the loop owns.
            parts.append(encoder(self.registry))
            self.render_seconds.set(time.perf_counter() - started)
            return parts, content_type
