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
stream: the decoded objects take several times that, so the defaults are
set from what a real cluster holds, not from what the operator's memory
could take.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelplane.wire import ApiRef

MiB = 1024 * 1024


@dataclass(frozen=True)
class Budget:
    """At most ``items`` objects and ``bytes`` of their JSON in one collection."""

    items: int
    bytes: int

    def exceeded(self, items: int, size: int) -> str | None:
        """The bound ``items`` objects of ``size`` bytes pass, for a message; None if none."""
        if items > self.items:
            return f"more than {self.items} objects"
        if size > self.bytes:
            return f"more than {_size(self.bytes)}"
        return None

    def __str__(self) -> str:
        return f"{self.items} objects and {_size(self.bytes)}"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


# Whatever no row below names: the product's own objects by label, release
# workloads by name, the advisories' cluster-wide lists (a ConfigMap in every
# namespace, a Deployment in most).
DEFAULT_BUDGET = Budget(items=20_000, bytes=64 * MiB)
# A metadata-only collection (PartialObjectMetadata): a pull Secret's name in
# every namespace. Its objects are small, and there may be one per namespace.
METADATA_BUDGET = Budget(items=20_000, bytes=32 * MiB)

_BY_RESOURCE = {
    # Every CRD of the cluster, schemas and all: a few of them run to 1 MiB
    # (kube-prometheus-stack's), and clusters with a few hundred are common.
    ("apiextensions.k8s.io", "customresourcedefinitions"): Budget(items=4_000, bytes=128 * MiB),
    # Nodes carry many labels on a GPU cluster (node-feature-discovery's):
    # some 20 KiB each, for clusters of thousands.
    ("", "nodes"): Budget(items=20_000, bytes=128 * MiB),
    # Helm's release Secrets with their data: at most 5 revisions kept per
    # release (``--history-max``) of a dozen releases, the largest under
    # 1 MiB each. Tenants can write look-alikes of them in any namespace
    # they may write Secrets in.
    ("", "secrets"): Budget(items=1_000, bytes=32 * MiB),
}


def budget_for(api: ApiRef, *, metadata_only: bool = False) -> Budget:
    """The default budget of a collection of ``api``'s objects (their metadata alone if so)."""
    if metadata_only:
        return METADATA_BUDGET
    return _BY_RESOURCE.get((api.group, api.resource), DEFAULT_BUDGET)
