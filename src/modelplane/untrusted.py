"""The one rule for reading text the product does not control.

A target's tenants write ConfigMaps, Secrets and custom objects the operator
reads, and a spec's author writes the spec: both are hostile input. Every
parse of such text goes through here, bounded three ways (bytes in, nesting
depth, and nodes after YAML aliases are expanded), and every value derived
from it passes ``printable`` before it reaches a status, an event, a log or a
terminal. A leaf: it imports nothing of the product.

The alias bound is the one that matters most: a few hundred bytes of nested
aliases compose into a graph that is small in memory but expands to
gigabytes the moment anything walks it (a diff, a message, a JSON dump).
Counting each alias as the size of what it names refuses that graph before
anything walks it.
"""

from __future__ import annotations

import base64
import binascii
import json
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# What a marker at the end of a cut value looks like.
CUT = "…"


@dataclass(frozen=True)
class Limits:
    """How much untrusted text a parse accepts."""

    # Bytes of input (UTF-8). A ConfigMap holds at most 1 MiB in all.
    max_bytes: int = 1024 * 1024
    # Nesting of mappings and sequences. Real configurations stay far below;
    # every recursive walk in the product stays far below Python's limit.
    max_depth: int = 64
    # Nodes after expanding aliases: the size of what a walk will visit.
    max_nodes: int = 200_000


DEFAULT = Limits()


class UntrustedInputError(ValueError):
    """Text refused by a bound or by its parser; the message never quotes the text."""


