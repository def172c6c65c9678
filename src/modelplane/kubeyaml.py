"""YAML's scalars, keys and merges as Kubernetes reads them: go-yaml v2's rules.

The API server, kubectl and Helm read YAML with sigs.k8s.io/yaml, which
resolves every plain scalar with its vendored go-yaml v2 and then makes
JSON of the result; ``untrusted.BoundedLoader`` asks these rules for each
scalar, key and merge it builds. Pure, and a leaf: it imports nothing of the
product.
"""

from __future__ import annotations

import math
import re
import struct
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

TAG = "tag:yaml.org,2002:"
STR = TAG + "str"
INT = TAG + "int"
FLOAT = TAG + "float"
BOOL = TAG + "bool"
NULL = TAG + "null"
MERGE = TAG + "merge"
TIMESTAMP = TAG + "timestamp"

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
        ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (BOOL, True)
    ),
    **dict.fromkeys(
        ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"),
        (BOOL, False),
    ),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), (NULL, None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), (FLOAT, math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (FLOAT, math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), (FLOAT, -math.inf)),
    # go-yaml merges under a plain ``<<`` key (decode.go, ``isMerge``) and
    # reads it anywhere else as the string; the tag lets a mapping tell.
    "<<": (MERGE, "<<"),
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
INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


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
    return number if number is not None else (STR, text)


def _go_number(plain: str) -> tuple[str, Any] | None:
    """An int in 64 bits, else a float, else an int after ``0b``, as resolve.go tries them."""
    found = _GO_INT.fullmatch(plain)
    if found and _fits_64_bits(found):
        return INT, _int_of(found)
    number = _finite(float(plain)) if _GO_FLOAT.fullmatch(plain) else None
    if number is not None:
        return number
    found = _GO_BINARY.fullmatch(plain)
    if found and _fits_64_bits(found):
        return INT, _int_of(found)
    return None


def _int_of(found: re.Match[str]) -> int:
    digits = found.lastgroup or "d"
    value = int(found[digits], _BASES[digits])
    return -value if found["sign"] == "-" else value


def _fits_64_bits(found: re.Match[str]) -> bool:
    # strconv.ParseInt's int64, else ParseUint's uint64, which takes no sign.
    value = _int_of(found)
    return INT64_MIN <= value <= INT64_MAX or (value <= UINT64_MAX and not found["sign"])


def _finite(value: float) -> tuple[str, float] | None:
    # Past float64, strconv.ParseFloat fails and the text stays a string.
    return (FLOAT, value) if math.isfinite(value) else None


def number_shaped(text: str) -> bool:
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
        return str(value) if INT64_MIN <= value <= INT64_MAX else None
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
    return isinstance(key, ScalarNode) and key.tag == MERGE and key.value == "<<"


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
