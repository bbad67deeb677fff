"""An incremental Server-Sent Events parser (the subset MCP servers use).

Lines end in CRLF, LF or a bare CR; ``data:`` lines of one event are joined with newlines;
``event:`` and ``id:`` are kept; comments (``:``) and unknown fields are ignored; an event is
dispatched at a blank line. Events with empty data (the npm server's priming event) are
dispatched too and left for the caller to skip. Bytes are decoded per line, so a multi-byte
character split across network chunks is never mangled.

As the SSE standard says, the last event id persists across events (and, through
:meth:`SseParser.restart`, across reconnections: it becomes the ``Last-Event-ID`` of a resumed
stream), an ``id`` containing NUL is ignored, and ``retry`` (the reconnection delay in
milliseconds) is taken only when it is all ASCII digits.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseEvent", "SseParser"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str
    id: str | None


class SseParser:
    __slots__ = ("_buffer", "_data", "_event", "_id", "retry_ms")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        #: The server's last ``retry:`` value (milliseconds), None when it sent none.
        self.retry_ms: int | None = None

    @property
    def last_event_id(self) -> str | None:
        """The id of the last event that carried one (the ``Last-Event-ID`` to resume with)."""
        return self._id

    def restart(self) -> None:
        """Start reading a new connection's stream: an unfinished line or event of the old
        one is dropped; the last event id and the retry delay are kept."""
        self._buffer = b""
        self._data = []
        self._event = ""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Add bytes from the stream; return the events completed by them."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            # A CR at the very end may be the first half of a CRLF split across chunks.
            held = buffer.endswith(b"\r")
            if held:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                buffer += b"\r"
        cut = buffer.rfind(b"\n") + 1
        self._buffer = buffer[cut:]
        if not cut:
            return []
        # Complete lines only, decoded at once (a character split across chunks stays whole
        # in the unfinished line kept for the next chunk).
        lines = buffer[: cut - 1].decode("utf-8", "replace").split("\n")
        events: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(
                        SseEvent(self._event or "message", "\n".join(self._data), self._id)
                    )
                self._data = []
                self._event = ""
                continue
            name, sep, value = line.partition(":")
            if not name:  # a comment line
                continue
            if sep and value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id" and "\x00" not in value:
                self._id = value
            elif name == "retry" and value.isascii() and value.isdigit() and len(value) <= 9:
                self.retry_ms = int(value)
        return events

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished line (so callers can cap a line that never ends)."""
        return len(self._buffer)
