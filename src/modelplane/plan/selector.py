"""A label selector: its grammar, its canonical form, and which labels it matches.

The grammar is the API server's, equality- and set-based
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors;
k8s.io/apimachinery/pkg/labels/selector.go parses it): requirements joined
by commas, all of which must hold, each one of

- ``key=value``, ``key==value``, ``key!=value`` (``!=`` also matches an
  object without the key);
- ``key in (a,b)``, ``key notin (a,b)`` (``notin`` also matches one without
  the key), with at least one value;
- ``key`` (the key is set, to any value) and ``!key`` (it is not).

A label key is an optional DNS subdomain prefix and ``/``, then a name of up
to 63 letters, digits, ``-``, ``_`` and ``.`` that begins and ends with a
letter or digit; a value is such a name, or empty. The same comma grammar
with ``=``, ``==`` and ``!=`` is a field selector's, whose keys and values
are not labels': ``parse`` reads both, ``parse_labels`` holds keys and values
to the label rules as well.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
# A DNS subdomain, the key's prefix, is at most 253 characters.
MAX_PREFIX = 253

# One requirement, as written: spaces around the operators are allowed.
_SET = re.compile(r"(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")
_EQ = re.compile(r"(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)")
_EXISTS = re.compile(r"(?P<neg>!?)\s*(?P<key>[^=!\s()]+)")


class Op(enum.StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Op
    # One for = and !=, at least one (sorted, each once) for in and notin.
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.op:
            case Op.EQUALS:
                return value == self.values[0]
            case Op.NOT_EQUALS:
                return value != self.values[0]
            case Op.IN:
                return value in self.values
            case Op.NOT_IN:
                return value not in self.values
            case Op.EXISTS:
                return self.key in labels
            case Op.DOES_NOT_EXIST:
                return self.key not in labels

    def __str__(self) -> str:
        """The requirement in canonical form: no spaces but around ``in``, values sorted."""
        match self.op:
            case Op.EQUALS | Op.NOT_EQUALS:
                return f"{self.key}{self.op}{self.values[0]}"
            case Op.IN | Op.NOT_IN:
                return f"{self.key} {self.op} ({','.join(self.values)})"
            case Op.EXISTS:
                return self.key
            case Op.DOES_NOT_EXIST:
                return f"!{self.key}"


def is_label_key(key: str) -> bool:
    return bool(_KEY.fullmatch(key)) and len(key.partition("/")[0]) <= MAX_PREFIX


def is_label_value(value: str) -> bool:
    return bool(_VALUE.fullmatch(value))


def split(text: str) -> list[str]:
    """A selector's requirements: split on the commas that are not inside a value set."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _requirement(text: str) -> Requirement:
    if m := _SET.fullmatch(text):
        values = [v.strip() for v in m["values"].split(",")]
        if any(not v for v in values):
            raise ValueError(f"{text!r}: the value set has an empty entry")
        return Requirement(m["key"], Op(m["op"]), tuple(sorted(set(values))))
    if m := _EQ.fullmatch(text):
        op = Op.NOT_EQUALS if m["op"] == "!=" else Op.EQUALS
        return Requirement(m["key"], op, (m["value"],))
    if m := _EXISTS.fullmatch(text):
        return Requirement(m["key"], Op.DOES_NOT_EXIST if m["neg"] else Op.EXISTS)
    raise ValueError(
        f"{text!r} is not a label requirement: use key=value, key!=value, "
        "key in (a,b), key notin (a,b), key or !key"
    )


@functools.lru_cache(maxsize=256)
def parse(text: str) -> tuple[Requirement, ...]:
    """The requirements of ``text``; ValueError naming the one that cannot be read.

    Only the grammar: keys and values may be any that contain no space (as
    a field selector's may). Cached: the product's own selectors are asked
    about again and again.
    """
    out = []
    for part in split(text):
        requirement = part.strip()
        if not requirement:
            raise ValueError(f"{text!r} has an empty requirement (a stray comma)")
        out.append(_requirement(requirement))
    return tuple(out)


def _check_label(r: Requirement) -> Requirement:
    shown = str(r)
    if not is_label_key(r.key):
        raise ValueError(
            f"{shown!r}: {r.key!r} is not a label key (an optional DNS prefix and "
            "'/', then up to 63 letters, digits, '-', '_' or '.')"
        )
    for value in r.values:
        if not is_label_value(value):
            raise ValueError(
                f"{shown!r}: {value!r} is not a label value (up to 63 letters, digits, "
                "'-', '_' or '.', beginning and ending with a letter or digit)"
            )
    return r


def parse_labels(text: str) -> tuple[Requirement, ...]:
    """``parse``, with every key and value held to the label rules."""
    return tuple(_check_label(r) for r in parse(text))


def canonical(requirements: tuple[Requirement, ...]) -> str:
    """The selector in canonical form, its requirements in the order given."""
    return ",".join(str(r) for r in requirements)


def selects(selector: str | None, labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` matches ``labels``; none, or one that cannot be read, matches nothing.

    The product's selectors are its own or checked when given
    (``operator.shard``), so one that cannot be read is a bug, and matching
    nothing is the side that acts on nothing it was not asked to.
    """
    if not selector:
        return False
    try:
        requirements = parse(selector)
    except ValueError:
        return False
    return all(r.matches(labels) for r in requirements)
