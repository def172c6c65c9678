"""Which values composed for a chart it reads at its version; the rest is left unset: pure.

Helm takes a value no template reads without a word, so a setting the
chart ignores fails silently: the plan would say the Grove operator pulls
with the ``--image-pull-secret`` Secrets while grove-charts at its pin has
no value for them at all. The catalog records, per chart version, the
values paths the chart reads (``ValuesRead``); the plan sets nothing
outside them, and says what it left out and what that means.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from modelplane.catalog.advisories import listed
from modelplane.catalog.types import ValuesRead

Values = dict[str, Any]


def leaf_paths(values: Values) -> list[str]:
    """Every dotted path the values set.

    A map's keys are walked; anything else ends a path (a list, a scalar,
    and an empty map, which is a value of its own: ``{}`` selects all).
    """
    out: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out += [f"{key}.{rest}" for rest in leaf_paths(value)]
        else:
            out.append(str(key))
    return out


def unread(reads: ValuesRead | None, paths: Iterable[str]) -> list[str]:
    """The paths the chart does not read; none when what it reads is not known."""
    if reads is None:
        return []
    return [path for path in paths if not reads.reads(path)]


def readable(values: Values, reads: ValuesRead | None) -> tuple[Values, list[str]]:
    """``values`` without what the chart does not read, and the paths left out."""
    refused = unread(reads, leaf_paths(values))
    return without(values, refused), refused


def without(values: Values, paths: Iterable[str]) -> Values:
    """``values`` less each leaf path; a map emptied by that goes too."""
    out = values
    for path in paths:
        out = _drop(out, path.split("."))
    return out


def _drop(values: Values, keys: list[str]) -> Values:
    head, rest = keys[0], keys[1:]
    if head not in values:
        return values
    out = dict(values)
    child = out[head]
    if not rest:
        del out[head]
    elif isinstance(child, dict):
        kept = _drop(child, rest)
        if kept:
            out[head] = kept
        else:
            del out[head]
    return out


def refused_message(
    chart: str, version: str, refused: Sequence[str], pull_paths: Sequence[str]
) -> str:
    """What leaving ``refused`` unset means, in one sentence without its full stop.

    Pull-secret paths are said apart: the point for a person is which pods
    pull without the Secrets, not which key went unset.
    """
    at = f"{chart} {version}"
    pulls = [p for p in refused if p in pull_paths]
    others = [p for p in refused if p not in pull_paths]
    parts: list[str] = []
    if pulls and len(pulls) == len(pull_paths):
        parts.append(
            f"{at} reads no pull-secret value, so its pods pull without one "
            f"({listed(pulls)} left unset)"
        )
    elif pulls:
        parts.append(
            f"{at} does not read {listed(pulls)}, so the pods only those would reach pull "
            "without a pull Secret"
        )
    if others:
        them = "it" if len(others) == 1 else "them"
        parts.append(f"{at} does not read {listed(others)}, so the product leaves {them} unset")
    return "; ".join(parts)
