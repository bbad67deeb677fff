"""The self-contained HTML status page served at ``GET /``.

One file, no external assets (the daemon often runs where the browser cannot reach a CDN):
inline CSS and JavaScript that poll the relative URL ``status?view=brief`` (so the page also
works behind a path-prefix proxy), group checks by a selectable label, and render only the rows
in view so 50,000 checks stay responsive. The brief list leaves out each check's recent runs,
observations and details (at 50,000 checks it is a fifth of the full document's ~50 MB); the
page asks for those by name (``status?check=NAME&check=...``, on-screen rows first) only for the
rows in the DOM, once per refresh, and for the opened check. A daemon older than those views
sends full rows whatever the query: the page then draws from them and asks nothing by name.
History comes from the JSON API (:mod:`alivemcp.web.api`): the 24h
and 30d uptime columns from ``api/v1/checks`` at most once a minute, the daily (or hourly) bars
only for the rows on screen, and an opened check's incidents. The page lives in
``statuspage.html`` beside this module so it can be edited as HTML; it is read once at import.

The page is served with a Content-Security-Policy that allows exactly its own inline script
and style (by hash, computed here from the file, so editing the page never breaks it), data:
images (the favicon it draws) and requests to its own origin only: even if the page's own
check on ``#source=`` were bypassed, the browser would refuse to fetch from elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_HEADERS", "PAGE_HTML"]

#: The page, as served (UTF-8 bytes).
PAGE_HTML: bytes = files("alivemcp.web").joinpath("statuspage.html").read_bytes()


def _inline_hashes(tag: str, page: bytes) -> str:
    bodies = re.findall(
        rb"<" + tag.encode() + rb">(.*?)</" + tag.encode() + rb">", page, flags=re.DOTALL
    )
    if not bodies:
        raise RuntimeError(f"statuspage.html has no inline <{tag}>")
    return " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'"
        for body in bodies
    )


#: What the page may load and run: nothing but itself.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        f"script-src {_inline_hashes('script', PAGE_HTML)}",
        f"style-src {_inline_hashes('style', PAGE_HTML)}",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

#: Headers of the page response (the daemon's and the tests' stand-in server's).
PAGE_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
