"""The probe's ``User-Agent``: ``alivemcp/<version>``, and with a location
``alivemcp/<version> (+location eu-west)``, so a target's operators can tell the vantage points
of a several-location deployment apart.

A leaf module (the package re-exports :func:`user_agent`): the HTTP modules need it, and the
package imports them.
"""

from __future__ import annotations

from alivemcp import __version__

__all__ = ["checked_user_agent", "user_agent"]


def user_agent(location: str | None = None) -> str:
    """The probe's ``User-Agent``: ``alivemcp/<version>``, with a location
    ``alivemcp/<version> (+location <location>)``.

    A location is a short name (config validates it: letters, digits, ``_`` and ``-``); one
    that could break the header or its comment (control characters, parentheses, a backslash,
    non-ASCII) is a ValueError rather than a malformed or spoofed header.
    """
    if location is None:
        return f"alivemcp/{__version__}"
    if (
        not location
        or not location.isascii()
        or not location.isprintable()
        or any(c in location for c in "()\\")
    ):
        raise ValueError(f"location {location[:64]!r} cannot go into a User-Agent")
    return f"alivemcp/{__version__} (+location {location})"


def checked_user_agent(value: str) -> str:
    """``value`` if it can be sent as a header value as it is (printable ASCII), else
    ValueError: it is written into every request head unchecked."""
    if not value or not value.isascii() or not value.isprintable():
        raise ValueError(f"User-Agent {value[:80]!r} must be non-empty printable ASCII")
    return value
