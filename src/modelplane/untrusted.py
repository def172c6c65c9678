"""The one rule for reading text the product does not control.

A target's tenants write ConfigMaps, Secrets and custom objects the operator
reads, and a spec's author writes the spec: both are hostile input. Every
parse of such text goes through here, bounded four ways (bytes in, nesting
depth, nodes after YAML aliases are expanded, and characters in a number),
and every value derived from it passes ``printable`` before it reaches a
status, an event, a log or a terminal. A leaf: it imports nothing of the
product.

The alias bound is the one that matters most: a few hundred bytes of nested
aliases compose into a graph that is small in memory but expands to
gigabytes the moment anything walks it (a diff, a message, a JSON dump).
Counting each alias as the size of what it names refuses that graph before
anything walks it.

YAML is read as Kubernetes reads it, not as PyYAML would: what the product
reads (a chart's CRDs, a manifest, a release Helm stored) is what an API
server parsed or will parse with sigs.k8s.io/yaml, and a scalar the two
read differently is a chart the product cannot install (``- =`` in a CRD,
a YAML 1.1 ``value`` to PyYAML) or a value it compares wrongly (``y``,
``0o17``). See ``resolve_plain`` and ``BoundedLoader``.

Time is bounded as well as size. No one scalar costs more than its length
to build (a YAML 1.1 base-60 integer cost the square of it), a constructor's
own error is a refusal like any other, and the async callers run the step
that parses (the plan, a kubeconfig's vetting, a stored manifest's
decoding) in a worker thread: a MiB of ordinary YAML takes seconds in the
pure-Python parser, and the event loop renews the leader Lease and answers
``/healthz`` meanwhile.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from modelplane.kubeyaml import (
    BOOL,
    FLOAT,
    INT,
    INT64_MAX,
    INT64_MIN,
    MERGE,
    NULL,
    STR,
    TAG,
    TIMESTAMP,
    json_key,
    merged_pairs,
    number_shaped,
    resolve_plain,
)

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
    # Characters in one number scalar. An int64 or a float64 is written in
    # under 30; Python refuses to convert an int of more than 4,300 digits.
    max_number: int = 256
    # Bytes of memory the parse of a JSON text may build, as ``json_cost``
    # estimates it before parsing; None: only ``max_bytes`` bounds it. The
    # bytes alone do not: ``{},`` builds 24 times its size.
    max_built: int | None = None


DEFAULT = Limits()


class UntrustedInputError(ValueError):
    """Text refused by a bound or by its parser; the message never quotes the text."""


def as_dict(value: object) -> dict[str, Any]:
    """``value`` if the target sent an object there, else an empty one: a shape is no promise."""
    return value if isinstance(value, dict) else {}


def pick(value: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The entries of ``value`` under ``keys``, those it has."""
    return {k: value[k] for k in keys if k in value}


def check_depth(doc: Any, max_depth: int) -> None:
    """Refuse a parsed document nested deeper than ``max_depth`` (without recursion).

    A level at a time, looking only at containers: every answer a target
    sends is walked here, and this costs about half of what a walk of
    every value did, less than its parse.
    """
    level: list[Any] = [doc] if isinstance(doc, _CONTAINERS) else []
    for _ in range(max_depth):
        if not level:
            return
        below: list[Any] = []
        for value in level:
            children = value.values() if isinstance(value, dict) else value
            below += [child for child in children if isinstance(child, _CONTAINERS)]
        level = below
    if level:
        raise UntrustedInputError(f"nested deeper than {max_depth} levels")


_CONTAINERS = (dict, list)


def _size_check(text: str | bytes, limits: Limits) -> None:
    size = len(text.encode("utf-8", "replace")) if isinstance(text, str) else len(text)
    if size > limits.max_bytes:
        raise UntrustedInputError(f"{size} bytes, over the limit of {limits.max_bytes}")