def check_depth(doc: Any, max_depth: int) -> None:
    """Refuse a parsed document nested deeper than ``max_depth`` (without recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= max_depth:
            raise UntrustedInputError(f"nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def _size_check(text: str | bytes, limits: Limits) -> None:
    size = len(text.encode("utf-8", "replace")) if isinstance(text, str) else len(text)
    if size > limits.max_bytes:
        raise UntrustedInputError(f"{size} bytes, over the limit of {limits.max_bytes}")


def load_json(text: str | bytes, limits: Limits = DEFAULT) -> Any:
    """Parse JSON within ``limits``."""
    _size_check(text, limits)
    try:
        doc = json.loads(text)
    except RecursionError as err:
        raise UntrustedInputError(f"nested deeper than {limits.max_depth} levels") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise UntrustedInputError(f"not JSON: {type(err).__name__}") from err
    check_depth(doc, limits.max_depth)
    return doc


def decode_base64(text: str | bytes, max_bytes: int) -> bytes:
    """Standard base64 decoded, refusing text that would decode to more than ``max_bytes``.

    The length is checked before anything is decoded: four characters of
    base64 are three bytes.
    """
    if len(text) > (max_bytes + 2) // 3 * 4:
        raise UntrustedInputError(f"base64 of more than {max_bytes} bytes")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise UntrustedInputError("not base64") from err
    if len(data) > max_bytes:
        raise UntrustedInputError(f"base64 of more than {max_bytes} bytes")
    return data


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """One gzip member decompressed, refusing more than ``max_bytes`` of output.

    Never more than ``max_bytes + 1`` bytes are decompressed, so a few KiB
    that would expand to gigabytes (a gzip bomb) cost no more memory than the
    bound.
    """
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, max_bytes + 1)
    except zlib.error as err:
        raise UntrustedInputError("not gzip data") from err
    if len(out) > max_bytes or inflate.unconsumed_tail:
        raise UntrustedInputError(f"decompresses to more than {max_bytes} bytes")
    if not inflate.eof:
        raise UntrustedInputError("the gzip data is truncated")
    if inflate.unused_data:
        raise UntrustedInputError("bytes follow after the gzip data")
    return out


class BoundedLoader(yaml.SafeLoader):
    """A safe loader that counts every node it composes, aliases at full size.

    The pure-Python loader, because the bound must hold while composing: the
    C loader gives no hook there. Untrusted text is small, so its speed does
    not matter.
    """

    limits: Limits = DEFAULT

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        # node id -> expanded size, for nodes carrying an anchor
        self._weights: dict[int, int] = {}

    def _count(self, n: int) -> None:
        self._nodes += n
        if self._nodes > self.limits.max_nodes:
            raise UntrustedInputError(
                f"more than {self.limits.max_nodes} nodes once aliases are expanded"
            )

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = self.anchors.get(event.anchor)
            if node is not None:
                weight = self._weights.get(id(node))
                if weight is None:
                    # An alias inside the node it names: a cycle, which
                    # every walk of the document would follow forever.
                    raise UntrustedInputError("an alias refers to a node that contains it")
                self._count(weight)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise UntrustedInputError(f"nested deeper than {self.limits.max_depth} levels")
        before = self._nodes
        self._count(1)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and isinstance(node, (ScalarNode, SequenceNode, MappingNode)):
            self._weights[id(node)] = self._nodes - before
        return node


def _loader(limits: Limits, base: type[BoundedLoader]) -> type[BoundedLoader]:
    if limits == base.limits:
        return base
    return type("_Loader", (base,), {"limits": limits})


def load_yaml(text: str | bytes, limits: Limits = DEFAULT) -> Any:
    """Parse one YAML document within ``limits`` (safe tags only)."""
    docs = list(load_yaml_all(text, limits))
    if len(docs) > 1:
        raise UntrustedInputError("more than one YAML document where one was expected")
    return docs[0] if docs else None


def load_yaml_all(
    text: str | bytes, limits: Limits = DEFAULT, *, loader_class: type[BoundedLoader] | None = None
) -> Iterator[Any]:
    """Parse every YAML document of a stream within ``limits`` (the node bound is shared).

    ``loader_class``, a subclass of ``BoundedLoader``, reads documents more
    strictly (the CLI refuses a key given twice, as kubectl does); the
    bounds stay.
    """
    _size_check(text, limits)
    loader: BoundedLoader | None = None
    try:
        # The reader refuses a non-printable character as it is built, so
        # building it belongs inside the ``try`` too.
        loader = _loader(limits, loader_class or BoundedLoader)(text)
        while loader.check_data():  # type: ignore[no-untyped-call]
            yield loader.get_data()
    except RecursionError as err:
        raise UntrustedInputError(f"nested deeper than {limits.max_depth} levels") from err
    except yaml.YAMLError as err:
        raise UntrustedInputError(f"not YAML: {_yaml_problem(err)}") from err
    finally:
        if loader is not None:
            loader.dispose()


def _yaml_problem(err: yaml.YAMLError) -> str:
    # The problem and its position, never the snippet PyYAML quotes.
    if isinstance(err, yaml.reader.ReaderError):
        return f"character #x{err.character:04x} at position {err.position} is not allowed"
    problem = getattr(err, "problem", None) or type(err).__name__
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return printable(str(problem), 200) + where


def printable(text: object, limit: int, *, newlines: bool = False) -> str:
    """``text`` made safe to show: control and format characters escaped, cut to ``limit``.

    Newlines and tabs become spaces; any other control or format character
    (ESC, bidi overrides, NUL) becomes its ``\\uXXXX`` escape, so nothing a
    target wrote can move a terminal's cursor or hide text from a reader.
    ``limit`` counts characters, as the CRD's ``maxLength`` does, and a cut
    value ends with ``…``. With ``newlines`` a newline is kept (a traceback
    in a log line reads as one); a carriage return is still a space, since
    it can overwrite a line already shown.
    """
    out: list[str] = []
    size = 0
    for char in str(text):
        if char == "\n" and newlines:
            piece = char
        elif char in "\n\t\r":
            piece = " "
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            piece = f"\\u{ord(char):04x}"
        else:
            piece = char
        if size + len(piece) > limit:
            kept = "".join(out)
            return kept[: max(limit - len(CUT), 0)] + CUT[: max(limit, 0)]
        out.append(piece)
        size += len(piece)
    return "".join(out)


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with ``…`` when cut."""
    if len(text) <= limit:
        return text
    if limit <= len(CUT):
        return text[:limit]
    return text[: limit - len(CUT)] + CUT
