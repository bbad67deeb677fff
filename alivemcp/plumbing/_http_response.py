"""Reading a response: its head parsed, its body read on demand under a cap.

:func:`parse_head` reads the status line and headers (at most :data:`MAX_HEAD_BYTES`, found
by the session's exchange); :class:`HttpResponse` reads the body from the connection's buffer
as Content-Length, chunked framing or read-until-close says, refusing more than its ``limit``
(checked against chunk sizes and Content-Length before reading) and yielding to the event loop
now and then while it works through bytes already buffered (see :mod:`._http_connection`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

from alivemcp.plumbing._http_connection import YIELD_AFTER, Connection, pause
from alivemcp.plumbing._http_errors import BodyTooLarge, ConnectionClosed, ProtocolError

__all__ = ["MAX_HEAD_BYTES", "Headers", "HttpResponse", "parse_head", "read_capped"]

#: Cap on a response's status line plus headers.
MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE = 4096
#: A chunk size line as servers write it (hex digits, maybe extensions); others are parsed
#: the slow way.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:;[^\r\n]*)?\r\n")
#: One header line (after the status line): name up to the first colon, the rest its value.
_HEADER_LINE = re.compile(r"\r\n([^:\r\n]*):([^\r\n]*)(?=\r\n|\Z)")


class Headers(dict[str, str]):
    """Response headers, keyed by lower-case name; lookups ignore case."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


#: dict.get without the case folding of Headers.get (keys are stored lower-case).
_dict_get = dict.get


