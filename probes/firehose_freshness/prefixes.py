"""Where Firehose puts a record: the S3 destination as described, and its prefix expanded.

A prefix may hold expressions: ``!{timestamp:yyyy}`` (the record's arrival time, UTC),
``!{partitionKeyFromQuery:k}`` (key ``k`` of the stream's JQ ``MetadataExtractionQuery``),
``!{partitionKeyFromLambda:k}`` (key ``k`` the transformation Lambda returns) and
``!{firehose:random-string}``/``!{firehose:error-output-type}``. The probe expands what it can
know (times, and partition keys it is told or can compute from the canary it sent) and leaves
the rest as a wildcard: an :class:`ExpandedPrefix` is a listing prefix (the literal part up to
the first wildcard) plus a pattern the whole key must start with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "DEFAULT_BUFFER_INTERVAL",
    "DEFAULT_ERROR_PREFIXES",
    "ERROR_TYPES",
    "Destination",
    "ExpandedPrefix",
    "UnresolvedKey",
    "error_listing_prefixes",
    "expand_prefix",
    "expected_prefixes",
    "jq_partition_keys",
    "partition_expressions",
    "s3_destination",
    "static_part",
]

#: The error output types Firehose writes for S3 destinations (``!{firehose:error-output-type}``).
ERROR_TYPES = (
    "processing-failed",
    "format-conversion-failed",
    "partitioning-failed",
    "delivery-failed",
)
#: Where Firehose writes failed records when the destination sets no ErrorOutputPrefix.
DEFAULT_ERROR_PREFIXES = tuple(f"{kind}/" for kind in ERROR_TYPES)
_ERROR_TYPE_TOKEN = "!{firehose:error-output-type}"
#: Firehose's documented default when the buffering hints leave the interval out.
DEFAULT_BUFFER_INTERVAL = 300.0
_TOKEN = re.compile(r"!\{([^}]*)\}")
_JAVA_TIME = (("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"))
_QUERY_KEY = "partitionKeyFromQuery:"
_LAMBDA_KEY = "partitionKeyFromLambda:"


@dataclass(frozen=True)
class Destination:
    """The parts of an S3 destination the probe needs."""

    bucket: str
    prefix: str
    error_prefix: str
    buffer_interval: float
    compression: str
    transformed: bool
    #: "parquet" or "orc" when DataFormatConversionConfiguration is enabled.
    columnar: str | None
    dynamic_partitioning: bool
    #: The JQ MetadataExtractionQuery of dynamic partitioning (inline parsing), if any.
    metadata_query: str | None
    #: Whether the AppendDelimiterToRecord processor adds the newline after each record.
    appends_newline: bool


@dataclass(frozen=True)
class ExpandedPrefix:
    """A prefix with what can be known filled in: list ``listing``, keep keys matching
    ``pattern`` (anchored at the start). ``shown`` is the prefix as people read it, with
    ``*`` where a part is unknown."""

    listing: str
    pattern: re.Pattern[str]
    shown: str

    def holds(self, key: str) -> bool:
        return self.pattern.match(key) is not None


class UnresolvedKey(ValueError):
    """A partition key expression the probe cannot fill in."""

    def __init__(self, expression: str) -> None:
        super().__init__(expression)
        self.expression = expression


def s3_destination(desc: Mapping[str, Any]) -> Destination | None:
    """The (Extended) S3 destination of a ``DeliveryStreamDescription``."""
    for destination in desc.get("Destinations") or []:
        conf = destination.get("ExtendedS3DestinationDescription") or destination.get(
            "S3DestinationDescription"
        )
        if not conf:
            continue
        hints = conf.get("BufferingHints") or {}
        processing = conf.get("ProcessingConfiguration") or {}
        processors = (processing.get("Processors") or []) if processing.get("Enabled") else []
        conversion = conf.get("DataFormatConversionConfiguration") or {}
        return Destination(
            bucket=str(conf.get("BucketARN", "")).split(":")[-1],
            prefix=conf.get("Prefix") or "",
            error_prefix=conf.get("ErrorOutputPrefix") or "",
            buffer_interval=float(hints.get("IntervalInSeconds", DEFAULT_BUFFER_INTERVAL)),
            compression=conf.get("CompressionFormat") or "UNCOMPRESSED",
            transformed=any(proc.get("Type") == "Lambda" for proc in processors),
            columnar=_columnar(conversion),
            dynamic_partitioning=bool(
                (conf.get("DynamicPartitioningConfiguration") or {}).get("Enabled")
            ),
            metadata_query=_processor_parameter(
                processors, "MetadataExtraction", "MetadataExtractionQuery"
            ),
            appends_newline=any(
                proc.get("Type") == "AppendDelimiterToRecord" for proc in processors
            ),
        )
    return None


def _columnar(conversion: Mapping[str, Any]) -> str | None:
    if not conversion.get("Enabled"):
        return None
    serializer = (conversion.get("OutputFormatConfiguration") or {}).get("Serializer") or {}
    return "orc" if "OrcSerDe" in serializer else "parquet"


def _processor_parameter(processors: list[Mapping[str, Any]], kind: str, name: str) -> str | None:
    for proc in processors:
        if proc.get("Type") != kind:
            continue
        for param in proc.get("Parameters") or []:
            if param.get("ParameterName") == name:
                return str(param.get("ParameterValue"))
    return None


def static_part(prefix: str) -> str:
    """The literal part of a Firehose prefix before its first ``!{...}`` expression."""
    match = _TOKEN.search(prefix)
    return prefix if match is None else prefix[: match.start()]


def error_listing_prefixes(error_prefix: str) -> list[str]:
    """Literal prefixes to list for failed records: one per error type when the prefix
    names the type, never the whole bucket (where the good deliveries also live)."""
    if _ERROR_TYPE_TOKEN in error_prefix:
        expanded = [
            static_part(error_prefix.replace(_ERROR_TYPE_TOKEN, kind)) for kind in ERROR_TYPES
        ]
        return list(dict.fromkeys(expanded))
    static = static_part(error_prefix)
    return [static] if static else list(DEFAULT_ERROR_PREFIXES)


def expand_prefix(
    prefix: str, moment: datetime, partition_values: Mapping[str, str]
) -> ExpandedPrefix:
    """``prefix`` with its timestamps expanded for ``moment`` and its partition keys from
    ``partition_values`` (keyed by the whole expression, e.g. ``partitionKeyFromQuery:t``);
    other expressions are wildcards within one path segment. Raises :class:`UnresolvedKey`
    for a partition key without a value."""
    literal: list[str] = []
    regex: list[str] = []
    shown: list[str] = []
    listing: str | None = None
    pos = 0
    for match in _TOKEN.finditer(prefix):
        text = prefix[pos : match.start()]
        literal.append(text)
        regex.append(re.escape(text))
        shown.append(text)
        expr = match.group(1)
        value = _expression_value(expr, moment, partition_values)
        if value is None:
            if listing is None:
                listing = "".join(literal)
            regex.append("[^/]*")
            shown.append("*")
        else:
            literal.append(value)
            regex.append(re.escape(value))
            shown.append(value)
        pos = match.end()
    tail = prefix[pos:]
    literal.append(tail)
    regex.append(re.escape(tail))
    shown.append(tail)
    return ExpandedPrefix(
        listing="".join(literal) if listing is None else listing,
        pattern=re.compile("".join(regex)),
        shown="".join(shown),
    )


def _expression_value(
    expr: str, moment: datetime, partition_values: Mapping[str, str]
) -> str | None:
    if expr.startswith("timestamp:"):
        fmt = expr.removeprefix("timestamp:")
        for java, c_fmt in _JAVA_TIME:
            fmt = fmt.replace(java, c_fmt)
        return moment.strftime(fmt)
    if expr.startswith((_QUERY_KEY, _LAMBDA_KEY)):
        value = partition_values.get(expr)
        if value is None:
            raise UnresolvedKey(f"!{{{expr}}}")
        return value
    return None  # firehose:random-string and the like: unknowable, a wildcard


def partition_expressions(prefix: str) -> list[str]:
    """The partition key expressions in ``prefix`` (``partitionKeyFromQuery:k``...)."""
    return [
        m.group(1)
        for m in _TOKEN.finditer(prefix)
        if m.group(1).startswith((_QUERY_KEY, _LAMBDA_KEY))
    ]


def expected_prefixes(
    prefix: str,
    put_at: datetime,
    partition_values: Mapping[str, str],
    *,
    dynamic_partitioning: bool,
) -> list[ExpandedPrefix]:
    """Where a record put at ``put_at`` can land: the prefix expanded for the arrival time (a
    few seconds either side, for hour boundaries). Without timestamp or partition
    expressions, Firehose appends ``yyyy/MM/dd/HH/`` itself."""
    out: list[ExpandedPrefix] = []
    for moment in (put_at - timedelta(seconds=10), put_at, put_at + timedelta(seconds=30)):
        candidate = prefix
        if (
            "!{timestamp:" not in prefix
            and not dynamic_partitioning
            and (prefix == "" or prefix.endswith("/"))
        ):
            candidate = prefix + moment.strftime("%Y/%m/%d/%H/")
        expanded = expand_prefix(candidate, moment, partition_values)
        if all(e.shown != expanded.shown for e in out):
            out.append(expanded)
    return out


# --- JQ inline parsing, the simple form ---------------------------------------------------------

_JQ_OBJECT = re.compile(r"^\s*\{(.*)\}\s*$", re.S)
_JQ_ENTRY = re.compile(
    r"""^\s*(?:"(?P<quoted>[^"]+)"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))\s*:\s*(?P<path>\S.*?)\s*$""",
    re.S,
)
_JQ_SEGMENT = re.compile(r"""\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\.?\[\s*"(?P<quoted>[^"]+)"\s*\]""")


