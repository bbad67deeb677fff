"""The self-contained HTML status page served at ``GET /``.

One file, no external assets (the daemon often runs where the browser cannot reach a CDN):
inline CSS and JavaScript that poll the relative URL ``status`` (so the page also works behind
a path-prefix proxy), group checks by a selectable label, and render only the rows in view so
5,000 checks stay responsive. The page lives in ``statuspage.html`` beside this module so it can
be edited as HTML; it is read once at import.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["PAGE_HTML"]

#: The page, as served (UTF-8 bytes).
PAGE_HTML: bytes = files("alivemcp").joinpath("statuspage.html").read_bytes()
