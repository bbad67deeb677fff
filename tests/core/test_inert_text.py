"""Attacker-controlled text made inert (alivemcp.hygiene.untrusted: inert_text, slack_escape,
slack_inert): nothing hidden, nothing that mentions, links or formats in Slack, bounded."""

from __future__ import annotations

import random
import re
import unicodedata

from alivemcp.hygiene.untrusted import (
    clean_text,
    inert_text,
    slack_escape,
    slack_inert,
)

#: Characters a person cannot see, or that change what the following text looks like.
HIDING = {
    "tag block": "\U000e0001\U000e0041\U000e007f",
    "zero-width space": "\u200b",
    "zero-width non-joiner": "\u200c",
    "zero-width joiner": "\u200d",
    "left-to-right mark": "\u200e",
    "right-to-left mark": "\u200f",
    "word joiner..invisible plus": "\u2060\u2061\u2062\u2063\u2064",
    "byte order mark": "\ufeff",
    "bidi embeddings and overrides": "\u202a\u202b\u202c\u202d\u202e",
    "bidi isolates": "\u2066\u2067\u2068\u2069",
    "variation selectors": "\ufe0f\U000e0100",
    "soft hyphen": "\u00ad",
    "hangul filler": "\u3164",
    "line and paragraph separators": "\u2028\u2029",
    "escape and delete": "\x1b\x7f",
    "C1 control": "\x85\x9b",
}


def _codepoints(text: str) -> str:
    return "".join(f"<U+{ord(c):04X}>" for c in text)


def test_every_hiding_character_becomes_a_visible_escape() -> None:
    # Loops rather than parametrize: conftest marks only fixture-free tests as unit tests.
    for name, hidden in HIDING.items():
        shown = inert_text(f"safe{hidden}text", 1000, one_line=False)
        if name == "line and paragraph separators":
            assert shown == "safe\n\ntext"  # line breaks: kept as such, multi-line
        else:
            assert shown == f"safe{_codepoints(hidden)}text", name


def test_every_format_control_and_surrogate_code_point_is_escaped() -> None:
    """Whatever this Python's Unicode tables call a control (Cc), format character (Cf),
    surrogate (Cs) or separator (Zl, Zp) never reaches the output as itself."""
    categories = {"Cc", "Cf", "Cs", "Zl", "Zp"}
    for code in range(0x110000):
        char = chr(code)
        if char in "\t\n\r" or unicodedata.category(char) not in categories:
            continue
        shown = inert_text(f"a{char}b", 100)
        assert char not in shown, f"U+{code:04X} got through"


def test_lone_surrogates_are_escaped_and_the_result_encodes() -> None:
    shown = inert_text("x\ud800y\udfffz", 100)
    assert shown == "x<U+D800>y<U+DFFF>z"
    shown.encode("utf-8")


def test_one_line_form_turns_each_run_of_breaks_and_tabs_into_one_space() -> None:
    assert inert_text("first\r\n\n\tsecond\u2028third", 100) == "first second third"


def test_multi_line_form_keeps_newlines_and_tabs_but_not_a_lone_carriage_return() -> None:
    text = "a\r\nb\n\tc\rd"
    assert inert_text(text, 100, one_line=False) == "a\nb\n\tc<U+000D>d"


def test_emoji_and_script_joiners_stay_as_they_are() -> None:
    """A joiner between two visible non-ASCII characters and one selector after one cannot
    hide anything: emoji, Persian and keycap-free emoji presentation keep rendering."""
    for text in (
        "❤️ ok",
        "👨\u200d👩\u200d👧",
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian, with a ZWNJ
        "☺\ufe0e",
    ):
        assert inert_text(text, 100) == text


def test_a_selector_run_or_a_joiner_beside_ascii_is_escaped() -> None:
    assert inert_text("❤\ufe0f\ufe0f", 100) == "❤\ufe0f<U+FE0F>"  # the second one
    assert inert_text("a\u200db", 100) == "a<U+200D>b"
    assert inert_text("a\ufe0f", 100) == "a<U+FE0F>"
    assert inert_text("\u200d👩", 100) == "<U+200D>👩"


def test_plain_text_passes_unchanged() -> None:
    text = "Read the complete contents of a file <path> & return it as *text*."
    assert inert_text(text, 1000) == text


