"""The shortcuts of the runner's boundary never let through what the full path would stop.

Redaction's substring pre-check and memo, the cleaning's printable-ASCII shortcut, the one-walk
clean-and-redact of details and the per-layout observation checks are each held here to the
slow path they stand in for: a secret, an unsafe character or a malformed observation that the
full path catches must still be caught, whatever was seen (and remembered) before.
"""

from __future__ import annotations

import random
from typing import Any

from alivemcp.engine.runner import _validated
from alivemcp.hygiene import redact as redaction
from alivemcp.hygiene.redact import REDACTED, redact, redact_text, register_secret
from alivemcp.hygiene.untrusted import clean_details, clean_label, clean_text
from alivemcp.probe import LabeledObservation, Observable, ProbeResult, Status

#: Fragments every redaction pattern is made of, in varied case, to build texts that match.
_FRAGMENTS = (
    "Bearer ",
    "bAsIc ",
    "abcdef123456",
    "https://hooks.slack.com/services/T0/B0/x",
    "https://",
    "user:pw@",
    "://u:p@",
    "PASSWORD=",
    "passwd: ",
    "Secret=",
    "TOKEN:",
    "api_key=",
    "API-KEY=",
    "apikey=",
    "AKIAABCDEFGHIJKLMNOP",
    "ASIA0123456789ABCDEF",
    "value",
    " ",
    "=",
    ":",
    "@",
    "/",
    '"',
    "'",
    "x",
    "tok",
    "en",
    "sec",
    "ret",
    "AK",
    "IA",
)


def _slow_redact_text(text: str) -> str:
    """What redact_text did before its shortcuts: every pattern, unconditionally."""
    text = redaction._replace_known(text)
    for pattern, replacement in redaction._PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 8))) for _ in range(count)]


def test_the_substring_pre_check_never_skips_a_text_a_pattern_matches() -> None:
    matched = 0
    for text in _texts(20_000, seed=17):
        if any(pattern.search(text) for pattern, _ in redaction._PATTERNS):
            matched += 1
            assert redaction._may_match(text), text
        assert redact_text(text) == _slow_redact_text(text), text
    assert matched > 5_000  # the texts really exercise the patterns


def test_non_ascii_case_folding_is_still_redacted() -> None:
    # re's IGNORECASE folds U+017F (long s) onto "s" and U+212A (Kelvin) onto "k": lower()
    # does not, so such text must not take the ASCII shortcut.
    for text in ("\u017fecret=hunter22", "api\u212aey=hunter22", "to\u212aen: hunter22"):
        assert redact_text(text) == _slow_redact_text(text)
        assert "hunter22" not in redact_text(text)


def test_a_secret_registered_after_a_text_was_remembered_is_redacted_next_time() -> None:
    text = "server said: late-secret-4711 is wrong"
    assert redact_text(text) == text  # remembered as clean
    register_secret("late-secret-4711")
    assert redact_text(text) == f"server said: {REDACTED} is wrong"
    assert clean_details({"note": text}, redacted=True) == {
        "note": f"server said: {REDACTED} is wrong"
    }


def test_the_memo_is_dropped_when_the_secrets_change_behind_its_back() -> None:
    # Secrets are only ever added through register_secret in the daemon; the memo also checks
    # their number, so a change made any other way cannot serve a stale answer.
    text = "quiet-value-9911 here"
    assert redact_text(text) == text
    redaction._known.add("quiet-value-9911")
    assert redact_text(text) == f"{REDACTED} here"


def test_the_memo_stays_bounded() -> None:
    for i in range(redaction._MEMO_SIZE * 2):
        redact_text(f"text number {i}")
    assert len(redaction._memo) <= redaction._MEMO_SIZE
    long_text = "y" * (redaction._MEMO_TEXT + 1)
    redact_text(long_text)
    assert long_text not in redaction._memo


def test_secret_keys_are_judged_as_before() -> None:
    for key in (
        "Authorization",
        "x-api-key",
        "private_key",
        "session-id",
        "name",
        "tools",
        "Routing-Key",
        "monkey",
        "tokenizer",
    ):
        expected = redaction.SECRET_KEY.search(key) is not None
        assert redaction.is_secret_key(key) is expected  # computed
        assert redaction.is_secret_key(key) is expected  # remembered
        assert (redact({key: "v"}) == {key: REDACTED}) is expected


