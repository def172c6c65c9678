"""How much of one collection on a target the operator holds: at most so many objects and bytes.

Each LIST page is read to a bound (``client.MAX_ANSWER_BYTES``), but a
collection is any number of pages, and a watch's copy grows with every
ADDED event. Who creates the objects is the target's business, and a
selector is no fence: anyone who may write Secrets in one namespace can
give them the labels a selector asks for. So every collection, whether it
is read by a LIST (all its pages) or kept by a reflector over a watch's
life, has a ``Budget``: past it the collection is refused, and what was read
of it is dropped.

The caller picks the budget; ``budget_for`` gives each kind's default. The
bytes are what crossed the wire (the JSON of the objects), counted as they
stream. Bytes alone do not bound memory: a 44 MiB page of ``{},`` held
1.06 GiB once parsed. So a budget also bounds ``memory``, what the parse of
the pages builds as ``untrusted.json_cost`` estimates it, counted as the
bytes stream and before anything is parsed. The estimate errs high:
8 to 9 bytes a byte of real objects' JSON, three to four times what they
build, and four to five times what a page of empty objects builds.

A target has dozens of collections and a shard thousands of targets, each
within its budgets: ``Holdings`` add up what one target's reflectors hold
(and the LIST page they are parsing), within a total per target
(``TARGET_MEMORY``) and one for the whole process (``SHARD``). Past
either, the collection that would pass it is refused like one over its own
budget: that target's collections wait, the process goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelplane.wire import ApiRef

MiB = 1024 * 1024


@dataclass(frozen=True)
class Budget:
    """At most ``items`` objects, ``bytes`` of their JSON and ``memory`` built of them."""

    items: int
    bytes: int
    # Bytes of memory their parse builds, as ``untrusted.json_cost`` estimates it.
    memory: int = 256 * MiB

    def exceeded(self, items: int, size: int, built: int = 0) -> str | None:
        """The bound ``items`` objects of ``size`` bytes, ``built`` parsed, pass; None if none."""
        if items > self.items:
            return f"more than {self.items} objects"
        if size > self.bytes:
            return f"more than {_size(self.bytes)}"
        if built > self.memory:
            return f"objects that would take more than {_size(self.memory)} of memory"
        return None

    def __str__(self) -> str:
        return f"{self.items} objects, {_size(self.bytes)} and {_size(self.memory)} of memory"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


# Whatever no row below names: the product's own objects by label, release
# workloads by name, the advisories' cluster-wide lists (a ConfigMap in every
# namespace, a Deployment in most).
# Each memory bound is about what its bytes of real objects are estimated
# at (8 to 9 bytes a byte), so it refuses what they did not: a page of
# empty objects (108 bytes a byte) past a twelfth of the bytes.
DEFAULT_BUDGET = Budget(items=20_000, bytes=64 * MiB, memory=512 * MiB)
# A metadata-only collection (PartialObjectMetadata): a pull Secret's name in
# every namespace. Its objects are small, and there may be one per namespace.
METADATA_BUDGET = Budget(items=20_000, bytes=32 * MiB, memory=256 * MiB)

_BY_RESOURCE = {
    # Every CRD of the cluster, schemas and all: a few of them run to 1 MiB
    # (kube-prometheus-stack's), and clusters with a few hundred are common.
    ("apiextensions.k8s.io", "customresourcedefinitions"): Budget(
        items=4_000, bytes=128 * MiB, memory=1024 * MiB
    ),
    # Nodes carry many labels on a GPU cluster (node-feature-discovery's):
    # some 20 KiB each, for clusters of thousands.
    ("", "nodes"): Budget(items=20_000, bytes=128 * MiB, memory=1024 * MiB),
    # Helm's release Secrets with their data: at most 5 revisions kept per
    # release (``--history-max``) of a dozen releases, the largest under
    # 1 MiB each. Tenants can write look-alikes of them in any namespace
    # they may write Secrets in. Their data is base64: few containers.
    ("", "secrets"): Budget(items=1_000, bytes=32 * MiB, memory=128 * MiB),
}


def budget_for(api: ApiRef, *, metadata_only: bool = False) -> Budget:
    """The default budget of a collection of ``api``'s objects (their metadata alone if so)."""
    if metadata_only:
        return METADATA_BUDGET
    return _BY_RESOURCE.get((api.group, api.resource), DEFAULT_BUDGET)


# What one target's reflectors may hold together, estimated, with the LIST
# pages they are parsing: a healthy target's copies hold some 40 KiB
# (docs/sizing.md), a real one's outlined CRDs some 110 KiB, and a page of
# 500 real CRDs is estimated at a few hundred MiB while it is parsed.
# A target that needs more than this is refused, not its shard.
TARGET_MEMORY = 1024 * MiB
# What every reflector of the process may hold together, estimated: some
# 500 to 700 MiB of real objects, within the chart's default 1 GiB limit
# with the operator's own 100 MiB. 1,400 healthy targets' copies (what
# that limit holds) are estimated at some 200 MiB; the rest is room for
# pages being parsed.
SHARD_MEMORY = 2048 * MiB


class Holdings:
    """Memory (as ``json_cost`` estimates it) held against a total, and its parent's.

    ``take`` adds to this total and every one above it, or to none of them
    when one would pass its limit; ``give`` returns it.
    """

    __slots__ = ("held", "limit", "parent", "what")

    def __init__(self, what: str, limit: int, parent: Holdings | None = None) -> None:
        self.what, self.limit, self.parent = what, limit, parent
        self.held = 0

    def _chain(self) -> list[Holdings]:
        chain: list[Holdings] = []
        node: Holdings | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    def take(self, size: int) -> str | None:
        """Hold ``size`` more (less, if negative); else the total it would pass, for a message."""
        chain = self._chain()
        if size > 0:
            for node in chain:
                if node.held + size > node.limit:
                    return (
                        f"the objects the operator keeps of {node.what} would take more "
                        f"than {_size(node.limit)} of memory together"
                    )
        for node in chain:
            node.held += size
        return None

    def give(self, size: int) -> None:
        for node in self._chain():
            node.held -= size


# The process's total: every target's ``Holdings`` has it as parent.
SHARD = Holdings("all its targets", SHARD_MEMORY)


def target_holdings(label: str, limit: int = TARGET_MEMORY) -> Holdings:
    """A new total for one target's reflectors, within the shard's."""
    return Holdings(f"the target of {label}" if label else "one target", limit, SHARD)
