"""The SSE parser against the framings real servers use (Python SDK: CRLF; npm: LF + ids)."""

from __future__ import annotations

from probes.mcp.sse import SseParser


def test_crlf_event_without_id() -> None:
    events = SseParser().feed(b'event: message\r\ndata: {"id":1}\r\n\r\n')
    assert [(e.event, e.data, e.id) for e in events] == [("message", '{"id":1}', None)]


def test_lf_priming_event_ids_and_notification_first() -> None:
    body = (
        b"id: 0\ndata: \n\n"
        b'event: message\nid: 1\ndata: {"method":"notifications/message"}\n\n'
        b'event: message\nid: 2\ndata: {"id":7}\n\n'
    )
    events = SseParser().feed(body)
    assert [(e.data, e.id) for e in events] == [
        ("", "0"),
        ('{"method":"notifications/message"}', "1"),
        ('{"id":7}', "2"),
    ]


def test_crlf_split_across_chunks_and_byte_by_byte() -> None:
    body = b": comment\r\ndata: line one\r\ndata: line two\r\n\r\ndata: \xc3\xa9\r\n\r\n"
    for size in (1, 2, 3, 7):
        parser = SseParser()
        events = []
        for i in range(0, len(body), size):
            events += parser.feed(body[i : i + size])
        assert [e.data for e in events] == ["line one\nline two", "é"], size


def test_bare_cr_line_endings_and_unfinished_event() -> None:
    parser = SseParser()
    assert [e.data for e in parser.feed(b"data: a\r\rdata: b")] == ["a"]
    assert parser.pending_bytes == len(b"data: b")


def test_last_event_id_and_retry_survive_a_restart() -> None:
    parser = SseParser()
    # The priming event of a 2025-11-25 server: an id, a retry and empty data.
    parser.feed(b"id: s1-0\nretry: 250\ndata: \n\ndata: half an ev")
    assert (parser.last_event_id, parser.retry_ms) == ("s1-0", 250)
    parser.restart()  # a resumed stream: the half event of the old one is gone
    assert parser.pending_bytes == 0
    events = parser.feed(b"data: whole\n\n")
    assert [(e.data, e.id) for e in events] == [("whole", "s1-0")]


def test_bad_id_and_retry_fields_are_ignored() -> None:
    parser = SseParser()
    parser.feed(b"id: 7\nretry: 100\ndata: x\n\n")
    parser.feed(b"id: a\x00b\nretry: 1s\nretry: " + b"9" * 5000 + b"\ndata: y\n\n")
    assert (parser.last_event_id, parser.retry_ms) == ("7", 100)
