"""Badges: small SVG images of a check's status, uptime and latency, for READMEs and wikis.

The look is shields.io's "flat" style (grey label on the left, coloured message on the right),
so alivemcp's badges sit well beside the badges a README already has. Widths come from a table
of Verdana 11 px advance widths (what shields measures with), so a long check name is neither
cut nor padded with empty space. Every text is XML-escaped; characters XML cannot carry are
replaced, so a badge is always a well-formed document whatever a name contains.

Responses are cacheable (``Cache-Control: public, max-age=60``) with a strong ETag of the
body; ``If-None-Match`` with a matching tag answers 304 without a body.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from xml.sax.saxutils import escape

from aiohttp import web

__all__ = [
    "BADGE_CACHE_CONTROL",
    "COLOURS",
    "Badge",
    "badge_response",
    "format_latency",
    "format_uptime",
    "render",
    "status_colour",
    "text_width",
    "uptime_colour",
]

BADGE_CACHE_CONTROL = "public, max-age=60"
#: An SVG opened on its own is a document: it may load nothing and run nothing.
BADGE_CSP = "default-src 'none'; style-src 'unsafe-inline'"

COLOURS = {
    "green": "#4c1",
    "yellowgreen": "#a4a61d",
    "yellow": "#dfb317",
    "red": "#e05d44",
    "grey": "#9f9f9f",
    "blue": "#007ec6",
    "label": "#555",
}
_STATUS_COLOUR = {
    "up": COLOURS["green"],
    "degraded": COLOURS["yellow"],
    "down": COLOURS["red"],
    "unknown": COLOURS["grey"],
    "pending": COLOURS["grey"],
}
#: Longest text drawn (in characters); longer ones end in an ellipsis.
MAX_TEXT_CHARS = 100

# Advance widths of Verdana at 11 px for printable ASCII (space to tilde), in pixels.
_ASCII_WIDTHS = (
    3.87,
    4.33,
    5.05,
    9.0,
    6.99,
    11.84,
    7.99,
    2.95,
    4.99,
    4.99,
    6.99,
    9.0,
    4.0,
    4.99,
    4.0,
    4.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    6.99,
    4.99,
    4.99,
    9.0,
    9.0,
    9.0,
    6.0,
    11.0,
    7.52,
    7.54,
    7.68,
    8.48,
    6.96,
    6.32,
    8.53,
    8.27,
    4.63,
    5.0,
    7.62,
    6.12,
    9.27,
    8.23,
    8.66,
    6.63,
    8.66,
    7.65,
    7.52,
    6.78,
    8.05,
    7.52,
    10.87,
    7.54,
    6.77,
    7.54,
    4.99,
    4.99,
    4.99,
    9.0,
    6.99,
    6.99,
    6.61,
    6.85,
    5.73,
    6.85,
    6.55,
    3.87,
    6.85,
    6.96,
    3.02,
    3.79,
    6.51,
    3.02,
    10.69,
    6.96,
    6.68,
    6.85,
    6.85,
    4.69,
    5.73,
    4.33,
    6.96,
    6.51,
    9.0,
    6.51,
    6.51,
    5.78,
    6.98,
    4.99,
    6.98,
    9.0,
)
_DEFAULT_WIDTH = 7.0  # letters outside ASCII: about an average Verdana letter
_WIDE_WIDTH = 11.0  # CJK and other full-width characters: one em
_PADDING = 10.0  # 5 px either side of each text, as shields draws them
# XML 1.0 cannot hold these at all, escaped or not.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def char_width(char: str) -> float:
    code = ord(char)
    if 32 <= code < 127:
        return _ASCII_WIDTHS[code - 32]
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0.0
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return _WIDE_WIDTH
    return _DEFAULT_WIDTH


def text_width(text: str) -> float:
    """Width in pixels of ``text`` in Verdana 11 px (an approximation good to a few %)."""
    return sum(char_width(c) for c in text)


def _clean(text: str) -> str:
    text = _NOT_XML.sub("\ufffd", text)
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "\u2026"


@dataclass(frozen=True, slots=True)
class Badge:
    label: str
    message: str
    colour: str


def render(badge: Badge) -> str:
    """The badge as an SVG document (shields "flat" style)."""
    label, message = _clean(badge.label), _clean(badge.message)
    label_w = round(text_width(label) + _PADDING)
    message_w = round(text_width(message) + _PADDING)
    total = label_w + message_w
    title = escape(f"{label}: {message}")
    label_x, message_x = label_w * 5, (label_w + message_w / 2) * 10
    label_len, message_len = (label_w - _PADDING) * 10, (message_w - _PADDING) * 10
    text_label, text_message = escape(label), escape(message)
    # Text is drawn at 10x and scaled down: shields' trick for crisp sub-pixel positions.
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" '
        f'aria-label="{escape(title, {chr(34): "&quot;"})}"><title>{title}</title>'
        '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" '
        'stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>'
        f'<clipPath id="r"><rect width="{total}" height="20" rx="3" fill="#fff"/></clipPath>'
        f'<g clip-path="url(#r)"><rect width="{label_w}" height="20" fill="{COLOURS["label"]}"/>'
        f'<rect x="{label_w}" width="{message_w}" height="20" fill="{badge.colour}"/>'
        f'<rect width="{total}" height="20" fill="url(#s)"/></g>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" '
        'text-rendering="geometricPrecision" font-size="110">'
        f'<text aria-hidden="true" x="{label_x:g}" y="150" fill="#010101" fill-opacity=".3" '
        f'transform="scale(.1)" textLength="{label_len:g}">{text_label}</text>'
        f'<text x="{label_x:g}" y="140" transform="scale(.1)" fill="#fff" '
        f'textLength="{label_len:g}">{text_label}</text>'
        f'<text aria-hidden="true" x="{message_x:g}" y="150" fill="#010101" fill-opacity=".3" '
        f'transform="scale(.1)" textLength="{message_len:g}">{text_message}</text>'
        f'<text x="{message_x:g}" y="140" transform="scale(.1)" fill="#fff" '
        f'textLength="{message_len:g}">{text_message}</text></g></svg>'
    )


def status_colour(status: str) -> str:
    return _STATUS_COLOUR.get(status, COLOURS["grey"])


def uptime_colour(ratio: float | None) -> str:
    """≥ 99.9 % green, ≥ 99 % yellow-green, ≥ 95 % yellow, below red; grey without data."""
    if ratio is None:
        return COLOURS["grey"]
    percent = ratio * 100
    if percent >= 99.9:
        return COLOURS["green"]
    if percent >= 99:
        return COLOURS["yellowgreen"]
    if percent >= 95:
        return COLOURS["yellow"]
    return COLOURS["red"]


def format_uptime(ratio: float | None) -> str:
    """``99.95%``: two decimals at most, cut rather than rounded, so 99.996 % never reads
    ``100%`` while runs failed."""
    if ratio is None:
        return "no data"
    hundredths = int(ratio * 10000 + 1e-9)  # the epsilon keeps 0.9995 from reading 99.94
    whole, frac = divmod(hundredths, 100)
    return f"{whole}.{frac:02d}".rstrip("0").rstrip(".") + "%"


def format_latency(seconds: float | None) -> str:
    if seconds is None:
        return "no data"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:.3g} ms" if ms < 10 else f"{round(ms)} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{round(seconds)} s"


def _etag(body: bytes) -> str:
    return '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def badge_response(request: web.Request, badge: Badge, status: int = 200) -> web.Response:
    """The badge as a cacheable response; 304 when the client already has this body."""
    body = render(badge).encode()
    etag = _etag(body)
    headers = {
        "Cache-Control": BADGE_CACHE_CONTROL,
        "ETag": etag,
        "Content-Security-Policy": BADGE_CSP,
    }
    if status == 200 and _matches(request.headers.get("If-None-Match"), etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, status=status, content_type="image/svg+xml", headers=headers)
