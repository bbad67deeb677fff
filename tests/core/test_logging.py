"""Logs are JSON lines off a TTY and never carry secrets, tracebacks included."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import structlog

from alivemcp.hygiene.logging import configure_logging
from alivemcp.hygiene.redact import register_secret


@pytest.fixture
def restore_structlog() -> Iterator[None]:
    # The test binds structlog to pytest's captured stderr, which closes after the test:
    # later loggers must not inherit that stream.
    yield
    structlog.reset_defaults()


def test_json_logs_redact_secrets_in_fields_messages_and_tracebacks(
    capsys: pytest.CaptureFixture[str], restore_structlog: None
) -> None:
    register_secret("pa55word-in-config")
    configure_logging("info", "json")
    log = structlog.get_logger("test.redaction")

    def fail(password: str) -> None:
        api_token = "tok-" + password  # a secret in a local: must not be rendered
        raise ValueError(f"login failed for Bearer {api_token}")

    try:
        fail("pa55word-in-config")
    except ValueError:
        log.exception(
            "probe blew up",
            authorization="Basic dXNlcjpwYXNz",
            url="https://user:hunter2@example.test/x",
            slack="https://hooks.slack.com/services/T000/B000/XXXX",
        )
    log.info("plain", note="password=letmein123 here")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    text = json.dumps(lines)
    for secret in ("pa55word-in-config", "dXNlcjpwYXNz", "hunter2", "T000/B000", "letmein123"):
        assert secret not in text, secret
    first = lines[0]
    assert first["event"] == "probe blew up" and first["level"] == "error"
    assert first["authorization"] == "[REDACTED]"
    assert "ValueError" in json.dumps(first["exception"])  # the traceback is still there
    assert lines[1]["note"] == "password=[REDACTED] here"
