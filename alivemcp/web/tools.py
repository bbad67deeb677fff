"""The tool surface over HTTP: a check's current surface, the diff between two of its versions,
the changelog of every check's surface, and the ``tools.svg`` badge.

Everything a monitored server wrote (tool names, descriptions, schemas, finding evidence) is
attacker-controlled text: it leaves here only through
:func:`~alivemcp.hygiene.untrusted.inert_text` (invisible and bidirectional characters shown as
escapes, lengths capped), and every answer is bounded in size. The store is SQLite: each
answer is built in a worker thread.

The documents are built by plain functions (:func:`surface_document`, :func:`diff_document`,
:func:`changes_document`) that ``alivemcp tools`` prints too, so the CLI and the API say the
same thing.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from alivemcp.durations import parse_instant
from alivemcp.engine.status import StatusStore
from alivemcp.hygiene.untrusted import MAX_INERT_TOTAL, inert_json, inert_text
from alivemcp.surface import SurfaceMode
from alivemcp.toolsurface.diff import diff_surfaces
from alivemcp.toolsurface.store import Approval, SurfaceStore
from alivemcp.toolsurface.tracker import FIRST_SEEN, SurfaceTracker
from alivemcp.web import badges

__all__ = [
    "DEFAULT_CHANGES_SINCE",
    "MAX_CHANGES",
    "SurfaceState",
    "ToolRoutes",
    "ToolsError",
    "changes_document",
    "diff_document",
    "resolve",
    "surface_document",
    "surface_state",
]

DEFAULT_CHANGES_SINCE = "24h"
DEFAULT_CHANGES_LIMIT = 100
MAX_CHANGES = 500
#: Characters of server text in one answer; documents past it are left out (``null``).
MAX_ANSWER_TEXT = MAX_INERT_TOTAL
#: Characters of a diff's multi-line summary.
SUMMARY_LIMIT = 4_000
#: Changes of one diff in an answer (the rest are counted by the diff itself).
MAX_DIFF_ITEMS = 200
_HEX = re.compile(r"^[0-9a-f]{1,64}$")
_BADGE_COLOUR = {
    "pinned": badges.COLOURS["green"],
    "changed": badges.COLOURS["red"],
    "observed": badges.COLOURS["blue"],
    "unknown": badges.COLOURS["grey"],
}


class ToolsError(Exception):
    """A request the store cannot answer: ``status`` is the HTTP status (404 nothing to show,
    400 a bad parameter), ``parameter`` the query parameter at fault."""

    def __init__(self, status: int, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.parameter = parameter

    def doc(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.message}
        if self.parameter is not None:
            out["parameter"] = self.parameter
        return out


def _inert_lines(text: str, limit: int) -> str:
    """Multi-line ``text`` made inert (its newlines kept), capped at ``limit``."""
    return inert_text(text, limit, one_line=False)


# -- state -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SurfaceState:
    """Where a check's surface stands: its latest digest, the approval, the mode (None: not
    known here), whether the latest is approved, and the word the page and badge show."""

    check: str
    digest: str
    mode: str | None
    approval: Approval | None
    approved: bool
    findings: list[dict[str, Any]]

    @property
    def state(self) -> str:
        if self.mode == SurfaceMode.OBSERVE.value:
            return "observed"
        return "pinned" if self.approved else "changed"


def _mode(store: SurfaceStore, check: str) -> str | None:
    """The mode the check's surface was last recorded in (the changelog notes it)."""
    for change in store.changes(0.0, check=check, limit=1):
        mode = change.summary.get("mode")
        if mode in (SurfaceMode.PIN.value, SurfaceMode.OBSERVE.value):
            return str(mode)
    return None


def surface_state(
    store: SurfaceStore, check: str, approved_now: bool | None = None
) -> SurfaceState | None:
    """The check's surface state (None: no surface seen). ``approved_now``: what the running
    tracker says (it knows the mode the check runs in now); without it the state is judged from
    the store by the tracker's rule: approved when the latest digest is the approved one and
    the approval was made by hand, or taken on first sight without findings."""
    digest = store.latest(check)
    if digest is None:
        return None
    approval = store.approval(check)
    mode = _mode(store, check)
    findings = store.findings(check, digest)
    if approved_now is None:
        if mode == SurfaceMode.OBSERVE.value:
            approved_now = True
        else:
            approved_now = (
                approval is not None
                and approval.digest == digest
                and (approval.approved_by != FIRST_SEEN or not findings)
            )
    return SurfaceState(check, digest, mode, approval, approved_now, findings)


def _no_surface(check: str) -> ToolsError:
    return ToolsError(404, f"no tool surface seen for check {check!r}")


def _approval_json(approval: Approval | None) -> dict[str, Any] | None:
    if approval is None:
        return None
    return {
        "digest": approval.digest,
        "approved_at": approval.approved_at,
        "approved_by": inert_text(approval.approved_by, 200),
    }


