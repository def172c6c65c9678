"""What a watched collection's change is judged by, kept object by object.

A Node event once made the cache read the part of every Node (labels,
taints, extended resources) to compare the collection with the one before:
with 5,000 Nodes of some 80 NFD labels each that was 177 ms of the event
loop per heartbeat, the heartbeat itself changing nothing that is read
(issue 42), and the kubelets of such a cluster post about 17 a second.
``Parts`` keeps the digest of each object's part, by its key in the
reflector's copy: an event computes the part of the one object it names
and compares it with the one kept, so it costs that object, whatever the
collection's size. The collection's digest (the sum of its objects') is kept
in O(1) an event, and is ``digest_of`` the whole collection.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

# The part of one object that is read, in a comparable form (``canonical``
# is what is digested); None: nothing of this object is read.
PartOf = Callable[[dict[str, Any]], object]
# What a part is digested by: ``part_digest``, or nothing more where the
# copy keeps the digest itself (``observe.gpu_watch.outline``).
DigestOf = Callable[[Any], int]

# Digests are added modulo this: a multiset's sum, which does not cancel
# out two equal parts the way an XOR would.
_MODULUS = 1 << 128


_SORTED = msgspec.json.Encoder(order="sorted")


def canonical(value: object) -> bytes:
    """``value`` (JSON a target sent, or tuples of it) as comparable bytes: dict keys sorted.

    msgspec's JSON, some ten times faster than the repr of the sorted items
    of a Node's 80 labels; the repr, marked so that it equals no JSON, of
    what msgspec will not encode (a lone surrogate a hostile target sent).
    """
    try:
        return _SORTED.encode(value)
    except (TypeError, ValueError):
        return b"repr:" + repr(value).encode("utf-8", "backslashreplace")


def part_digest(part: object) -> int:
    """A digest of ``part`` no target can make collide: its objects are anyone's.

    Kept instead of the part: a Node's labels alone run to KiB, and a
    20,000-node target's parts would be some 100 MiB.
    """
    return int.from_bytes(hashlib.blake2b(canonical(part), digest_size=16).digest())


def digest_of(
    part_of: PartOf, items: Iterable[dict[str, Any]], digest: DigestOf = part_digest
) -> int:
    """The digest of a whole collection, read object by object: what ``Parts`` keeps."""
    parts = (part_of(obj) for obj in items)
    return sum(digest(p) for p in parts if p is not None) % _MODULUS


class Parts:
    """The digests of a collection's objects' parts, by key, and of the collection.

    ``update`` returns whether the collection's parts changed, exactly when
    a whole comparison (the sorted parts before and after) would: an object's
    part includes its name, so no two objects' parts are equal, and one
    replaced by a different one always changes the whole.
    """

    __slots__ = ("_digest_part", "_digests", "_part_of", "digest")

    def __init__(self, part_of: PartOf, *, digest: DigestOf = part_digest) -> None:
        self._part_of = part_of
        self._digest_part = digest
        self._digests: dict[str, int] = {}
        self.digest = 0

    def _digest(self, obj: dict[str, Any] | None) -> int | None:
        part = None if obj is None else self._part_of(obj)
        return None if part is None else self._digest_part(part)

    def update(self, key: str, obj: dict[str, Any] | None) -> bool:
        """Note the object under ``key`` as it is now (None: deleted); whether its part changed."""
        new = self._digest(obj)
        old = self._digests.pop(key, None)
        if new is not None:
            self._digests[key] = new
        self.digest = (self.digest - (old or 0) + (new or 0)) % _MODULUS
        return new != old

    def rebuild(self, items: Mapping[str, dict[str, Any]]) -> bool:
        """Read the whole collection again (after a LIST, or a copy lost); whether it changed.

        The one O(collection) step, for what is not one object's event.
        """
        before = Counter(self._digests.values())
        self._digests = {}
        for key, obj in items.items():
            digest = self._digest(obj)
            if digest is not None:
                self._digests[key] = digest
        self.digest = sum(self._digests.values()) % _MODULUS
        return Counter(self._digests.values()) != before
