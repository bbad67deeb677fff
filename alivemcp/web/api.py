"""The JSON history API (``/api/v1/...``) and badges (``/badge/...``).

Every answer is JSON with a stable shape (docs/http-api.md is the reference); errors are JSON
too, ``{"error": "..."}``, with ``parameter`` and ``allowed`` when a query parameter was
wrong. Check names in paths are percent-encoded; an encoded ``/`` (``%2F``) and a literal one
both work, because the last path segment always names the view (``uptime``, ``status.svg``...);
``/api/v1/checks/{name}`` itself (a check's status row), routed after every view, takes what
no view took.

Cluster mode with several locations: each location's own results are in history under
``check@location`` (:func:`~alivemcp.cluster.verdicts.location_history_name`), the quorum
verdict under the check's name; ``?location=`` on a history endpoint answers for the former.

Nothing here writes: history answers come from :class:`~alivemcp.history.store.HistoryStore`
(flushed first, so a result recorded before the request is in the answer), the check list
from the status store plus the history's in-memory 24h/7d/30d counts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from alivemcp.cluster.config import LOCATION_NAME, LOCATION_NAME_RULE
from alivemcp.cluster.verdicts import location_history_name
from alivemcp.discovery.manager import SourceSnapshot
from alivemcp.durations import parse_instant
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.status import StatusStore
from alivemcp.history.live import LIVE_WINDOWS
from alivemcp.history.queries import WINDOWS
from alivemcp.history.store import HistoryStore, HistoryUnavailable
from alivemcp.web import badges
from alivemcp.web.discovery import discovery_json
from alivemcp.web.tools import ToolRoutes

if TYPE_CHECKING:
    from alivemcp.toolsurface.tracker import SurfaceTracker

__all__ = [
    "DEFAULT_INCIDENTS_SINCE",
    "MAX_INCIDENTS",
    "ChecksEncoder",
    "add_api_routes",
    "checks_document",
    "parse_since",
]

DEFAULT_WINDOW = "24h"
DEFAULT_INCIDENTS_SINCE = "30d"
DEFAULT_INCIDENTS_LIMIT = 100
MAX_INCIDENTS = 1000
#: JSON answers are live data: a proxy or browser must not answer from a stale copy.
JSON_CACHE_CONTROL = "no-store"
CHECKS_PATH = "/api/v1/checks"
RETRY_UNAVAILABLE_SECONDS = "5"
BADGE_WINDOWS = ("24h", "7d", "30d")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _ApiError(Exception):
    def __init__(
        self, status: int, doc: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(doc["error"])
        self.status = status
        self.doc = doc
        self.headers = dict(headers or {})


def _json(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(doc),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": JSON_CACHE_CONTROL, **(headers or {})},
    )


def _bad_parameter(name: str, message: str, allowed: Iterable[str] | None = None) -> _ApiError:
    doc: dict[str, Any] = {"error": message, "parameter": name}
    if allowed is not None:
        doc["allowed"] = list(allowed)
    return _ApiError(400, doc)


def _params(request: web.Request, accepted: tuple[str, ...]) -> dict[str, str]:
    """The query parameters, refusing unknown or repeated ones: a typo (``?windw=7d``) must
    not silently answer for the default."""
    query = request.rel_url.query
    out: dict[str, str] = {}
    for key in query:
        if key not in accepted:
            takes = ", ".join(accepted) if accepted else "no parameters"
            raise _bad_parameter(
                key, f"unknown parameter {key!r}; this endpoint takes: {takes}", accepted
            )
        values = query.getall(key)
        if len(values) > 1:
            raise _bad_parameter(key, f"parameter {key!r} given {len(values)} times; give it once")
        out[key] = values[0]
    return out


def _window(params: Mapping[str, str], allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    window = params.get("window", DEFAULT_WINDOW)
    if window not in allowed:
        raise _bad_parameter(
            "window", f"window must be one of {', '.join(allowed)} (got {window!r})", allowed
        )
    return window


def parse_since(value: str, now: float) -> float:
    """The ``since`` parameter as unix time (:func:`alivemcp.durations.parse_instant`, the
    rule ``alivemcp report --since`` follows too)."""
    try:
        return parse_instant(value, now)
    except ValueError as exc:
        raise _bad_parameter("since", f"since: {exc}") from None


def _limit(params: Mapping[str, str]) -> int:
    raw = params.get("limit")
    if raw is None:
        return DEFAULT_INCIDENTS_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_INCIDENTS:
        raise _bad_parameter(
            "limit", f"limit must be a whole number from 1 to {MAX_INCIDENTS} (got {raw!r})"
        )
    return limit


def _uptime_of(history: HistoryStore, name: str, now: float) -> dict[str, dict[str, float | None]]:
    out = {}
    for window in LIVE_WINDOWS:
        up_ratio, available_ratio = history.live_uptime(name, window, now)
        out[window] = {"up_ratio": up_ratio, "available_ratio": available_ratio}
    return out


def checks_document(store: StatusStore, history: HistoryStore | None, now: float) -> dict[str, Any]:
    """The ``/api/v1/checks`` document: every configured check, in config order.
    (:class:`ChecksEncoder` writes the same document faster; this is its reference.)"""
    return {
        "generated_at": now,
        "checks": [
            {
                "check": state.info.name,
                "probe": state.info.probe_type,
                "labels": dict(state.info.labels),
                "status": state.last.status.value if state.last else "pending",
                "since": state.since,
                "uptime": None if history is None else _uptime_of(history, state.info.name, now),
            }
            for state in store.states()
        ],
    }


def _number(value: float | None) -> str:
    return "null" if value is None else repr(float(value))


def live_ratios(history: HistoryStore) -> Callable[[str, float], tuple[float | None, ...]]:
    """name, now → (up_ratio, available_ratio) of 24h, 7d and 30d, flattened."""
    return history.live_uptimes


def _row_head(info: CheckInfo) -> str:
    """A row up to its status value: what only a reload changes."""
    labels = json.dumps(dict(info.labels), separators=(",", ":"))
    return (
        f'{{"check":{json.dumps(info.name)},"probe":{json.dumps(info.probe_type)},'
        f'"labels":{labels},"status":"'
    )


def _uptime_json(windows: tuple[str, ...], ratios: tuple[float | None, ...]) -> str:
    return (
        "{"
        + ",".join(
            f'"{window}":{{"up_ratio":{_number(ratios[2 * i])},'
            f'"available_ratio":{_number(ratios[2 * i + 1])}}}'
            for i, window in enumerate(windows)
        )
        + "}"
    )


class ChecksEncoder:
    """Writes the ``/api/v1/checks`` JSON for 50,000 checks well within a second.

    What costs at that scale is building and encoding 300,000 small objects per request.
    The part of a row that changes only on reload (name, probe, labels) is encoded once per
    check and kept; the uptime part is encoded once per distinct set of ratios in a request
    (checks that all ran fine share one); the rest is a few string joins.
    """

    def __init__(self) -> None:
        self._heads: dict[str, tuple[CheckInfo, str]] = {}

    def encode(self, store: StatusStore, history: HistoryStore | None, now: float) -> bytes:
        heads = self._heads
        fresh: dict[str, tuple[CheckInfo, str]] = {}
        uptimes: dict[tuple[float | None, ...], str] = {}
        windows = tuple(LIVE_WINDOWS)
        ratios_of = live_ratios(history) if history is not None else None
        parts = ['{"generated_at":', _number(now), ',"checks":[']
        for state in store.states():
            info = state.info
            head = heads.get(info.name)
            if head is None or head[0] is not info:
                head = (info, _row_head(info))
            fresh[info.name] = head
            if ratios_of is None:
                uptime = "null"
            else:
                key = ratios_of(info.name, now)
                uptime = uptimes.get(key) or uptimes.setdefault(key, _uptime_json(windows, key))
            last = state.last
            parts.append(head[1])
            parts.append(last.status.value if last else "pending")
            parts.append('","since":')
            parts.append(_number(state.since))
            parts.append(',"uptime":')
            parts.append(uptime)
            parts.append("},")
        if parts[-1] == "},":
            parts[-1] = "}"
        parts.append("]}")
        self._heads = fresh  # checks removed by a reload drop out here
        return "".join(parts).encode()


class _Api:
    def __init__(self, store: StatusStore, history: HistoryStore | None) -> None:
        self._store = store
        self._history = history
        self._encoder = ChecksEncoder()

    # -- JSON ---------------------------------------------------------------------------------

    async def checks(self, request: web.Request) -> web.Response:
        _params(request, ())
        # 50,000 rows take a few hundred ms to encode: off the event loop.
        body = await asyncio.to_thread(
            self._encoder.encode, self._store, self._history, time.time()
        )
        return web.Response(
            body=body,
            content_type="application/json",
            headers={"Cache-Control": JSON_CACHE_CONTROL},
        )

    async def check(self, request: web.Request) -> web.Response:
        """One check: its ``/status`` row in full, and its live uptime windows."""
        name = request.match_info["name"]
        _params(request, ())
        row = self._store.row(name)
        if row is None:
            if self._literal_slash(request):
                # ``/api/v1/checks/a/b``: the check ``a/b``, or a view ``b`` of ``a`` that
                # does not exist; neither is here.
                raise _ApiError(
                    404, {"error": f"{_no_endpoint(request.path)}; nor is there a check {name!r}"}
                )
            raise _ApiError(404, {"error": f"no check named {name!r}"})
        now = time.time()
        doc: dict[str, Any] = row
        doc["uptime"] = None if self._history is None else _uptime_of(self._history, name, now)
        doc["generated_at"] = now
        # As /status writes it: details are a probe's, whatever it put in them.
        return web.Response(
            text=json.dumps(doc, default=str),
            content_type="application/json",
            headers={"Cache-Control": JSON_CACHE_CONTROL},
        )

    async def uptime(self, request: web.Request) -> web.Response:
        history, name, kept, params = await self._history_check(request, ("window",))
        window = _window(params, WINDOWS)
        return _json(_as_check(await history.uptime(kept, window), name, params))

    async def series(self, request: web.Request) -> web.Response:
        history, name, kept, params = await self._history_check(request, ("window",))
        window = _window(params, WINDOWS)
        return _json(_as_check(await history.series(kept, window), name, params))

    async def incidents(self, request: web.Request) -> web.Response:
        history, name, kept, params = await self._history_check(request, ("since", "limit"))
        since = parse_since(params.get("since", DEFAULT_INCIDENTS_SINCE), time.time())
        limit = _limit(params)
        found = [_as_check(i, name, params) for i in await history.incidents(kept, since, limit)]
        return _json(_as_check({"check": name, "incidents": found}, name, params))

    async def api_not_found(self, request: web.Request) -> web.Response:
        return _json({"error": _no_endpoint(request.path)}, status=404)

    async def _history_check(
        self, request: web.Request, accepted: tuple[str, ...]
    ) -> tuple[HistoryStore, str, str, dict[str, str]]:
        """The history, the check's name, the name its history is kept under (the check's,
        or with ``?location=`` that location's own: ``check@location``) and the query
        parameters (``accepted`` and ``location``)."""
        name = request.match_info["name"]
        if self._history is None:
            raise _ApiError(
                503, {"error": "history is disabled (history.enabled: false in the config)"}
            )
        if not await self._known(name):
            raise _ApiError(404, {"error": f"no check named {name!r}"})
        params = _params(request, (*accepted, "location"))
        location = params.get("location")
        if location is None:
            return self._history, name, name, params
        if not LOCATION_NAME.fullmatch(location):
            raise _bad_parameter(
                "location",
                f"location: {location[:80]!r} is not a location name ({LOCATION_NAME_RULE})",
            )
        kept = location_history_name(name, location)
        await self._history.flush()  # a location's first results may be on their way in
        if not await self._history.known(kept):
            raise _ApiError(
                404,
                {
                    "error": f"no history of check {name!r} from location {location!r}: a "
                    "location's own results are kept in cluster mode, for a check probed "
                    "from two or more locations",
                    "parameter": "location",
                },
            )
        return self._history, name, kept, params

    @staticmethod
    def _literal_slash(request: web.Request) -> bool:
        """Whether the name in the path holds an unencoded ``/`` (``%2F`` stays encoded in
        :attr:`~yarl.URL.path_safe`)."""
        return "/" in request.rel_url.path_safe[len(CHECKS_PATH) + 1 :]

    async def _known(self, name: str) -> bool:
        if self._store.get(name) is not None:
            return True
        return self._history is not None and await self._history.known(name)

    # -- badges -------------------------------------------------------------------------------

    async def status_badge(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        state = self._store.get(name)
        if state is None:
            return self._not_found_badge(request, "status")
        status = state.last.status.value if state.last else "pending"
        label = request.rel_url.query.get("label", name)
        return badges.badge_response(
            request, badges.Badge(label, status, badges.status_colour(status))
        )

    async def uptime_badge(self, request: web.Request) -> web.Response:
        name, window = request.match_info["name"], request.match_info["window"]
        default_label = f"uptime {window}"
        if not await self._known(name):
            return self._not_found_badge(request, default_label)
        label = request.rel_url.query.get("label", default_label)
        if self._history is None:
            return self._history_off_badge(request, label)
        up_ratio, _ = self._history.live_uptime(name, window)
        return badges.badge_response(
            request,
            badges.Badge(label, badges.format_uptime(up_ratio), badges.uptime_colour(up_ratio)),
        )

    async def latency_badge(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        default_label = "p95 24h"
        if not await self._known(name):
            return self._not_found_badge(request, default_label)
        label = request.rel_url.query.get("label", default_label)
        if self._history is None:
            return self._history_off_badge(request, label)
        try:
            doc = await self._history.uptime(name, "24h")
        except HistoryUnavailable:
            return badges.badge_response(
                request, badges.Badge(label, "unavailable", badges.COLOURS["grey"]), status=503
            )
        p95 = doc["latency_seconds"]["p95"]
        colour = badges.COLOURS["grey"] if p95 is None else badges.COLOURS["blue"]
        return badges.badge_response(
            request, badges.Badge(label, badges.format_latency(p95), colour)
        )

    async def badge_not_found(self, request: web.Request) -> web.Response:
        return badges.badge_response(
            request, badges.Badge("badge", "no such badge", badges.COLOURS["grey"]), status=404
        )

    @staticmethod
    def _not_found_badge(request: web.Request, label: str) -> web.Response:
        return badges.badge_response(
            request, badges.Badge(label, "not found", badges.COLOURS["grey"]), status=404
        )

    @staticmethod
    def _history_off_badge(request: web.Request, label: str) -> web.Response:
        return badges.badge_response(
            request, badges.Badge(label, "history off", badges.COLOURS["grey"]), status=503
        )


def _only_api(handler: Handler) -> Handler:
    """Errors of the JSON endpoints as JSON answers (a middleware would see every request of
    the application, the status page's included)."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except _ApiError as err:
            return _json(err.doc, status=err.status, headers=err.headers)
        except HistoryUnavailable as exc:
            return _json(
                {"error": f"history cannot be read right now: {exc}"},
                status=503,
                headers={"Retry-After": RETRY_UNAVAILABLE_SECONDS},
            )

    return wrapped


def _no_endpoint(path: str) -> str:
    return (
        f"no API endpoint {path!r}; see /api/v1/checks, /api/v1/checks/{{name}} and "
        "/api/v1/checks/{name}/uptime|incidents|history (?location= for one location's own)"
    )


def _as_check(doc: dict[str, Any], name: str, params: Mapping[str, str]) -> dict[str, Any]:
    """A history answer about ``check@location`` as one about the check, from ``location``."""
    location = params.get("location")
    if location is not None:
        doc["check"] = name
        doc["location"] = location
    return doc


def add_api_routes(
    app: web.Application,
    store: StatusStore,
    history: HistoryStore | None,
    discovery: Callable[[], Sequence[SourceSnapshot]] | None = None,
    *,
    surfaces: SurfaceTracker | None = None,
) -> None:
    """The JSON API and the badges; ``discovery``: the discovery sources' snapshots;
    ``surfaces``: the tool-surface tracker (:mod:`alivemcp.web.tools`)."""
    api = _Api(store, history)
    tools = ToolRoutes(store, surfaces)
    router = app.router
    if discovery is not None:
        sources = discovery

        async def discovery_sources(request: web.Request) -> web.Response:
            return _json(discovery_json(sources()))

        router.add_get("/api/v1/discovery", _only_api(discovery_sources))
    # ``{name:.+}`` (not the default one-segment pattern): a name may hold literal slashes
    # when a client does not encode them; the view is always the last segment.
    # aiohttp tries the routes of one prefix in the order they were added: every view first,
    # the check itself (``{name:.+}`` alone matches any of them) last.
    router.add_get(CHECKS_PATH, _only_api(api.checks))
    router.add_get(CHECKS_PATH + "/{name:.+}/uptime", _only_api(api.uptime))
    router.add_get(CHECKS_PATH + "/{name:.+}/incidents", _only_api(api.incidents))
    router.add_get(CHECKS_PATH + "/{name:.+}/history", _only_api(api.series))
    tools.add_api(router)
    router.add_get(CHECKS_PATH + "/{name:.+}", _only_api(api.check))
    router.add_get("/api/{tail:.*}", api.api_not_found)
    router.add_get("/badge/{name:.+}/status.svg", api.status_badge)
    router.add_get(
        "/badge/{name:.+}/uptime-{window:" + "|".join(BADGE_WINDOWS) + "}.svg", api.uptime_badge
    )
    router.add_get("/badge/{name:.+}/latency.svg", api.latency_badge)
    tools.add_badge(router)
    router.add_get("/badge/{tail:.*}", api.badge_not_found)
