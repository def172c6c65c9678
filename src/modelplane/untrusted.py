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
import struct
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

import msgspec
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
    # Characters in one number scalar. An int64 or a float64 is written in
    # under 30; Python refuses to convert an int of more than 4,300 digits.
    max_number: int = 256


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


# msgspec's decoder parses a target's answers two to three times faster
# than the standard library's (``python bench/bench_json.py``); JSON
# decoding was the largest part of a shard's CPU while its targets came up.
_DECODER = msgspec.json.Decoder()


def load_json(text: str | bytes, limits: Limits = DEFAULT) -> Any:
    """Parse JSON within ``limits``.

    What msgspec refuses (``NaN``, a lone surrogate escape, nesting past
    its recursion limit) is parsed again by the standard library, so the
    fast path accepts and refuses exactly what the standard one does.
    """
    _size_check(text, limits)
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


_TAG = "tag:yaml.org,2002:"
_STR = _TAG + "str"
_INT = _TAG + "int"
_FLOAT = _TAG + "float"
_BOOL = _TAG + "bool"
_NULL = _TAG + "null"
_MERGE = _TAG + "merge"
_TIMESTAMP = _TAG + "timestamp"

# A plain (unquoted, untagged) scalar is read as Kubernetes reads it. The
# API server, kubectl and Helm parse YAML with sigs.k8s.io/yaml: go-yaml v2
# resolves each scalar (``resolve`` in goyaml.v2/resolve.go of
# sigs.k8s.io/yaml v1.4.0; the same file in go.yaml.in/yaml/v2 v2.4.2,
# which v1.6.0 uses), then yaml.go's ``convertToJSONableObject`` makes JSON
# of the result. Those are YAML 1.1's words, but not PyYAML's: ``y`` and ``n`` are
# booleans, ``=`` a string (to PyYAML, a ``value`` tag no safe constructor
# builds), ``0o17`` an int, ``1e3`` and even ``08`` floats; a date and a
# base-60 number stay strings (go-yaml keeps a timestamp as its text in an
# ``interface{}``, and has no base 60).
_WORDS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(
        ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (_BOOL, True)
    ),
    **dict.fromkeys(
        ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"),
        (_BOOL, False),
    ),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), (_NULL, None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), (_FLOAT, math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (_FLOAT, math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), (_FLOAT, -math.inf)),
    # go-yaml merges under a plain ``<<`` key (decode.go, ``isMerge``) and
    # reads it anywhere else as the string; the tag lets a mapping tell.
    "<<": (_MERGE, "<<"),
}
_NUMBER_START = frozenset("+-0123456789")
# strconv.ParseInt(text, 0, 64)'s syntax, on the text without its
# underscores: a leading 0 is octal, and ``0o`` too.
_GO_INT = re.compile(
    r"(?P<sign>[-+]?)(?:0[xX](?P<x>[0-9a-fA-F]+)|0[bB](?P<b>[01]+)|0[oO]?(?P<o>[0-7]+)"
    r"|(?P<d>0|[1-9][0-9]*))"
)
# resolve.go's float syntax, on the text without its underscores.
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# A text that starts with a dot goes to strconv.ParseFloat as it is:
# digits with single underscores between them (as Python's float takes
# them), an exponent too.
_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?")
# resolve.go's last try: ``0b`` then strconv.ParseInt(rest, 2, 64), which
# takes a sign there. (Its ``-0b`` try after finds nothing the first did not.)
_GO_BINARY = re.compile(r"0b(?P<sign>[-+]?)(?P<b>[01]+)")
_BASES = {"x": 16, "b": 2, "o": 8, "d": 10}
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def resolve_plain(text: str) -> tuple[str, Any]:
    """The tag and value Kubernetes gives a plain scalar (go-yaml v2's ``resolve``).

    A number's text is converted whatever its length: the loader refuses one
    past ``max_number`` before it asks.
    """
    word = _WORDS.get(text)
    if word is not None:
        return word
    first = text[:1]
    number = None
    if first == ".":
        number = _finite(float(text)) if _DOT_FLOAT.fullmatch(text) else None
    elif first in _NUMBER_START:
        number = _go_number(text.replace("_", ""))
    return number if number is not None else (_STR, text)


def _go_number(plain: str) -> tuple[str, Any] | None:
    """An int in 64 bits, else a float, else an int after ``0b``, as resolve.go tries them."""
    found = _GO_INT.fullmatch(plain)
    if found and _fits_64_bits(found):
        return _INT, _int_of(found)
    number = _finite(float(plain)) if _GO_FLOAT.fullmatch(plain) else None
    if number is not None:
        return number
    found = _GO_BINARY.fullmatch(plain)
    if found and _fits_64_bits(found):
        return _INT, _int_of(found)
    return None


def _int_of(found: re.Match[str]) -> int:
    digits = found.lastgroup or "d"
    value = int(found[digits], _BASES[digits])
    return -value if found["sign"] == "-" else value


def _fits_64_bits(found: re.Match[str]) -> bool:
    # strconv.ParseInt's int64, else ParseUint's uint64, which takes no sign.
    value = _int_of(found)
    return _INT64_MIN <= value <= _INT64_MAX or (value <= _UINT64_MAX and not found["sign"])


def _finite(value: float) -> tuple[str, float] | None:
    # Past float64, strconv.ParseFloat fails and the text stays a string.
    return (_FLOAT, value) if math.isfinite(value) else None


def _number_shaped(text: str) -> bool:
    """Whether ``text`` is written as a number, whatever its value (without converting it)."""
    if text[:1] not in _NUMBER_START and text[:1] != ".":
        return False
    plain = text.replace("_", "")
    return any(pattern.fullmatch(plain) for pattern in (_GO_INT, _GO_FLOAT, _GO_BINARY)) or bool(
        _DOT_FLOAT.fullmatch(text)
    )