class HttpResponse:
    """A response whose body is read on demand (see :meth:`chunks`, :func:`read_capped`)."""

    __slots__ = (
        "_conn",
        "_crlf",
        "_done",
        "_keep_alive",
        "_mode",
        "_remaining",
        "_total",
        "_trailer",
        "content_length",
        "content_type",
        "headers",
        "limit",
        "status",
    )

    def __init__(
        self,
        conn: Connection,
        status: int,
        headers: Headers,
        keep_alive: bool,
        has_body: bool,
        limit: int,
    ) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        self.limit = limit
        ctype = _dict_get(headers, "content-type")
        self.content_type = ctype.partition(";")[0].strip().lower() if ctype else ""
        self.content_length: int | None = None
        self._keep_alive = keep_alive
        self._done = False
        #: Chunked framing: the current chunk's data is read, its CRLF is not yet.
        self._crlf = False
        #: Chunked framing: the last chunk was read, trailer lines follow.
        self._trailer = False
        self._total = 0
        if not has_body:
            self._mode, self._remaining = "none", 0
            self._done = True
        elif "chunked" in (_dict_get(headers, "transfer-encoding") or "").lower():
            self._mode, self._remaining = "chunked", 0
        elif (length := _dict_get(headers, "content-length")) is not None:
            try:
                self.content_length = int(length)
            except ValueError:
                raise ProtocolError(f"Content-Length {length[:40]!r} is not a number") from None
            if self.content_length < 0:
                raise ProtocolError("negative Content-Length")
            self._mode, self._remaining = "length", self.content_length
            self._done = self.content_length == 0
        else:
            self._mode, self._remaining = "close", 0
            self._keep_alive = False

    @property
    def deadline(self) -> float:
        return self._conn.deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        """Move the deadline for reading the rest of the body (e.g. a long-lived stream)."""
        self._conn.deadline = value

    @property
    def reusable(self) -> bool:
        """True when the body was read to its end and the connection may carry another."""
        return self._done and self._keep_alive and not self._conn.eof

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body piece by piece (see :meth:`next_piece`)."""
        while data := await self.next_piece():
            yield data

    async def next_piece(self) -> bytes:
        """The next piece of the body (at most :data:`YIELD_AFTER` bytes), ``b""`` at its
        end; raises :class:`BodyTooLarge` past the cap. When the pieces come from an
        already-filled buffer it yields to the event loop now and then, so that a fast stream
        is never parsed in one long stretch while other checks wait.

        A coroutine rather than an async generator: the event loop tracks every async
        generator in a weak set, which costs more than reading a small body."""
        conn = self._conn
        if conn.unyielded >= YIELD_AFTER:
            await pause(conn)
        if self._done:
            return b""
        mode = self._mode
        if mode == "chunked":
            while True:
                data = self._dechunk()
                if data or self._done:
                    return data
                if not await conn.more():
                    raise ConnectionClosed("connection closed mid-response")
        if mode == "length":
            if self._remaining > self.limit:
                raise BodyTooLarge(self.limit)
            data = await conn.read_some(min(self._remaining, YIELD_AFTER))
            if not data:
                raise ConnectionClosed("connection closed mid-response")
            self._remaining -= len(data)
            self._done = not self._remaining
            return data
        # until the server closes
        data = await conn.read_some(YIELD_AFTER)
        if not data:
            self._done = True
            return data
        self._total += len(data)
        if self._total > self.limit:
            raise BodyTooLarge(self.limit)
        return data

    def _dechunk(self) -> bytes:
        """Decode the chunked framing already buffered: the data of every complete chunk (and
        of the current chunk so far), at most :data:`YIELD_AFTER` bytes, without waiting.
        ``b""`` with the body not done means more bytes are needed from the socket."""
        conn = self._conn
        buffer = conn.buffer
        end = len(buffer)
        if not end:
            return b""
        pos = 0
        got = 0
        pieces: list[bytearray] = []
        if not (self._remaining or self._crlf or self._trailer):
            # The common case: whole chunks in the buffer ("1a\r\n<data>\r\n"), and the
            # last one without trailers; anything else goes on in the loop below.
            limit = self.limit
            while (match := _CHUNK_SIZE.match(buffer, pos)) is not None:
                size = int(match[1], 16)
                start = match.end()
                stop = start + size
                if stop + 2 > end or got + size > YIELD_AFTER:
                    break
                if buffer[stop : stop + 2] != b"\r\n":
                    if size:
                        raise ProtocolError("chunk not followed by CRLF")
                    break  # the last chunk, with trailers
                pos = stop + 2
                if not size:
                    self._done = True
                    break
                self._total += size
                if self._total > limit:
                    raise BodyTooLarge(limit)
                pieces.append(buffer[start:stop])
                got += size
        while got < YIELD_AFTER and not self._done:
            if self._remaining:  # inside a chunk's data
                take = min(self._remaining, end - pos, YIELD_AFTER - got)
                if take <= 0:
                    break
                pieces.append(buffer[pos : pos + take])
                pos += take
                got += take
                self._remaining -= take
                if self._remaining:
                    break
                self._crlf = True
            if self._crlf:
                if end - pos < 2:
                    break
                if buffer[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                pos += 2
                self._crlf = False
            limit = MAX_HEAD_BYTES if self._trailer else _MAX_CHUNK_LINE
            what = "trailer" if self._trailer else "chunk size line"
            eol = buffer.find(b"\r\n", pos)
            if eol < 0 or eol - pos > limit:
                if end - pos > limit:
                    raise ProtocolError(f"{what} longer than {limit} bytes")
                break
            line = bytes(buffer[pos:eol])
            pos = eol + 2
            if self._trailer:
                if not line:
                    self._done = True
                    break
                continue
            try:
                size = int(line.partition(b";")[0].strip(), 16)
            except ValueError:
                raise ProtocolError("bad chunk size line") from None
            if size < 0:
                raise ProtocolError("bad chunk size line")
            if size == 0:
                self._trailer = True
                continue
            self._total += size
            if self._total > self.limit:
                raise BodyTooLarge(self.limit)
            self._remaining = size
        if pos:
            del buffer[:pos]
            conn.unyielded += pos
        return b"".join(pieces)


async def read_capped(response: HttpResponse, limit: int | None = None) -> bytes:
    """Read a whole body, refusing more than ``limit`` bytes (default: the session's cap)."""
    if limit is not None and limit < response.limit:
        response.limit = limit
    if response._done:
        return b""
    if response._mode == "length" and response._remaining <= response.limit:
        # The common case (a JSON body with Content-Length): one read, no generator.
        data = await response._conn.read_exactly(response._remaining)
        response._remaining = 0
        response._done = True
        return data
    pieces = []
    while data := await response.next_piece():
        pieces.append(data)
    return b"".join(pieces)


def parse_head(head: bytes) -> tuple[int, Headers, bool]:
    """Status code, headers and whether the connection may be kept alive, from a response's
    head (up to, not including, its blank line)."""
    text = head.decode("latin-1")
    status_line, _, _ = text.partition("\r\n")
    version, _, tail = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ProtocolError(f"not an HTTP/1.x response: {status_line[:60]!r}")
    code = tail[:3]
    if len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"bad status line: {status_line[:60]!r}")
    # The common case in C: every line "name: value", no name twice.
    pairs = _HEADER_LINE.findall(text)
    fields = {name.lower(): value.strip() for name, value in pairs}
    if len(pairs) != text.count("\r\n") or len(fields) != len(pairs):
        fields = _parse_fields(text.split("\r\n")[1:])
    connection = fields.get("connection")
    if version == "HTTP/1.1":
        keep_alive = connection is None or "close" not in connection.lower()
    else:
        keep_alive = connection is not None and "keep-alive" in connection.lower()
    return int(code), Headers(fields), keep_alive


def _parse_fields(lines: list[str]) -> dict[str, str]:
    """Header lines one by one: a line without a colon is an error, a repeated name is
    joined with a comma (as HTTP allows)."""
    fields: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line: {line[:60]!r}")
        key = name.lower()
        if key in fields:
            fields[key] = f"{fields[key]}, {value.strip()}"
        else:
            fields[key] = value.strip()
    return fields