def test_length_is_capped_without_cutting_an_escape() -> None:
    text = "ab\u202ecd" * 10
    for limit in range(1, 40):
        shown = inert_text(text, limit)
        assert len(shown) <= limit
        assert shown.endswith("…")
        # Every "<U+" that remains is a whole escape.
        assert re.search(r"<U\+(?![0-9A-F]{4,6}>)", shown) is None, shown
        assert not re.search(r"<U?\+?[0-9A-F]*…$", shown), shown


def test_a_huge_value_is_cut_before_it_is_escaped() -> None:
    shown = inert_text("\U000e0041" * 5_000_000, 50)
    assert len(shown) <= 50
    assert shown.startswith("<U+E0041>")


def test_a_non_positive_limit_gives_nothing() -> None:
    assert inert_text("anything", 0) == ""


def test_random_text_always_comes_out_printable_bounded_and_encodable() -> None:
    rng = random.Random(36)
    pool = [chr(c) for c in (*range(0, 0x80), *range(0x80, 0x250), *range(0x2000, 0x2070))]
    pool += ["\ud800", "\udc00", "\ufeff", "\ufe0f", "\U000e0041", "\U0001f600", "\u200d"]
    for _ in range(2_000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 80)))
        limit = rng.randrange(1, 120)
        shown = inert_text(text, limit)
        assert len(shown) <= limit
        shown.encode("utf-8")
        assert "\n" not in shown and "\t" not in shown
        assert all(unicodedata.category(c) not in ("Cc", "Cs", "Zl", "Zp") for c in shown)


def test_existing_cleaning_is_unchanged() -> None:
    """clean_text still repairs (U+FFFD) rather than shows: results keep their old form."""
    assert clean_text("a\x1bb\ud800") == "a\ufffdb\ufffd"


# -- Slack ------------------------------------------------------------------------------------


def test_slack_cannot_form_a_mention_or_a_link() -> None:
    for hostile in (
        "<!channel> now",
        "<!here|here>",
        "<!everyone>",
        "<@U024BE7LH> look",
        "<#C024BE7LR>",
        "<!subteam^SAZ94GDB8>",
        "<https://evil.example/|click me>",
        "<mailto:a@b.example|mail>",
    ):
        shown = slack_escape(hostile)
        assert "<" not in shown and ">" not in shown
        assert shown.startswith("&lt;")


def test_slack_escapes_ampersands_first() -> None:
    assert slack_escape("a & b &lt;") == "a &amp; b &amp;lt;"


def test_slack_broadcast_words_notify_nobody() -> None:
    for word in ("@here", "@channel", "@everyone", "@all", "@HERE", "@Channel"):
        shown = slack_escape(f"hey {word}!")
        assert "@" not in shown
        assert "\uff20" + word[1:] in shown


def test_slack_leaves_other_at_signs_alone() -> None:
    assert slack_escape("mail ops@here.example or @hereafter") == (
        "mail ops@here.example or @hereafter"
    )


def test_slack_mrkdwn_formats_nothing() -> None:
    shown = slack_escape("*bold* ~strike~ `code` ```block``` _italic_ > quote")
    for char in "*~`<>":
        assert char not in shown
    assert "_italic" not in shown and "italic_" not in shown
    assert "\u2217bold\u2217" in shown  # U+2217 ASTERISK OPERATOR


def test_slack_keeps_underscores_inside_identifiers() -> None:
    assert slack_escape("use read_file or list_allowed_directories") == (
        "use read_file or list_allowed_directories"
    )


def test_slack_inert_shows_hidden_characters_and_stays_bounded() -> None:
    shown = slack_inert("<!here>\u202etxt", 100)
    assert shown == "&lt;!here&gt;&lt;U+202E&gt;txt"


def test_slack_inert_never_cuts_an_entity() -> None:
    for limit in range(2, 30):
        shown = slack_inert("&<>" * 20, limit)
        assert len(shown) <= limit
        assert re.search(r"&[a-z]*$", shown.removesuffix("…")) is None, shown


def test_slack_output_never_holds_angle_brackets_for_any_input() -> None:
    rng = random.Random(7)
    pool = [*"<>&!@*_~`|: abcxyz\n", "\u202e", "\ud800", "\U000e0041"]
    for _ in range(1_000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(0, 60)))
        shown = slack_inert(text, rng.randrange(1, 80))
        assert "<" not in shown and ">" not in shown
        assert not re.search(r"(?i)(?<![\w.])@(here|channel|everyone|all)\b", shown)
