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
from typing import Any

import msgspec


class Shared(dict[str, Any]):
    """A dict a weak reference may point at (a plain one may not)."""

    __slots__ = ("__weakref__",)


_PARTS: weakref.WeakValueDictionary[bytes, Shared] = weakref.WeakValueDictionary()


def interned(part: dict[str, Any]) -> dict[str, Any]:
    """The one kept copy of a part equal to ``part``: ``part`` itself the first time.

    Equal by content, keys in any order; a part that does not encode as
    JSON is returned as it is.
    """
    try:
        text = msgspec.json.encode(part, order="sorted")
    except (TypeError, msgspec.EncodeError):
        return part
    key = hashlib.sha256(text).digest()
    found = _PARTS.get(key)
    if found is None:
        found = Shared(part)
        _PARTS[key] = found
    return found
