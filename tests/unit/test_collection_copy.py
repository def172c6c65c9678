"""A reflector's copy weighs each object by its own event, else by its share of the LIST.

``kube.collection_copy`` keeps the LIST's per-object share once rather than
in two dicts as long as the collection; what the copy holds against its
budget and the target's holdings must stay what it was: the sum of each
object's weight, the LIST's remainder included, given back whole.
"""

from __future__ import annotations

import pytest

from modelplane.kube.budget import Budget, Holdings
from modelplane.kube.client import Collection, OverBudget
from modelplane.kube.collection_copy import CollectionCopy

MiB = 1 << 20
# Three objects over 100 bytes on the wire and 1,000 built: 33 and 333
# each, and 1 byte built that no object's share carries.
LISTED = ("a", "b", "c")
LIST_BYTES, LIST_BUILT = 100, 1000
SHARE = (33, 333)
REMAINDER = 1

# (what happens, key, wire bytes, built bytes); DROP ignores the weights.
KEEP, DROP = "keep", "drop"
Step = tuple[str, str, int, int]


def _copy() -> tuple[CollectionCopy, Holdings]:
    holdings = Holdings("the target of t", 64 * MiB)
    copy = CollectionCopy("the test's configmaps", Budget(items=100, bytes=MiB), holdings, None)
    # The LIST holds what its objects build before the copy is replaced.
    assert holdings.take(LIST_BUILT) is None
    found = [{"metadata": {"name": n}} for n in LISTED]
    copy._replace(Collection(found, "1", bytes=LIST_BYTES, built=LIST_BUILT))
    return copy, holdings


@pytest.mark.parametrize(
    "steps",
    [
        [],
        [(KEEP, "/a", 50, 400)],
        [(DROP, "/b", 0, 0)],
        [(KEEP, "/d", 10, 90)],
        [(DROP, "/a", 0, 0), (KEEP, "/a", 20, 200)],
        [(KEEP, "/a", 50, 400), (DROP, "/a", 0, 0), (DROP, "/a", 0, 0)],
        [(DROP, "/nothing", 0, 0)],
        [(DROP, "/a", 0, 0), (DROP, "/b", 0, 0), (DROP, "/c", 0, 0)],
    ],
    ids=[
        "as listed",
        "one listed replaced",
        "one listed deleted",
        "one added",
        "deleted and added again",
        "replaced, deleted, deleted again",
        "an unknown deleted",
        "every listed deleted",
    ],
)
def test_the_copy_holds_each_objects_weight_and_gives_all_back(steps: list[Step]) -> None:
    copy, holdings = _copy()
    weights = {f"/{n}": SHARE for n in LISTED}
    for what, key, size, built in steps:
        if what == KEEP:
            copy._keep(key, {}, size, built)
            weights[key] = (size, built)
        else:
            copy._drop(key)
            weights.pop(key, None)
        assert set(copy.items) == set(weights)
        assert copy.held == sum(w[0] for w in weights.values())
        assert copy.built == sum(w[1] for w in weights.values()) + REMAINDER
        assert holdings.held == copy.built
    copy._forget()
    assert (copy.items, copy.held, copy.built, holdings.held) == ({}, 0, 0, 0)


def test_an_object_past_the_budget_leaves_the_copy_as_it_was() -> None:
    copy, holdings = _copy()
    with pytest.raises(OverBudget, match="more than"):
        copy._keep("/a", {}, 2 * MiB, 10)
    assert (copy.held, copy.built, holdings.held) == (3 * SHARE[0], LIST_BUILT, LIST_BUILT)


def test_two_targets_copies_of_the_same_objects_share_their_keys() -> None:
    # Each target's LIST parses its own strings; the keys the copies keep
    # them under are one string, however many targets carry the object.
    one, _ = _copy()
    two, _ = _copy()
    # Built at run time, as a parse builds them: not one constant of the test's.
    name = "".join(["gateways.gateway", ".networking.k8s.io"])
    for copy in (one, two):
        found = [{"metadata": {"name": "".join([name])}}]
        copy._replace(Collection(found, "2", bytes=10, built=10))
    [key_one], [key_two] = list(one.items), list(two.items)
    assert key_one == "/gateways.gateway.networking.k8s.io"
    assert key_one is key_two