def jq_partition_keys(query: str, document: Mapping[str, Any]) -> dict[str, str] | None:
    """Evaluate a ``MetadataExtractionQuery`` of the simple form inline parsing writes,
    ``{key: .path.to.field, ...}``, over ``document``, as Firehose's JQ would; ``None`` when
    the query is anything else (the probe then needs the values given). A key whose value is
    missing, null or not a scalar is left out (Firehose would fail to partition the record)."""
    body = _JQ_OBJECT.match(query)
    if body is None:
        return None
    out: dict[str, str] = {}
    for entry in _split_top_level(body.group(1)):
        parsed = _JQ_ENTRY.match(entry)
        if parsed is None:
            return None
        key = parsed.group("quoted") or parsed.group("name")
        path = parsed.group("path")
        segments = list(_JQ_SEGMENT.finditer(path))
        if (
            not segments
            or not path.startswith(".")
            or "".join(s.group(0) for s in segments) != path.replace(" ", "")
        ):
            return None
        value: Any = document
        for segment in segments:
            field = segment.group("name") or segment.group("quoted")
            value = value.get(field) if isinstance(value, Mapping) else None
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str):
            out[key] = value
        elif isinstance(value, int | float):
            out[key] = json.dumps(value)
    return out


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside quotes and brackets."""
    parts: list[str] = []
    depth = 0
    quoted = False
    current: list[str] = []
    for char in text:
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "[{(":
            depth += 1
        elif not quoted and char in "]})":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return parts
