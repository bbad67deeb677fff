"""Reading YAML that an operator (or an attacker with write access to a ConfigMap) wrote.

Three things a plain ``yaml.load`` gets wrong for a daemon:

* **Size**: a document is refused above :data:`MAX_DOCUMENT_BYTES` before parsing.
* **Alias bombs**: ``a: &a [x, x]`` / ``b: &b [*a, *a]`` ... doubles per line; 494 bytes can
  expand to billions of nodes once the loaded structure is walked (interpolation, validation).
  The document is first *composed* into its node graph (aliases stay shared, so this is cheap),
  the size the document would have once expanded is counted with memoisation, and a document
  whose aliases expand far beyond its own size is refused before anything walks it.
* **Errors**: messages name the file, line and column (``config.yaml:4:3: …``), and bytes that
  are not UTF-8 are an error with their offset, not a ``UnicodeDecodeError`` traceback.

Speed: libyaml parses in C, but PyYAML resolves every scalar's tag and constructs every value in
Python through generic machinery (a generator per mapping, path-resolver bookkeeping per node).
At 100,000 checks that was about 6 s of CPU for a 5 MB file. :class:`_Loader` keeps PyYAML's
semantics exactly (YAML 1.1 tags, merge keys, shared aliases, its errors) with two shortcuts
that hold because it never registers a path resolver or a wildcard implicit resolver: tags
resolved without the path bookkeeping, and plain strings, ints, lists and maps built by one
small function (:func:`_construct`) that hands every other node to PyYAML's constructor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_EXPANDED_NODES",
    "YamlFileError",
    "decode_utf8",
    "load_yaml",
    "read_text",
]

#: Larger than any real config (100,000 checks is ~20 MB), small enough to parse safely.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
#: Expanded nodes allowed beyond the document's own nodes: aliases used as intended (one anchor
#: of defaults merged into every check) expand a document a few times, a bomb by millions.
MAX_EXPANDED_NODES = 2_000_000
_EXPANSION_FACTOR = 20

# libyaml's C loader parses a 50,000-check file in about a second; pure Python takes tens.
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


class _Loader(_BASE):  # type: ignore[misc]
    """PyYAML's safe loader with its per-node tag resolution made cheap (see the module
    docstring). Equivalent to ``BaseResolver.resolve`` because this class has no path
    resolvers and no implicit resolver registered for "any first character"."""

    _implicit: dict[str, tuple[tuple[str, Any], ...]] = {
        first: tuple(resolvers)
        for first, resolvers in _BASE.yaml_implicit_resolvers.items()
        if first is not None
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        #: Plain scalar -> its tag, for this document: keys and common values repeat.
        self._plain_tags: dict[str, str] = {}

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        return None  # only path resolvers need the path

    def ascend_resolver(self) -> None:
        return None

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode:
            if implicit[0]:
                tag = self._plain_tags.get(value)
                if tag is None:
                    tag = self._plain_tags[value] = self._implicit_tag(value)
                return tag
            return str(self.DEFAULT_SCALAR_TAG)
        if kind is yaml.SequenceNode:
            return str(self.DEFAULT_SEQUENCE_TAG)
        return str(self.DEFAULT_MAPPING_TAG)

    def _implicit_tag(self, value: str) -> str:
        for tag, regexp in self._implicit.get(value[:1], ()):
            if regexp.match(value):
                return str(tag)
        return str(self.DEFAULT_SCALAR_TAG)


assert not _BASE.yaml_path_resolvers and None not in _BASE.yaml_implicit_resolvers


class YamlFileError(ValueError):
    """A document that cannot be read or parsed; the message names where."""


def read_text(path: Path) -> str:
    """The file's text (UTF-8), or :class:`YamlFileError` saying why not."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise YamlFileError(
                f"{size} bytes is larger than the {MAX_DOCUMENT_BYTES // 2**20} MiB allowed"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise YamlFileError(f"cannot read: {exc.strerror or exc}") from None
    return decode_utf8(data)


def decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlFileError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line})"
        ) from None


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document safely (see the module docstring)."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise YamlFileError(f"larger than the {MAX_DOCUMENT_BYTES // 2**20} MiB allowed")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        # An alias is written `*name`: a text without `*` has none, so nothing can expand
        # (counting walks every node: a second at 100,000 checks).
        distinct, expanded = _count_nodes(node) if "*" in text else (0, 0)
        if expanded > MAX_EXPANDED_NODES + _EXPANSION_FACTOR * distinct:
            raise YamlFileError(
                f"its aliases expand {distinct} nodes to {expanded} (more than "
                f"{_EXPANSION_FACTOR}x plus {MAX_EXPANDED_NODES}): refused as an alias bomb"
            )
        return _construct(node, loader, {})
    except yaml.MarkedYAMLError as exc:
        raise YamlFileError(_describe(exc, source)) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlFileError("nested too deeply") from None
    finally:
        loader.dispose()


def _construct(node: yaml.Node, loader: Any, built: dict[int, Any]) -> Any:
    """The value of ``node``, as ``loader.construct_document`` builds it.

    Plain strings, decimal ints, lists and maps of those are built here; anything else (other
    tags, merge keys, keys that are not scalars: their errors included) goes to PyYAML's own
    constructor. An alias is one node reached twice: it gets the same object both times, as
    PyYAML gives it (``built``, by node)."""
    kind = type(node)
    if kind is yaml.ScalarNode:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag == _INT:
            text: str = node.value
            # Decimal without a leading zero (YAML 1.1 reads 012 as octal, 1_000 as 1000).
            if text.isdigit() and text.isascii() and (text[0] != "0" or text == "0"):
                return int(text)
        return loader.construct_object(node, deep=True)
    key = id(node)
    done = built.get(key, built)
    if done is not built:
        return done
    value: Any = None
    if kind is yaml.MappingNode and node.tag == _MAP:
        mapping: dict[Any, Any] = {}
        for k, v in node.value:
            if type(k) is not yaml.ScalarNode or k.tag != _STR:
                break  # a merge key, a typed or a complex key: PyYAML's way
            # (A string value inline: most values are, and a call each adds up.)
            mapping[k.value] = (
                v.value
                if type(v) is yaml.ScalarNode and v.tag == _STR
                else _construct(v, loader, built)
            )
        else:
            value = mapping
    elif kind is yaml.SequenceNode and node.tag == _SEQ:
        value = [_construct(item, loader, built) for item in node.value]
    if value is None:
        value = loader.construct_object(node, deep=True)
    built[key] = value
    return value


def _count_nodes(root: yaml.Node) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded), without expanding anything."""
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()
    # Iterative post-order walk: a deeply nested document must not hit the recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in children)
            continue
        if key in expanded:
            continue
        if key in open_nodes:
            # Reached again below itself: an alias inside its own anchor, which expands forever.
            mark = node.start_mark
            raise YamlFileError(f"a recursive alias at line {mark.line + 1} never ends")
        if not children:
            expanded[key] = 1
            continue
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    return len(expanded), expanded[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _describe(exc: yaml.MarkedYAMLError, source: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    what = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
    return f"not valid YAML at {where}: {what}"