# What a parse builds, at most, per thing ``json_cost`` counts; measured
# with tracemalloc (tests/unit/test_json_cost.py holds each shape to it).
# A container: an empty dict is 64 bytes, a dict of one entry 184, and its
# slot in its parent 8 more; of ``{"a":{}}`` each container built 128.
_CONTAINER_COST = 128
# A value or a key after a separator: a pointer in its container or a
# dict's entry, and the smallest object (a float 24, an ASCII str 50, a
# str of one character past Latin-1 80), its container's spare room too.
_ITEM_COST = 96


def json_cost(text: str | bytes) -> int:
    """An upper estimate of the bytes of memory parsing ``text`` as JSON builds.

    Counted at C speed, without parsing: every ``{`` or ``[`` as a
    container, every ``,`` or ``:`` as an item, the text's characters as
    string data (four bytes each when one of them may not be Latin-1 or
    ASCII, since one such character makes a whole string four bytes a
    character). A brace or separator inside a string is counted too: the
    estimate errs on the side of refusing, by two to three times for the
    JSON of real Kubernetes objects.
    """
    if isinstance(text, str):
        containers = text.count("{") + text.count("[")
        items = text.count(",") + text.count(":")
        wide = not text.isascii() or "\\u" in text
    else:
        containers = text.count(b"{") + text.count(b"[")
        items = text.count(b",") + text.count(b":")
        wide = not text.isascii() or b"\\u" in text
    return cost_of(containers, items, len(text), wide=wide)


def cost_of(containers: int, items: int, chars: int, *, wide: bool) -> int:
    """``json_cost`` from its counts (a stream counts them chunk by chunk)."""
    per_char = 4 if wide else 1
    return containers * _CONTAINER_COST + (items + containers) * _ITEM_COST + chars * per_char


def _built_check(text: str | bytes, limits: Limits) -> None:
    if limits.max_built is None:
        return
    cost = json_cost(text)
    if cost > limits.max_built:
        raise UntrustedInputError(
            f"would build about {cost // 1024 // 1024} MiB in memory, over the limit of "
            f"{limits.max_built // 1024 // 1024} MiB"
        )


# msgspec's decoder parses a target's answers two to three times faster
# than the standard library's (``python bench/bench_json.py``); JSON
# decoding was the largest part of a shard's CPU while its targets came up.
_DECODER = msgspec.json.Decoder()


def load_json(text: str | bytes, limits: Limits = DEFAULT) -> Any:
    """Parse JSON within ``limits``.

    What msgspec refuses (``NaN``, a lone surrogate escape, nesting past
    its recursion limit) is parsed again by the standard library, so the
    fast path accepts and refuses exactly what the standard one does.
    What it would build is estimated first (``json_cost``), and refused
    past ``max_built`` before anything is built.
    """
    _size_check(text, limits)
    _built_check(text, limits)
    try:
        doc = _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        doc = _load_json_slowly(text, limits)
    check_depth(doc, limits.max_depth)
    return doc


def _load_json_slowly(text: str | bytes, limits: Limits) -> Any:
    try:
        return json.loads(text)
    except RecursionError as err:
        raise UntrustedInputError(f"nested deeper than {limits.max_depth} levels") from err
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise UntrustedInputError(f"not JSON: {type(err).__name__}") from err


def load_json_as(text: str | bytes, limits: Limits, decoder: msgspec.json.Decoder[Any]) -> Any:
    """Parse JSON within ``limits``, building only what ``decoder``'s type names, as plain values.

    What the type does not name (a CRD's schema) is read past and never
    built. Text of another shape is parsed whole, as ``load_json`` does:
    the caller gets what it would have, only not smaller.
    """
    _size_check(text, limits)
    _built_check(text, limits)
    try:
        doc = msgspec.to_builtins(decoder.decode(text))
    except (msgspec.DecodeError, RecursionError):  # a ValidationError too
        return load_json(text, limits)
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


# Python's errors while building a value from a well-formed node: a number
# past the conversion limit, ``!!bool maybe``, a date out of range.
_BUILD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError)
# The tags whose scalars ``resolve_plain`` reads, implicit or explicit.
_RESOLVED = frozenset({INT, FLOAT, BOOL, NULL, MERGE})


