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
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    loader = _LOADER(text)
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
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise YamlFileError(_describe(exc, source)) from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlFileError("nested too deeply") from None
    finally:
        loader.dispose()


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
