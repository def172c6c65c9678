"""Each kind's plural as a target serves it, kept once for every target that serves the same.

A stack keeps two of these maps while its target is open (its watches'
and its client's, which applies objects), some 150 kinds each on a real
Standard target. Every target of a stack at the same versions serves the
same kinds under the same plurals, so a shard held thousands of equal
dicts: 4.5 KiB each, 9 KiB a target, by a census of a settled shard
(``bench/live_census.py``). ``merged`` hands out one read-only map per
distinct content, held weakly (``kube.interned.KeptOnce``); a map that
learns a kind is replaced by another, never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from modelplane.kube.interned import KeptOnce

Kind = tuple[str, str]  # (apiVersion, kind)


class Plurals(Mapping[Kind, str]):
    """(apiVersion, kind) -> the resource name the server serves the kind under. Read-only."""

    __slots__ = ("__weakref__", "_map")

    def __init__(self, plurals: Mapping[Kind, str] | None = None) -> None:
        self._map = dict(plurals or {})

    def __getitem__(self, key: Kind) -> str:
        return self._map[key]

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"Plurals({self._map!r})"


NONE = Plurals()

_KEPT: KeptOnce[Plurals] = KeptOnce()


def merged(held: Plurals, more: Mapping[Kind, str]) -> Plurals:
    """``held`` and ``more`` together, ``more`` winning: ``held`` itself when it says it all.

    Otherwise the one kept map of that content, made the first time.
    """
    if all(held.get(key) == plural for key, plural in more.items()):
        return held
    union = {**held, **more}
    content = sorted([*key, plural] for key, plural in union.items())
    return _KEPT.get(content, lambda: Plurals(union))