def json_key(value: Any) -> str | None:
    """A mapping key as sigs.k8s.io/yaml writes it in JSON, or None where it refuses the key.

    yaml.go's ``convertToJSONableObject``: an int's digits, ``true`` or
    ``false``, a float as float32's shortest text; no null, no int past
    int64, no list or mapping.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if _INT64_MIN <= value <= _INT64_MAX else None
    if isinstance(value, float):
        return float32_text(value)
    return None


def float32_text(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32), with YAML's infinities and NaN.

    What sigs.k8s.io/yaml makes of a float key: rounded to float32, its
    shortest digits, an exponent past 10**6 or under 10**-4.
    """
    if math.isnan(value):
        return ".nan"
    single = _to_float32(value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    sign = "-" if math.copysign(1.0, single) < 0 else ""
    if single == 0:
        return sign + "0"
    digits, point = _float32_digits(abs(single))
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        fraction = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{fraction}e{exponent:+03d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _to_float32(value: float) -> float:
    try:
        single: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # rounds past float32's largest
        return math.copysign(math.inf, value)
    return single


def _float32_of(bits: int) -> float:
    single: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return single


def _float32_digits(single: float) -> tuple[str, int]:
    """The fewest digits that read back as the positive float32 ``single``, the nearest of them.

    With where the point goes: ``single`` is about 0.DIGITS times 10**point.
    A decimal reads back as ``single`` if it is nearer to it than to either
    neighbour (a tie goes to the even one).
    """
    bits: int = struct.unpack("<I", struct.pack("<f", single))[0]
    below = _float32_of(bits - 1)
    above = _float32_of(bits + 1) if bits + 1 < 0x7F800000 else 2 * single - below
    with localcontext() as context:
        context.prec = 200  # a float32 is exact in at most 112 digits
        exact = Decimal(single)
        low, high = (exact + Decimal(below)) / 2, (exact + Decimal(above)) / 2
        for size in range(1, 10):
            scale = exact.adjusted() - size + 1
            nearest = int(exact.scaleb(-scale).to_integral_value(ROUND_HALF_EVEN))
            for candidate in (nearest, nearest - 1, nearest + 1):
                decimal = Decimal(candidate).scaleb(scale)
                if low < decimal < high or (bits % 2 == 0 and decimal in (low, high)):
                    text = str(candidate).rstrip("0")
                    return text, scale + len(str(candidate))
    raise AssertionError("nine digits always read back as a float32")


def _is_merge(key: Node) -> bool:
    # decode.go's isMerge: ``<<``, plain or tagged ``!!merge``.
    return isinstance(key, ScalarNode) and key.tag == _MERGE and key.value == "<<"


def merged_pairs(node: MappingNode) -> list[tuple[Node, Node]]:
    """A mapping's pairs in the order go-yaml v2 sets them, merges spliced in where they stand.

    decode.go's ``mapping`` and ``merge``: a merged mapping's keys land where
    its ``<<`` is, over any key before it; of a list of mappings, the first
    wins. (PyYAML, after YAML's merge type, lets the mapping's own keys win
    wherever they stand: ``{a: 0, <<: {a: 1}}`` is ``{a: 1}`` to Kubernetes,
    ``{a: 0}`` to PyYAML.) go-yaml also refuses an alias to a list after
    ``<<``; the composed graph no longer tells an alias from a list written
    out, so that one is merged.
    """
    pairs: list[tuple[Node, Node]] = []
    for key, value in node.value:
        if not _is_merge(key):
            pairs.append((key, value))
            continue
        sources = reversed(value.value) if isinstance(value, SequenceNode) else [value]
        for source in sources:
            if not isinstance(source, MappingNode):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "a merge takes a mapping or a list of mappings",
                    source.start_mark,
                )
            pairs += merged_pairs(source)
    return pairs


# Python's errors while building a value from a well-formed node: a number
# past the conversion limit, ``!!bool maybe``, a date out of range.
_BUILD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError)
# The tags whose scalars ``resolve_plain`` reads, implicit or explicit.
_RESOLVED = frozenset({_INT, _FLOAT, _BOOL, _NULL, _MERGE})


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
            node.tag = _STR
        return node

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """A plain scalar's tag as Kubernetes resolves it; any other node's as PyYAML does."""
        if kind is not ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        if len(value) > self.limits.max_number and _number_shaped(value):
            return _INT  # refused by its length when built, before any conversion
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
        if node.tag in (_INT, _FLOAT) and len(text) > self.limits.max_number:
            raise UntrustedInputError(
                f"the number at {_place(node)} is longer than {self.limits.max_number} characters"
            )
        if node.tag == _MERGE:
            return _STR, text  # ``<<`` where no mapping merges it
        tag, value = resolve_plain(text)
        if node.tag == _FLOAT and tag == _INT and _INT64_MIN <= value <= _INT64_MAX:
            tag, value = _FLOAT, float(value)  # an int64 only, not a uint64
        if tag != node.tag:
            raise ValueError("the text is not of its tag")
        return tag, value

    def construct_resolved(self, node: Node) -> Any:
        """A scalar ``resolve_plain`` reads, refused if its float is not JSON's."""
        tag, value = self._scalar(node)
        if tag == _FLOAT and not math.isfinite(value):
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
BoundedLoader.add_constructor(_TIMESTAMP, BoundedLoader.construct_timestamp)
BoundedLoader.add_constructor(_TAG + "binary", BoundedLoader.construct_binary)
for _other in (_TAG + "set", _TAG + "omap", _TAG + "pairs", None):
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
    out: list[str] = []
    size = 0
    for char in str(text):
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
