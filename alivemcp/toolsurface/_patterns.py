"""The patterns behind :mod:`alivemcp.toolsurface.findings`, kept apart so the rules read as
rules.

Cost is linear in the text: no pattern has nested unbounded repetition, every gap between
words is bounded (``{0,N}``), and none crosses the NUL that separates an item's strings. The
phrase patterns are :class:`Phrase` s, written in lower case, each beginning with one of its
``anchors`` (literal words). :func:`scan` looks for each anchor once (``str.find``) in the
lower-cased text of a whole surface and tries a phrase, anchored, only where one of its
anchors starts a word, and only when the text holds every group of its ``needs``. Scanning
each pattern with ``re.IGNORECASE`` and a leading ``\\b`` measured 20 to 100 ns per
character on prose dense with their words; this costs a few.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BEFORE_TOOL",
    "BEFORE_TOOL_OBJECT",
    "BEFORE_TOOL_VERB",
    "DIRECTIVES",
    "FLAG_SEQUENCE",
    "HIDDEN",
    "HIDING",
    "LOCAL_SOURCE",
    "REQUEST_VERB",
    "SECRET_NAME",
    "SECRET_STRONG",
    "SECRET_WEAK",
    "SHADOWING",
    "Phrase",
    "scan",
]


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity
class Phrase:
    """A pattern that begins with one of ``anchors``; ``needs``: groups of substrings of which
    a text must hold one each for the pattern to be tried at all; ``severity`` and ``what``
    for the finding it makes (where the rule has several)."""

    anchors: tuple[str, ...]
    pattern: re.Pattern[str]
    needs: tuple[tuple[str, ...], ...] = ()
    severity: str = "warning"
    what: str = ""

    def ready(self, low: str) -> bool:
        """Whether ``low`` holds one substring of every group of ``needs``."""
        return all(any(t in low for t in group) for group in self.needs)

    def matches(self, low: str) -> list[re.Match[str]]:
        """The matches in ``low`` (lower-cased text) that start a word, in text order. A match
        starting with ``.`` (``.env``) must not follow a word character or a dot
        (``process.env``)."""
        if not self.ready(low):
            return []
        found: dict[int, re.Match[str]] = {}
        for anchor in self.anchors:
            edge = anchor[0].isalnum() or anchor[0] == "."
            at = low.find(anchor)
            while at >= 0:
                if at not in found and (not edge or at == 0 or _edge(low[at - 1], anchor[0])):
                    match = self.pattern.match(low, at)
                    if match is not None:
                        found[at] = match
                at = low.find(anchor, at + 1)
        return [found[at] for at in sorted(found)]


def _edge(before: str, first: str) -> bool:
    return not (before.isalnum() or before == "_" or (first == "." and before == "."))


# -- invisible characters ------------------------------------------------------------------------

#: A visible character outside ASCII (the neighbour that makes a joiner or a mark legitimate).
_WIDE = (
    "[^\\x00-\\x7f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\ufe00-\\ufe0f\\ufeff"
    "\\U000e0000-\\U000e0fff]"
)
#: Each named group is one class of hiding character (see findings.invisible_characters).
HIDDEN = re.compile(
    "(?P<tags>[\\U000e0000-\\U000e007f]+)"
    "|(?P<override>[\\u202a-\\u202e])"
    "|(?P<isolate>[\\u2066-\\u2069])"
    "|(?P<selectors>[\\ufe00-\\ufe0f\\U000e0100-\\U000e01ef]{2,})"
    # One selector after printable ASCII, except a keycap (1, #, * then U+FE0F U+20E3).
    "|(?P<selector>(?<=[\\x21-\\x7e])[\\ufe00-\\ufe0f](?!\\u20e3))"
    "|(?P<zero_width>[\\u200b\\u2060-\\u2065\\u206a-\\u206f\\ufeff\\u180e\\u115f\\u1160\\u3164"
    "\\uffa0\\u034f\\u17b4\\u17b5\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a])"
    # Joiners and direction marks are how Persian, Indic scripts, RTL text and emoji
    # sequences are written: only one with ASCII (or nothing) on both sides hides anything.
    f"|(?P<joiner>(?<!{_WIDE})[\\u200c-\\u200f\\u061c](?!{_WIDE}))"
)
#: An emoji subdivision flag (England, Scotland, Wales): the one legitimate use of tag
#: characters, U+1F3F4 then tag letters then CANCEL TAG.
FLAG_SEQUENCE = re.compile(
    "\\U0001f3f4[\\U000e0030-\\U000e0039\\U000e0061-\\U000e007a]{1,6}\\U000e007f"
)
#: Every character removed before the phrase rules read a text (so ``ig<ZWSP>nore`` is read
#: as ``ignore``).
HIDING = re.compile(
    "[\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f"
    "\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0"
    "\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]+"
)

# -- model_directives ----------------------------------------------------------------------------

_USER = r"(?:the\s+|your\s+|any\s+)?users?\b(?!['\u2019]s)"
_NEGATIONS = ("do", "don", "never", "must", "should", "shouldn", "without")
_NEGATION = ("not", "n't", "n\u2019t", "never", "without")
_CONCEAL = ("tell", "mention", "inform", "notify", "reveal", "disclos", "alert")
_KEEP_FROM = ("hide", "conceal", "keep")
#: Instructions aimed at the model reading the description.
DIRECTIVES: tuple[Phrase, ...] = (
    Phrase(
        ("ignore", "disregard", "forget", "override", "bypass"),
        re.compile(
            r"(?:ignore|disregard|forget|override|bypass)\s+(?:(?:all|any|the|your|of|every)"
            r"\s+){0,3}(?:previous|prior|above|earlier|preceding|former|original|system)\s+"
            r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages)\b"
        ),
        (("previous", "prior", "above", "earlier", "preceding", "former", "original", "system"),),
        "critical",
        "an order to ignore earlier instructions",
    ),
    Phrase(
        _NEGATIONS,
        re.compile(
            r"(?:do\s+not|don['\u2019]?t|never|must\s+not|should\s+not|shouldn['\u2019]?t|without)"
            r"\s+(?:ever\s+)?(?:tell(?:ing)?|mention(?:ing)?|inform(?:ing)?|notify(?:ing)?|"
            r"reveal(?:ing)?|disclos(?:e|ing)|alert(?:ing)?)\s+(?:(?:this|it|that|anything|"
            r"about\s+this)\s+)?(?:to\s+)?"
            + _USER
            # "Do not mention that you first need to read the file" (the published poisoning
            # example): what the model does kept from the user, the user left implicit.
            + r"|(?:do\s+not|don['\u2019]?t|never)\s+(?:tell|mention|reveal|disclose)\s+"
            r"(?:that|how|why)\s+you\b"
            r"|(?:do\s+not|don['\u2019]?t|never)\s+let\s+" + _USER + r"\s+(?:know|see|find\s+out)\b"
        ),
        (_NEGATION, (*_CONCEAL, "let")),
        "critical",
        "an order to keep something from the user",
    ),
    Phrase(
        (*_KEEP_FROM, "the user"),
        re.compile(
            r"(?:hide|conceal|keep)\s+(?:[^\s\x00]+\s+){0,4}?(?:secret\s+|hidden\s+)?from\s+"
            + _USER
            + r"|the\s+user\s+(?:must|should|need|needs)\s+not\s+(?:know|see|notice|"
            r"be\s+(?:told|informed|aware)|find\s+out)\b"
        ),
        (("user",),),
        "critical",
        "an order to keep something from the user",
    ),
    Phrase(
        ("<", "["),
        re.compile(
            r"<\s*/?\s*(?:important|system|sys|admin|secret|hidden|override|critical|"
            r"developer|instructions?[_-]override)\s*>"
            r"|\[\s*/?\s*(?:system|inst)\s*\]|<\|\s*(?:im_start|im_end|system|endoftext)\s*\|>"
            r"|<<\s*/?\s*sys\s*>>"
        ),
        (
            (
                "important",
                "sys",
                "admin",
                "secret",
                "hidden",
                "override",
                "critical",
                "developer",
                "inst",
                "im_",
                "endoftext",
            ),
        ),
        "warning",
        "a system-style block (<IMPORTANT>, <SYSTEM>, chat-template tokens)",
    ),
    Phrase(
        (
            "reveal",
            "print",
            "output",
            "repeat",
            "show",
            "leak",
            "dump",
            "disclose",
            "you are",
            "new",
            "updated",
            "real",
            "true",
        ),
        re.compile(
            r"(?:reveal|print|output|repeat|show|leak|dump|disclose)\s+(?:[^\s\x00]+\s+){0,3}?"
            r"(?:system|hidden|developer)\s+(?:prompt|instructions|message)\b"
            r"|you\s+are\s+now\s+(?:in\s+)?(?:a|an|the|developer|jailbreak|dan|unrestricted)\b"
            r"|(?:new|updated|real|true)\s+(?:system\s+)?instructions\s*:"
        ),
        (("prompt", "instructions", "message", "you are now"),),
        "warning",
        "an attempt to re-instruct the model",
    ),
    Phrase(
        ("you", "always", "must"),
        re.compile(
            r"you\s+(?:must|should|have\s+to|need\s+to)\s+always\b"
            r"|(?:always|must)\s+(?:call|use|run|invoke)\s+this\s+tool\s+(?:first|before\s+"
            r"(?:any|every|all)\s+other)"
        ),
        (("always", "first", "other"),),
        "info",
        "an absolute order to the model",
    ),
)
#: "Before using this tool, ..." followed in the same sentence by a verb of taking or sending
#: and something local (a path, a file's contents, a secret): the poisoning recipe.
BEFORE_TOOL = Phrase(
    ("before",),
    re.compile(
        r"before\s+(?:using|calling|invoking|running|executing)\s+(?:this|the|any|these)\s+"
        r"(?:tool|function|tools|functions)\b[^.!?\n\x00]{0,240}"
    ),
    (("tool", "function"),),
)
BEFORE_TOOL_VERB = re.compile(
    r"\b(?:read|cat|open|send|pass|include|upload|forward|transmit|attach|paste|post|"
    r"copy|provide|collect)\b"
)
BEFORE_TOOL_OBJECT = re.compile(
    r"~/|(?<![\w.])\.\w+/|\b(?:contents?|sidenote|credentials?|secrets?|passwords?|tokens?|"
    r"keys?|config(?:uration)?\s+files?|conversation|chat\s+history)\b"
)

# -- secret_paths --------------------------------------------------------------------------------

#: Paths and names that only mean local secrets (the dot-files share one anchor: a sentence's
#: full stop costs one failed match, cheaper than a dozen more passes over the text).
SECRET_STRONG = Phrase(
    (
        "~/.ssh",
        ".",
        "id_",
        "authorized_keys",
        "aws_secret_access_key",
        "/etc/shadow",
        "mcp.json",
        "claude_desktop_config.json",
        "wallet.dat",
        "-----begin",
    ),
    re.compile(
        r"~/\.ssh\b|id_(?:rsa|dsa|ecdsa|ed25519)\b|authorized_keys\b|aws_secret_access_key\b"
        r"|/etc/shadow\b|mcp\.json\b|claude_desktop_config\.json\b|wallet\.dat\b"
        r"|-----begin [a-z ]{0,20}private key-----"
        r"|\.(?:ssh/|aws/credentials\b|netrc\b|git-credentials\b|docker/config\.json\b"
        r"|kube/config\b|gnupg\b|pgpass\b|config/gcloud\b|azure/\w|(?:bash|zsh)_history\b"
        r"|npmrc\b|pypirc\b)"
    ),
)
#: Names that may mean secrets or may be a neutral mention (``.env`` files, private keys).
SECRET_WEAK = Phrase(
    (".", "private", "seed", "keychain", "browser"),
    re.compile(
        r"\.env(?:\.[\w-]{1,20})?\b|private[\s_-]?keys?\b|seed[\s_-]?phrases?\b"
        r"|keychain\b|browser\s+(?:cookies|passwords)\b"
    ),
)
#: A request, in the imperative (``read``, not ``reads``: "Reads .env files" describes what a
#: tool does; "read the .env file" tells the model what to do).
REQUEST_VERB = re.compile(
    r"\b(?:read|cat|open|load|get|fetch|retrieve|extract|copy|include|send|pass|attach|"
    r"upload|provide|forward|paste|dump|print|output|collect|grab|exfiltrate)\b"
    r"|\bcontents?\s+of\b"
)
#: A schema property named like a secret (its description is then read with LOCAL_SOURCE).
SECRET_NAME = re.compile(
    r"token|passw|secret|api[_-]?key|apikey|credential|private[_-]?key|ssh|cookie"
    r"|session[_-]?id|access[_-]?key|mnemonic|seed",
    re.IGNORECASE,
)
#: A description that sends the model to a local source for a value.
LOCAL_SOURCE = re.compile(
    r"~/|(?<![\w.])\.\w+/|\b(?:read|cat|open|load)\s+(?:\S+\s+){0,4}?(?:file|from)\b"
    r"|\bcontents?\s+of\b|\b(?:from|in)\s+(?:the\s+|your\s+)?(?:local\s+)?(?:disk|"
    r"filesystem|file\s+system|home\s+directory|environment|env\s+file|\.env|config\s+file)\b"
)

# -- tool_shadowing ------------------------------------------------------------------------------


def _token(n: int) -> str:
    """A tool name as written (backquoted, quoted or a bare identifier), in groups named
    ``t<n>q``, ``t<n>d``, ``t<n>s`` (quoted forms) and ``t<n>b`` (bare), then ``t<n>tool``:
    the text itself called it a tool."""
    return (
        f'(?:`(?P<t{n}q>[^`\\s\\x00]{{1,64}})`|"(?P<t{n}d>[^"\\s\\x00]{{1,64}})"'
        f"|'(?P<t{n}s>[^'\\s\\x00]{{1,64}})'|(?P<t{n}b>[a-z_][\\w.:/-]{{0,63}}))"
        f"(?P<t{n}tool>\\s+tool\\b)?"
    )


_CALLED = r"\s+(?:is|gets|are|get|was|has\s+been)\s+(?:called|used|invoked|run|executed)\b"
#: Phrases that make another tool something to avoid, replace or condition (the token is the
#: tool), numbered as their groups are. Phrase 1 (``when X is called``) is the one that may
#: name a tool of another server: findings.tool_shadowing accepts an unknown name there when
#: the text calls it a tool.
SHADOWING: tuple[Phrase, ...] = (
    Phrase(
        ("instead", "rather", "in place"),
        re.compile(
            r"(?:instead\s+of|rather\s+than|in\s+place\s+of)\s+(?:using\s+|calling\s+)?"
            r"(?:the\s+)?" + _token(0)
        ),
    ),
    Phrase(
        ("when", "every time", "each time", "once"),
        re.compile(
            r"(?:when|whenever|every\s+time|each\s+time|once)\s+(?:the\s+)?" + _token(1) + _CALLED
        ),
        (("called", "used", "invoked", "run", "executed"),),
    ),
    Phrase(
        ("before", "after", "prior"),
        re.compile(
            r"(?:before|after|prior\s+to)\s+(?:using|calling|invoking|running)\s+(?:the\s+)?"
            + _token(2)
        ),
    ),
    Phrase(
        ("do", "don", "never", "must", "should"),
        re.compile(
            r"(?:do\s+not|don['\u2019]?t|never|must\s+not|should\s+not)\s+(?:use|call|invoke|run)"
            r"\s+(?:the\s+)?" + _token(3)
        ),
        (("use", "call", "invoke", "run"),),
    ),
    Phrase(
        ("replace", "override", "shadow", "supersede", "intercept"),
        re.compile(
            r"(?:replaces?|overrides?|shadows?|supersedes?|intercepts?)\s+(?:the\s+)?" + _token(4)
        ),
    ),
)


# -- one pass for every phrase -------------------------------------------------------------------

PHRASES: tuple[Phrase, ...] = (*DIRECTIVES, BEFORE_TOOL, SECRET_STRONG, SECRET_WEAK, *SHADOWING)


def _by_anchor() -> dict[str, tuple[Phrase, ...]]:
    """Anchor → the phrases to try where it is found. An anchor another one begins with is
    not looked for again (``find("do")`` also finds every ``don``): its phrases go with the
    shorter one, tried at the same places."""
    kept: dict[str, list[Phrase]] = {}
    for anchor in sorted({a for ph in PHRASES for a in ph.anchors}, key=len):
        shorter = next((k for k in kept if anchor.startswith(k)), anchor)
        phrases = kept.setdefault(shorter, [])
        phrases += [ph for ph in PHRASES if anchor in ph.anchors and ph not in phrases]
    return {anchor: tuple(phrases) for anchor, phrases in kept.items()}


#: Anchor → the phrases that begin with it, or with a longer anchor it begins.
_PHRASES_AT = _by_anchor()


def scan(low: str) -> dict[Phrase, list[re.Match[str]]]:
    """Every phrase's matches in ``low`` (lower-cased text), in text order; a phrase with none
    is absent. The same as :meth:`Phrase.matches` for each phrase, with each anchor looked for
    once (``str.find``: one alternation of all the anchors measured 60 to 120 ns a character
    in re, ``find`` well under one), and only for phrases whose ``needs`` the text meets."""
    found: dict[Phrase, dict[int, re.Match[str]]] = {}
    ready: dict[Phrase, bool] = {}
    for anchor, phrases in _PHRASES_AT.items():
        at = low.find(anchor)
        if at < 0:
            continue
        live = []
        for phrase in phrases:
            ok = ready.get(phrase)
            if ok is None:
                ok = ready[phrase] = phrase.ready(low)
            if ok:
                live.append(phrase)
        edge = anchor[0].isalnum() or anchor[0] == "."
        while live and at >= 0:
            if not edge or at == 0 or _edge(low[at - 1], anchor[0]):
                for phrase in live:
                    match = phrase.pattern.match(low, at)
                    if match is not None:
                        found.setdefault(phrase, {})[at] = match
            at = low.find(anchor, at + 1)
    return {phrase: [hits[at] for at in sorted(hits)] for phrase, hits in found.items()}
