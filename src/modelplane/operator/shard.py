"""Which ServingStacks one operator shard serves: namespaces and a label selector.

The selector is handed to the hub as the ``labelSelector`` of kopf's LIST and
WATCH of ServingStacks (``settings.watching.label_selectors``, kopf 1.45), so
the filter is the API server's: a shard never sees another shard's stacks,
so no daemon, timer, finalizer or teardown of its can touch them, and it
keeps no memory for them. It is checked here first, so that a typo is a
usage error naming ``--selector`` rather than a watch the hub refuses in a
loop. The grammar is the API server's equality- and set-based one
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors).
"""

from __future__ import annotations

import re

from modelplane.plan.rollout import split_selector

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")
_EXISTS = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^=!\s()]+)$")


def _requirements(text: str) -> list[str]:
    """Split on the commas that are not inside a value set."""
    return [p.strip() for p in split_selector(text)]


def _key(key: str, requirement: str) -> str:
    if not _KEY.fullmatch(key) or len(key.partition("/")[0]) > 253:
        raise ValueError(
            f"{requirement!r}: {key!r} is not a label key (an optional DNS prefix and "
            "'/', then up to 63 letters, digits, '-', '_' or '.')"
        )
    return key


def _value(value: str, requirement: str) -> str:
    if not _VALUE.fullmatch(value):
        raise ValueError(
            f"{requirement!r}: {value!r} is not a label value (up to 63 letters, digits, "
            "'-', '_' or '.', beginning and ending with a letter or digit)"
        )
    return value


def normalize_selector(text: str) -> str:
    """The selector in canonical form; ValueError saying which requirement is wrong."""
    if not text.strip():
        raise ValueError("the selector is empty; leave the option out to serve every stack")
    out = []
    for requirement in _requirements(text):
        if not requirement:
            raise ValueError(f"{text!r} has an empty requirement (a stray comma)")
        if m := _SET.match(requirement):
            values = [v.strip() for v in m["values"].split(",")]
            if not values or any(not v for v in values):
                raise ValueError(f"{requirement!r}: the value set has an empty entry")
            key = _key(m["key"], requirement)
            values = [_value(v, requirement) for v in values]
            out.append(f"{key} {m['op']} ({','.join(sorted(set(values)))})")
        elif m := _EQ.match(requirement):
            op = "=" if m["op"] == "==" else m["op"]
            out.append(f"{_key(m['key'], requirement)}{op}{_value(m['value'], requirement)}")
        elif m := _EXISTS.match(requirement):
            out.append(f"{m['neg']}{_key(m['key'], requirement)}")
        else:
            raise ValueError(
                f"{requirement!r} is not a label requirement: use key=value, key!=value, "
                "key in (a,b), key notin (a,b), key or !key"
            )
    return ",".join(out)
