"""The JSON history API (``/api/v1/...``) and badges (``/badge/...``)."""

from __future__ import annotations

from aiohttp import web

from alivemcp.history import HistoryStore
from alivemcp.status import StatusStore

__all__ = ["add_api_routes"]


def add_api_routes(app: web.Application, store: StatusStore, history: HistoryStore | None
                   ) -> None:
    """Placeholder: the routes are added in the next change."""