def _findings_json(findings: list[dict[str, Any]], budget: list[int]) -> list[Any]:
    return [inert_json(f, budget, 1000) for f in findings if isinstance(f, dict)]


# -- documents ---------------------------------------------------------------------------------


def surface_document(
    store: SurfaceStore, check: str, approved_now: bool | None = None
) -> dict[str, Any]:
    """``GET /api/v1/checks/{name}/tools``: the current surface, its approval, findings and
    versions. Raises ToolsError (404) when no surface was seen."""
    state = surface_state(store, check, approved_now)
    if state is None:
        raise _no_surface(check)
    surface = store.surface(check, state.digest)
    budget = [MAX_ANSWER_TEXT]
    items: list[dict[str, Any]] = []
    left_out = 0
    for item in surface.items if surface is not None else ():
        document = item.document
        if document is not None and budget[0] <= 0:
            document, left_out = None, left_out + 1
        items.append(
            {
                "kind": inert_text(item.kind, 40),
                "name": inert_text(item.name, 200),
                "digest": item.digest,
                "document": None if document is None else inert_json(document, budget),
            }
        )
    versions = store.versions(check)
    current = next((v for v in versions if v.digest == state.digest), None)
    return {
        "check": check,
        "digest": state.digest,
        "mode": state.mode,
        "state": state.state,
        "approved": _approval_json(state.approval),
        "current_approved": state.approved,
        "first_seen": current.first_seen if current else None,
        "last_seen": current.last_seen if current else None,
        "items": items,
        # Documents not kept by the store (flood bounds) plus those left out of this answer.
        "documents_dropped": (surface.dropped if surface is not None else 0) + left_out,
        "findings": _findings_json(state.findings, budget),
        "versions": [
            {
                "digest": v.digest,
                "first_seen": v.first_seen,
                "last_seen": v.last_seen,
                "items": v.items,
                "findings": v.findings,
            }
            for v in versions
        ],
        "pruned": store.pruned(check),
    }


def resolve(store: SurfaceStore, check: str, prefix: str, parameter: str) -> str:
    """The stored digest of ``check`` that ``prefix`` names; ToolsError (400) otherwise."""
    wanted = prefix.strip().lower()
    if not _HEX.match(wanted):
        raise ToolsError(
            400,
            f"{parameter}: {inert_text(prefix, 80)!r} is not a surface digest "
            "(hexadecimal, or a unique prefix of one)",
            parameter,
        )
    digest = store.resolve_digest(check, wanted)
    if digest is not None:
        return digest
    several = sum(1 for v in store.versions(check) if v.digest.startswith(wanted))
    if several > 1:
        raise ToolsError(
            400,
            f"{parameter}: {wanted!r} is the start of {several} surface digests of {check!r}; "
            "give more of it",
            parameter,
        )
    raise ToolsError(400, f"{parameter}: no surface {wanted!r} recorded for {check!r}", parameter)


def diff_document(
    store: SurfaceStore, check: str, from_: str | None = None, to: str | None = None
) -> dict[str, Any]:
    """``GET /api/v1/checks/{name}/tools/diff``: what changed from ``from_`` (default: the
    approved surface; without an approval, the version seen before the latest) to ``to``
    (default: the latest). Digests may be unique prefixes. Raises ToolsError: 404 no surface,
    400 an unknown digest."""
    latest = store.latest(check)
    if latest is None:
        raise _no_surface(check)
    new_digest = resolve(store, check, to, "to") if to else latest
    if from_:
        old_digest: str | None = resolve(store, check, from_, "from")
    else:
        approval = store.approval(check)
        if approval is not None:
            old_digest = approval.digest
        else:
            older = [v.digest for v in store.versions(check) if v.digest != new_digest]
            old_digest = older[0] if older else None
    new = store.surface(check, new_digest)
    if new is None:  # pruned between the two reads
        raise ToolsError(400, f"to: no surface {new_digest!r} recorded for {check!r}", "to")
    old = store.surface(check, old_digest) if old_digest is not None else None
    diff = diff_surfaces(old, new)
    return {
        "check": check,
        "from": old_digest if old is not None else None,
        "to": new_digest,
        "summary": _inert_lines(diff.summary(SUMMARY_LIMIT), SUMMARY_LIMIT),
        "diff": inert_json(diff.to_json(max_items=MAX_DIFF_ITEMS)),
    }


