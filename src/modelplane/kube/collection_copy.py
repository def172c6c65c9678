"""A reflector's copy of one collection, and what it holds against its budget and holdings.

The copy is replaced whole by a LIST and changed an object at a time by the
watch's events (``kube.reflector``). What each object weighed on the wire
and what its parse is estimated to build are kept beside it, so an event
that replaces or deletes one gives back its own share: the copy stays
within its ``Budget`` over the watch's life, and what it builds stays held
in the target's ``Holdings``. Past either, ``OverBudget`` or ``OverTotal``
is raised and the reflector drops the copy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec

from modelplane.kube.budget import Budget, Holdings
from modelplane.kube.client import Collection, OverBudget, OverTotal
from modelplane.untrusted import json_cost

Outline = Callable[[dict[str, Any]], dict[str, Any]]


def whole(obj: dict[str, Any]) -> dict[str, Any]:
    """The outline that keeps all of an object."""
    return obj


def object_name_key(obj: dict[str, Any]) -> str:
    """``namespace/name``: what a copy keeps ``obj`` under.

    Interned: every target of a stack at the same versions has the same
    CRDs, so the same 51 keys in its CRD copy, 4.6 KiB a target kept once
    each (a census of a settled shard, docs/sizing.md). An interned string
    goes when nothing holds it, and the copies' budgets bound what does.
    """
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return "/"
    return sys.intern(f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}")


class CollectionCopy:
    """``items``: a collection's objects by ``namespace/name``, within its budget and holdings."""

    # One a watch of every target: no attribute dict each (``Reflector`` too).
    __slots__ = (
        "_built",
        "_collection",
        "_listed",
        "_sizes",
        "budget",
        "built",
        "held",
        "holdings",
        "items",
        "outline",
    )

    def __init__(
        self,
        collection: str,
        budget: Budget,
        holdings: Holdings | None,
        outline: Outline | None,
    ) -> None:
        # What of each object is kept (all of it by default): the budget
        # still weighs what the target sent.
        self.outline = outline or whole
        # What the copy may hold, over the LIST's pages and the watch's life.
        self.budget = budget
        self._collection = collection
        self.items: dict[str, dict[str, Any]] = {}
        # Each object's weight on the wire, and their sum, against the budget.
        self._sizes: dict[str, int] = {}
        self.held = 0
        # Each object's estimated memory (``json_cost``) and their sum,
        # against the budget and, when given, held in ``holdings``.
        self.holdings = holdings
        self._built: dict[str, int] = {}
        self.built = 0
        # The weight and memory of each object the last LIST read, which
        # ``_sizes`` and ``_built`` hold only for the objects an event kept
        # since: the same two numbers for every object of a large collection
        # were two dicts as long as it, on each watch of every target.
        self._listed = (0, 0)

    def _forget(self) -> None:
        if self.holdings is not None:
            self.holdings.give(self.built)
        self.items, self._sizes, self.held = {}, {}, 0
        self._built, self.built = {}, 0
        self._listed = (0, 0)

    def _replace(self, found: Collection) -> None:
        """Hold a LIST's objects, whose memory ``holdings`` holds already (the LIST took it)."""
        self.items = {object_name_key(item): item for item in found.items}
        # Each object's share of what the pages weighed, and of what their
        # objects take: a watch event that replaces it later weighs in by
        # its own line.
        count = max(len(self.items), 1)
        self._listed = (found.bytes // count, found.built // count)
        self._sizes, self._built = {}, {}
        self.held = self._listed[0] * len(self.items)
        # The remainder of the division stays held until the copy is dropped.
        self.built = found.built

    def _weights(self, key: str) -> tuple[int, int]:
        """What the object under ``key`` weighs on the wire and in memory (0 for none)."""
        if key in self._sizes:
            return self._sizes[key], self._built[key]
        return self._listed if key in self.items else (0, 0)

    def _keep(self, key: str, obj: dict[str, Any], size: int, built: int) -> None:
        """Keep ``obj`` under ``key`` in the copy, if the copy stays within its budget and total."""
        old_size, old_built = self._weights(key)
        held = self.held - old_size + size
        grown = built - old_built
        count = len(self.items) + (key not in self.items)
        passed = self.budget.exceeded(count, held, self.built + grown)
        if passed is not None:
            raise OverBudget(self._collection, passed, self.budget)
        if self.holdings is not None:
            passed = self.holdings.take(grown)
            if passed is not None:
                raise OverTotal(self._collection, passed, self.budget)
        self.items[key], self._sizes[key], self.held = obj, size, held
        self._built[key] = built
        self.built += grown

    def _drop(self, key: str) -> None:
        size, built = self._weights(key)
        self.items.pop(key, None)
        self._sizes.pop(key, None)
        self._built.pop(key, None)
        self.held -= size
        self.built -= built
        if self.holdings is not None:
            self.holdings.give(built)

    def _weigh(self, line: bytes, kept: dict[str, Any]) -> int:
        """What ``kept``, read from ``line``, is estimated to take in memory."""
        if self.outline is whole:
            return json_cost(line)
        return json_cost(msgspec.json.encode(kept))
