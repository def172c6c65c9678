"""Following the GPU path by watch: what GPUsAvailable and ``status.target`` read.

The advisories' facts are read with each direct read of the target
(``observe.facts``); those of the GPU checks (the Nodes, the ResourceSlices,
the kubelet plugin's DaemonSets in the driver's namespaces) are also
watched, so that a cordon, a maintenance taint, the
plugin's pods going, or slices deleted reach the hub within a reconcile,
not at ``--relist``. The ResourceQuotas the critical-pods check reads are
not: they are listed across namespaces, and a watch names one namespace
or none of a namespaced kind only for what no tenant writes; they are
read with each direct read, as before. A change of what the checks read bumps a generation the
reconciler compares with the one its facts were read at; it then reads the
facts again (one LIST per listing), and a quiet resync reads none.

What is compared is only what the checks read (``part_of``), object by
object (``observe.parts``): a Node's status changes with every heartbeat
(conditions, the lease's renew time), and a ResourceQuota's ``status.used``
with every pod, and neither may wake a stack. The watches keep only the
digest of that part of each object (``outline``): a real Node carries its
images, a few KiB of status and as much again of NFD labels, and a fleet
of targets would hold every one of them to compare a handful of fields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import components_for
from modelplane.catalog.facts import RESOURCE_QUOTAS as QUOTAS
from modelplane.catalog.facts import Listing
from modelplane.observe.parts import canonical, part_digest
from modelplane.plan.capacity import gpu_check
from modelplane.untrusted import as_dict, pick


def gpu_listings(spec: ServingStackSpec) -> tuple[Listing, ...]:
    """The LISTs the spec's GPU checks read, each once: what is watched for them.

    Scoped as ``observe.facts.needed_facts`` scopes them: a namespaced fact
    in each namespace its component is observed in, never cluster-wide.
    """
    found = {
        scoped.listing
        for c in components_for(spec)
        for a in c.advisories
        if gpu_check(a) is not None
        for f in a.needs()
        for scoped in ([f.within(n) for n in c.observed_in] if c.observed_in else [f])
    }
    return tuple(sorted((f for f in found if f.api != QUOTAS), key=_order))


def _order(listing: Listing) -> tuple[str, str, str]:
    return (listing.api.key, listing.namespace or "", listing.name or "")


def _text(value: Any) -> str:
    """``value`` as comparable text: what a part holds of a field's content."""
    return canonical(value).decode()


def _node(obj: dict[str, Any]) -> tuple[Any, ...]:
    meta, spec, status = (
        as_dict(obj.get("metadata")),
        as_dict(obj.get("spec")),
        as_dict(obj.get("status")),
    )
    return (
        meta.get("name"),
        _text(as_dict(meta.get("labels"))),
        _text(spec.get("taints")),
        spec.get("unschedulable") is True,
        # Extended resources only: a device plugin's (NoNodeAdvertises).
        _text({k: v for k, v in as_dict(status.get("allocatable")).items() if "/" in str(k)}),
    )


def _required_affinity(pod: dict[str, Any]) -> Any:
    """The pod spec's required node affinity, the only part of its affinity the checks read."""
    node = as_dict(as_dict(pod.get("affinity")).get("nodeAffinity"))
    return node.get("requiredDuringSchedulingIgnoredDuringExecution")


def _daemon_set(obj: dict[str, Any]) -> tuple[Any, ...]:
    meta, status = as_dict(obj.get("metadata")), as_dict(obj.get("status"))
    pod = as_dict(as_dict(as_dict(obj.get("spec")).get("template")).get("spec"))
    return (
        meta.get("namespace"),
        meta.get("name"),
        _text(pod.get("tolerations")),
        _text(pod.get("nodeSelector")),
        _text(_required_affinity(pod)),
        _text([c.get("image") for c in pod.get("containers") or [] if isinstance(c, dict)]),
        status.get("desiredNumberScheduled"),
        status.get("numberAvailable"),
    )


def _spec_only(obj: dict[str, Any]) -> tuple[Any, ...]:
    meta = as_dict(obj.get("metadata"))
    return (meta.get("namespace"), meta.get("name"), _text(obj.get("spec")))


_BY_RESOURCE = {"nodes": _node, "daemonsets": _daemon_set}


# Where an outline keeps the digest of its object's part.
PART = "part"


def outline(resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What the watch of a GPU collection keeps of one object: who it is, and its part's digest.

    Nothing reads these copies but ``observe.parts``, which compares each
    object's part by its digest (``part_digest``): the digest is all of the
    part that is kept (``kept_part``), not a Node's labels (80 NFD labels,
    some KiB, on a real GPU node) or a ResourceSlice's devices. Its name and
    namespace are what the copy keys it by, with its resourceVersion.
    """
    metadata = pick(as_dict(obj.get("metadata")), ("namespace", "name", "resourceVersion"))
    for shared in ("name", "namespace"):
        if isinstance(metadata.get(shared), str):
            # The driver's namespace and DaemonSets are named the same on
            # every target: kept once.
            metadata[shared] = sys.intern(metadata[shared])
    return {"metadata": metadata, PART: part_digest(part_of(resource)(obj))}


def kept_part(kept: dict[str, Any]) -> int | None:
    """The digest of its object's part an ``outline`` keeps, to be judged by as it is."""
    digest = kept.get(PART)
    return digest if isinstance(digest, int) else None


def kept_digest(digest: int) -> int:
    """What ``observe.parts.Parts`` digests a ``kept_part`` by: nothing more, it is one."""
    return digest


def part_of(resource: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """What of one object of a watched collection the GPU checks read, in a comparable form.

    Nodes: labels, taints, cordon and extended resources (never status
    heartbeats); DaemonSets: tolerations, nodeSelector, required node
    affinity, images and the scheduled and available counts; anything else
    (ResourceSlices): the spec. Each includes the object's name, so no two
    objects' parts are equal (``observe.parts`` relies on it).
    """
    return _BY_RESOURCE.get(resource, _spec_only)


def fingerprint(resource: str, items: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The parts of a whole collection (``part_of``), sorted: what the cache compared once.

    The cache now keeps them object by object (``observe.parts``); this
    stays as the reference that way is held to.
    """
    reduce = part_of(resource)
    return sorted(reduce(i) for i in items)