def changes_document(
    store: SurfaceStore, since: float, limit: int = DEFAULT_CHANGES_LIMIT
) -> dict[str, Any]:
    """``GET /api/v1/changes``: surface changes of every check at or after ``since``, newest
    first, at most ``limit``."""
    budget = [MAX_ANSWER_TEXT]
    rows = store.changes(since, limit=max(1, min(limit, MAX_CHANGES)))
    changes = []
    for row in rows:
        summary = row.summary
        text = summary.get("summary")
        findings = summary.get("findings")
        changes.append(
            {
                "id": row.id,
                "check": row.check,
                "at": row.at,
                "from": row.from_digest,
                "to": row.to_digest,
                "mode": summary.get("mode") if isinstance(summary.get("mode"), str) else None,
                "summary": _inert_lines(text, SUMMARY_LIMIT) if isinstance(text, str) else "",
                "diff": inert_json(summary.get("diff") or {}, budget),
                "findings": _findings_json(findings if isinstance(findings, list) else [], budget),
            }
        )
    return {"since": since, "limit": limit, "changes": changes}


# -- HTTP --------------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(doc: Any, status: int = 200) -> web.Response:
    # Markup characters as JSON escapes (the same strings): the body holds no tag, whatever a
    # server wrote, even for a client that ignores the content type.
    text = json.dumps(doc).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return web.Response(
        text=text,
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _params(request: web.Request, accepted: tuple[str, ...]) -> dict[str, str]:
    """The query parameters, refusing unknown or repeated ones (as the history API does)."""
    query = request.rel_url.query
    out: dict[str, str] = {}
    for key in query:
        if key not in accepted:
            takes = ", ".join(accepted) if accepted else "no parameters"
            raise ToolsError(400, f"unknown parameter {key!r}; this endpoint takes: {takes}", key)
        values = query.getall(key)
        if len(values) > 1:
            raise ToolsError(400, f"parameter {key!r} given {len(values)} times; give it once", key)
        out[key] = values[0]
    return out


def _errors_as_json(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except ToolsError as err:
            return _json(err.doc(), status=err.status)

    return wrapped


class ToolRoutes:
    """The tool-surface endpoints of one server. The caller adds them in two places:
    :meth:`add_api` before the API's catch-all route and :meth:`add_badge` before the badges'."""

    def __init__(self, status: StatusStore, surfaces: SurfaceTracker | None) -> None:
        self._status = status
        self._surfaces = surfaces

    def add_api(self, router: web.UrlDispatcher) -> None:
        # Names may hold "/", so every route ends in its view; the longer view goes first.
        router.add_get("/api/v1/checks/{name:.+}/tools/diff", _errors_as_json(self.diff))
        router.add_get("/api/v1/checks/{name:.+}/tools", _errors_as_json(self.surface))
        router.add_get("/api/v1/changes", _errors_as_json(self.changes))

    def add_badge(self, router: web.UrlDispatcher) -> None:
        router.add_get("/badge/{name:.+}/tools.svg", self.badge)

    def _store(self, check: str) -> SurfaceStore:
        if self._surfaces is None:  # a server without the tracker (tests): nothing seen
            raise _no_surface(check)
        return self._surfaces.store

    def _approved_now(self, check: str) -> bool | None:
        return self._surfaces.approved(check) if self._surfaces is not None else None

    async def surface(self, request: web.Request) -> web.Response:
        check = request.match_info["name"]
        _params(request, ())
        store = self._store(check)
        doc = await asyncio.to_thread(surface_document, store, check, self._approved_now(check))
        return _json(doc)

    async def diff(self, request: web.Request) -> web.Response:
        check = request.match_info["name"]
        params = _params(request, ("from", "to"))
        store = self._store(check)
        doc = await asyncio.to_thread(
            diff_document, store, check, params.get("from"), params.get("to")
        )
        return _json(doc)

    async def changes(self, request: web.Request) -> web.Response:
        params = _params(request, ("since", "limit"))
        try:
            since = parse_instant(params.get("since", DEFAULT_CHANGES_SINCE), time.time())
        except ValueError as exc:
            raise ToolsError(400, f"since: {exc}", "since") from None
        raw = params.get("limit", str(DEFAULT_CHANGES_LIMIT))
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_CHANGES:
            raise ToolsError(
                400, f"limit must be a whole number from 1 to {MAX_CHANGES} (got {raw!r})", "limit"
            )
        if self._surfaces is None:
            return _json({"since": since, "limit": limit, "changes": []})
        doc = await asyncio.to_thread(changes_document, self._surfaces.store, since, limit)
        return _json(doc)

    async def badge(self, request: web.Request) -> web.Response:
        check = request.match_info["name"]
        label = request.rel_url.query.get("label", "tools")
        state: SurfaceState | None = None
        if self._surfaces is not None:
            state = await asyncio.to_thread(
                surface_state, self._surfaces.store, check, self._approved_now(check)
            )
        if state is None and self._status.get(check) is None:
            return badges.badge_response(
                request, badges.Badge(label, "not found", badges.COLOURS["grey"]), status=404
            )
        word = state.state if state is not None else "unknown"
        return badges.badge_response(request, badges.Badge(label, word, _BADGE_COLOUR[word]))
