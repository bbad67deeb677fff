"""The SSE parser against the framings real servers use (Python SDK: CRLF; npm: LF + ids)."""

from __future__ import annotations

from probes.mcp.sse import SseParser


def test_crlf_event_without_id() -> None:
    events = SseParser().feed(b'event: message\r\ndata: {"id":1}\r\n\r\n')
    assert [(e.event, e.data, e.id) for e in events] == [("message", '{"id":1}', None)]


def test_lf_priming_event_ids_and_notification_first() -> None:
    body = (b"id: 0\ndata: \n\n"
            b"event: message\nid: 1\ndata: {\"method\":\"notifications/message\"}\n\n"
            b"event: message\nid: 2\ndata: {\"id\":7}\n\n")
    events = SseParser().feed(body)
    assert [(e.data, e.id) for e in events] == [
        ("", "0"), ('{"method":"notifications/message"}', "1"), ('{"id":7}', "2")]


def test_crlf_split_across_chunks_and_byte_by_byte() -> None:
    body = b": comment\r\ndata: line one\r\ndata: line two\r\n\r\ndata: \xc3\xa9\r\n\r\n"
    for size in (1, 2, 3, 7):
        parser = SseParser()
        events = []
        for i in range(0, len(body), size):
            events += parser.feed(body[i:i + size])
        assert [e.data for e in events] == ["line one\nline two", "é"], size


def test_bare_cr_line_endings_and_unfinished_event() -> None:
    parser = SseParser()
    assert [e.data for e in parser.feed(b"data: a\r\rdata: b")] == ["a"]
    assert parser.pending_bytes == len(b"data: b")