class BoundedLoader(yaml.SafeLoader):
    """A safe loader that counts every node it composes, aliases at full size.

    The pure-Python loader, because the bound must hold while composing: the
    C loader gives no hook there. Untrusted text is small, but a MiB of it
    still takes seconds: async callers parse in a worker thread.

    It reads what Kubernetes reads: a plain scalar by ``resolve_plain``, a
    mapping's keys as JSON's strings (``1:`` is ``"1"``, ``yes:`` is
    ``"true"``), merges in go-yaml v2's order. Where go-yaml's value is one
    JSON has not (NaN, an infinity, a null key), the API server's JSON
    conversion refuses the document, and so does this.
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

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        # A scalar tagged ``!`` alone is a string to go-yaml, as YAML has it;
        # PyYAML resolves it as if plain (``! 12`` was 12).
        non_specific = self.peek_event().tag == "!"  # type: ignore[no-untyped-call]
        node = super().compose_scalar_node(anchor)
        if non_specific:
            node.tag = STR
        return node

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """A plain scalar's tag as Kubernetes resolves it; any other node's as PyYAML does."""
        if kind is not ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        if len(value) > self.limits.max_number and number_shaped(value):
            return INT  # refused by its length when built, before any conversion
        return resolve_plain(value)[0]

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # Every caller catches ``UntrustedInputError`` alone: an error of
        # Python's own would fail each reconcile for as long as the text
        # stands. Said with the node's place, never its text.
        try:
            return super().construct_object(node, deep)
        except UntrustedInputError:
            raise
        except _BUILD_ERRORS as err:
            kind = printable(str(node.tag).rpartition(":")[2], 40)
            problem = f"cannot be read ({type(err).__name__})"
            raise UntrustedInputError(
                f"not YAML: the {kind} value at {_place(node)} {problem}"
            ) from err

    def _scalar(self, node: Node) -> tuple[str, Any]:
        """A scalar under a tag ``resolve_plain`` reads: its value if the tag fits.

        An explicit tag is checked as go-yaml checks it: ``!!int 0o17`` is
        15, ``!!float 1`` is 1.0, ``!!int 1:59`` a string, so refused.
        """
        text = self.construct_scalar(node)  # type: ignore[arg-type]  # refuses a collection
        if node.tag in (INT, FLOAT) and len(text) > self.limits.max_number:
            raise UntrustedInputError(
                f"the number at {_place(node)} is longer than {self.limits.max_number} characters"
            )
        if node.tag == MERGE:
            return STR, text  # ``<<`` where no mapping merges it
        tag, value = resolve_plain(text)
        if node.tag == FLOAT and tag == INT and INT64_MIN <= value <= INT64_MAX:
            tag, value = FLOAT, float(value)  # an int64 only, not a uint64
        if tag != node.tag:
            raise ValueError("the text is not of its tag")
        return tag, value

    def construct_resolved(self, node: Node) -> Any:
        """A scalar ``resolve_plain`` reads, refused if its float is not JSON's."""
        tag, value = self._scalar(node)
        if tag == FLOAT and not math.isfinite(value):
            raise UntrustedInputError(
                f"not JSON: the float at {_place(node)} is NaN or infinite "
                "(the API server refuses the document too)"
            )
        return value

    def construct_timestamp(self, node: ScalarNode) -> Any:
        """An explicit ``!!timestamp``: checked to be one, then kept as its text, as JSON has it."""
        self.construct_yaml_timestamp(node)
        return self.construct_scalar(node)

    def construct_binary(self, node: ScalarNode) -> str:
        """An ``!!binary`` value as Kubernetes has it: its bytes as text.

        go-yaml v2 decodes the base64 (line breaks ignored) into a string
        (decode.go); encoding/json then writes each byte that is not UTF-8
        as U+FFFD. PyYAML's ``bytes`` are no JSON value.
        """
        text = self.construct_scalar(node).replace("\n", "").replace("\r", "")
        decoded = base64.b64decode(text, validate=True).decode("utf-8", "surrogateescape")
        return _ESCAPED_BYTE.sub("\ufffd", decoded)

    def construct_untagged(self, node: Node) -> Any:
        """A node under a tag go-yaml v2 does not read: what it is without the tag.

        A local tag (``!foo``), ``!!set``, ``!!omap``, ``!!pairs``, ``!!value``:
        a scalar is its text, a list a list, a mapping a mapping (resolve.go's
        ``resolvableTag``). PyYAML refused the first and built a set or
        tuples, which JSON has not, of the others.
        """
        if isinstance(node, ScalarNode):
            return self.construct_scalar(node)
        if isinstance(node, SequenceNode):
            return self.construct_yaml_seq(node)
        return self.construct_yaml_map(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping as sigs.k8s.io/yaml has it: merged in go-yaml's order, keys JSON's strings."""
        if not isinstance(node, MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a mapping node, but found {node.id}", node.start_mark
            )
        mapping: dict[str, Any] = {}
        for key_node, value_node in merged_pairs(node):
            mapping[self._key(key_node)] = self.construct_object(value_node, deep=deep)
        return mapping

    def _key(self, node: Node) -> str:
        if isinstance(node, ScalarNode) and node.tag in _RESOLVED:
            # Not built as a value: a key ``.inf`` is the string ".inf".
            key = json_key(self._scalar(node)[1])
        else:
            key = json_key(self.construct_object(node, deep=True))
        if key is None:
            raise UntrustedInputError(
                f"not JSON: the key at {_place(node)} has no JSON form (a null, a list, "
                "a mapping or an int past 64 bits; the API server refuses the document too)"
            )
        return key


# A byte that is not UTF-8, as the ``surrogateescape`` handler keeps it.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _place(node: Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


for _tag in _RESOLVED:
    BoundedLoader.add_constructor(_tag, BoundedLoader.construct_resolved)
BoundedLoader.add_constructor(TIMESTAMP, BoundedLoader.construct_timestamp)
BoundedLoader.add_constructor(TAG + "binary", BoundedLoader.construct_binary)
for _other in (TAG + "set", TAG + "omap", TAG + "pairs", None):
    BoundedLoader.add_constructor(_other, BoundedLoader.construct_untagged)


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
    except UntrustedInputError:
        raise
    except _BUILD_ERRORS as err:
        # A mapping or sequence built after its children (the loader names
        # a scalar's own failure with its place).
        problem = f"a value cannot be read ({type(err).__name__})"
        raise UntrustedInputError(f"not YAML: {problem}") from err
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


# Control, format, surrogate, private and unassigned characters, and the
# line and paragraph separators (U+2028, U+2029): editors, browsers and
# JavaScript's JSON readers break a line at those.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def timestamp(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it; None for anything else.

    Bounded before it is parsed: a hostile object may put anything there.
    A time without a zone is taken as UTC, as the API server means it.
    """
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def printable(text: object, limit: int, *, newlines: bool = False) -> str:
    """``text`` made safe to show: control and format characters escaped, cut to ``limit``.

    Newlines and tabs become spaces; any other control or format character
    (ESC, bidi overrides, NUL) or line separator becomes its ``\\uXXXX``
    escape, so nothing a target wrote can move a terminal's cursor, start a
    line of its own or hide text from a reader.
    ``limit`` counts characters, as the CRD's ``maxLength`` does, and a cut
    value ends with ``…``. With ``newlines`` a newline is kept (a traceback
    in a log line reads as one); a carriage return is still a space, since
    it can overwrite a line already shown.
    """
    shown = str(text)
    # Every status write bounds some hundred strings, almost all printable
    # and short, on every settled resync: str.isprintable is false for
    # each character escaped or replaced below (and for non-ASCII spaces,
    # which are kept), so such a string is its own answer.
    if len(shown) <= limit and shown.isprintable():
        return shown
    out: list[str] = []
    size = 0
    for char in shown:
        if char == "\n" and newlines:
            piece = char
        elif char in "\n\t\r":
            piece = " "
        elif unicodedata.category(char) in _ESCAPED:
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
