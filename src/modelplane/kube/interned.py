"""Parts of targets' answers kept once, however many targets send the same.

A shard watches thousands of targets, and most of them carry the same
things: every target of a stack at the same versions has the same CRDs,
and so the same outlines of them. ``interned`` keeps one copy of each
distinct part, found by the digest of its content, for as long as some
copy holds it (a weak reference: a part no target holds any more goes).

What it returns is shared: read it, never change it. The copies it is used
for are read-only already (``kube.reflector`` replaces an object whole on
every event, and whoever reads the copy is handed its objects as they are).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")


class KeptOnce(Generic[T]):
    """One kept value for each distinct content, found by the digest of it, held weakly.

    What ``interned``, ``discovery.shared`` and ``plurals.merged`` each keep
    once for every target that has the same: a value no one holds any more
    goes. The content is what makes two values equal, encoded as JSON with
    keys sorted; ``msgspec.EncodeError`` or ``TypeError`` if it does not encode.
    """

    def __init__(self) -> None:
        self._kept: weakref.WeakValueDictionary[bytes, T] = weakref.WeakValueDictionary()

    def get(self, content: object, make: Callable[[], T]) -> T:
        """The value kept for ``content``: ``make()``'s, kept, the first time."""
        key = hashlib.sha256(msgspec.json.encode(content, order="sorted")).digest()
        found = self._kept.get(key)
        if found is None:
            found = make()
            self._kept[key] = found
        return found


class Shared(dict[str, Any]):
    """A dict a weak reference may point at (a plain one may not)."""

    __slots__ = ("__weakref__",)


_PARTS: KeptOnce[Shared] = KeptOnce()


def interned(part: dict[str, Any]) -> dict[str, Any]:
    """The one kept copy of a part equal to ``part``: a copy of it made the first time.

    Equal by content, keys in any order; a part that does not encode as
    JSON is returned as it is.
    """
    try:
        return _PARTS.get(part, lambda: Shared(part))
    except (TypeError, msgspec.EncodeError):
        return part