def test_cleaning_shortcut_leaves_no_unsafe_character() -> None:
    rng = random.Random(5)
    alphabet = [chr(c) for c in range(0, 0xA0)] + ["\ud800", "\udfff", "é", "\u2028"]
    for _ in range(5_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        for cleaned, pattern in (
            (clean_text(text), r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"),
            (clean_label(text), r"[\x00-\x1f\x7f-\x9f]"),
        ):
            cleaned.encode("utf-8")  # no lone surrogate left
            assert not __import__("re").search(pattern, cleaned), repr(cleaned)
            if text.isascii() and text.isprintable():
                assert cleaned == text


def _hostile_details(rng: random.Random, depth: int = 0) -> Any:
    scalars: list[Any] = [
        None,
        True,
        0,
        7,
        1.5,
        float("nan"),
        float("inf"),
        "",
        "plain",
        "Bearer abcdefgh123",
        "line\nbreak\x00nul",
        "\udc80lone",
        "x" * 5000,
        "token=hunter2",
        "https://u:pw@host/x",
    ]
    if depth >= 9 or rng.random() < 0.4:
        return rng.choice(scalars)
    if rng.random() < 0.5:
        keys = [
            "a",
            "password",
            "api_key",
            "tools",
            "Authorization",
            "k" * 300,
            "\x07bell",
            "notes",
            "secret_sauce",
        ]
        return {
            rng.choice(keys) + str(i % 3): _hostile_details(rng, depth + 1)
            for i in range(rng.randint(0, 5))
        }
    return [_hostile_details(rng, depth + 1) for _ in range(rng.randint(0, 5))]


def test_one_walk_clean_and_redact_equals_the_two_walks() -> None:
    register_secret("hunter2")
    rng = random.Random(11)
    for _ in range(400):
        details = {
            "root": _hostile_details(rng),
            "server_name": "srv hunter2",
            "token": "abc",
            "empty_token": "",
        }
        expected = redact(clean_details(details))
        assert repr(clean_details(details, redacted=True)) == repr(expected)
    huge = {f"key{i}": "v" * 3000 for i in range(300)}
    assert clean_details(huge, redacted=True) == redact(clean_details(huge))


_DECLARED = (
    Observable("total_seconds", "t"),
    Observable("tools", "n"),
    Observable("mcp_server_info", "i", ("server_name", "transport")),
)


def _result(
    seconds: object = 0.5,
    info: object = 1.0,
    name: object = "srv",
    observations: dict[Any, Any] | None = None,
) -> ProbeResult:
    return ProbeResult(
        Status.UP,
        "ok",
        observations if observations is not None else {"total_seconds": seconds, "tools": 2},
        [
            LabeledObservation(
                "mcp_server_info",
                info,  # type: ignore[arg-type]
                {"server_name": name, "transport": "sse"},
            )
        ],  # type: ignore[dict-item]
        {"server_name": "srv"},
    )


def test_a_layout_seen_well_formed_still_has_its_values_checked_every_run() -> None:
    good = _result()
    assert _validated(good, _DECLARED) is good
    assert _validated(_result(seconds=0.7), _DECLARED).status is Status.UP  # shortcut taken
    for bad, fragment in (
        (_result(seconds=float("nan")), "NaN"),
        (_result(seconds=True), "bool, not a number"),
        (_result(seconds="0.5"), "str, not a number"),
        (_result(info=float("nan")), "NaN"),
        (_result(name=3), "invalid labels"),
        (_result(observations={"total_seconds": 0.5, "tools": 2, "extra": 1}), "not declared"),
        (_result(observations={"total_seconds": 0.5, ("tools",): 2}), "is not [a-z_]"),
    ):
        checked = _validated(bad, _DECLARED)
        assert checked.status is Status.UNKNOWN, fragment
        assert checked.reason.startswith("probe returned garbage: ") and fragment in checked.reason
    undeclared_label = ProbeResult(
        Status.UP,
        "ok",
        {"total_seconds": 0.5, "tools": 2},
        [LabeledObservation("mcp_server_info", 1.0, {"server_name": "srv", "region": "x"})],
    )
    assert "undeclared labels" in _validated(undeclared_label, _DECLARED).reason
