"""Which nodes are GPU nodes, and whether their GPUs are available to new pods.

The signs of a GPU node (a taint, labels, NFD's PCI labels, capacity, the
driver's ResourceSlices) and what keeps its GPUs from new pods (a cordon, a
taint the kubelet plugin does not tolerate), shared by the GPU advisories of
NFD and the DRA driver and by ``plan.capacity``'s count. Pure, as the
advisories are.
"""

from __future__ import annotations

from collections.abc import Callable

from modelplane.catalog.advisories import MET, UNKNOWN, WARNING, cannot, listed
from modelplane.catalog.facts import ClusterFacts, ObservedNode, ObservedTaint
from modelplane.catalog.placement import ObservedToleration
from modelplane.catalog.types import Finding, GpuNodes
from modelplane.untrusted import printable


def each_gpu_node(
    gpus: GpuNodes,
    facts: ClusterFacts,
    *,
    lacks: Callable[[ObservedNode], bool],
    lack: tuple[str, str],
    what: str,
    done: str,
) -> Finding:
    """Warn about the GPU nodes that ``lacks``; ``lack`` is its verb, one node and many."""
    if facts.nodes is None:
        return cannot(facts, "nodes")
    gpu = gpu_nodes(gpus, facts.nodes, facts.resource_slices)
    if not gpu:
        return UNKNOWN, f"no node shows a sign of a GPU ({gpu_signs(gpus)}): nothing to check"
    bad = [n.name for n in gpu if lacks(n)]
    if bad:
        many = len(bad) > 1
        return WARNING, (f"GPU node{'s' if many else ''} {listed(bad)} {lack[many]} {what}")
    return MET, f"all {len(gpu)} GPU nodes {done}"


def is_nfd_vendor_label(gpus: GpuNodes, key: str, value: str) -> bool:
    """``feature.node.kubernetes.io/pci-0302_10de.present=true`` and friends."""
    suffix = ".present"
    if not (key.startswith(gpus.nfd_label_prefix) and key.endswith(suffix)):
        return False
    fields = key[len(gpus.nfd_label_prefix) : -len(suffix)].split("_")
    return gpus.pci_vendor in fields and value == "true"


def gpu_nodes(
    gpus: GpuNodes, nodes: list[ObservedNode], slices: dict[str, list[str]] | None
) -> list[ObservedNode]:
    """Nodes that look like GPU nodes by any sign: taint, labels, resources, slices."""
    with_slices = set((slices or {}).get(gpus.driver, []))
    out = []
    for node in nodes:
        if (
            gpus.taint in node.taints
            or any(node.labels.get(label, "false") != "false" for label in gpus.labels)
            or any(is_nfd_vendor_label(gpus, k, v) for k, v in node.labels.items())
            or gpus.resource in node.allocatable
            or node.name in with_slices
        ):
            out.append(node)
    return out


# The taints the DaemonSet controller tolerates on every DaemonSet pod
# (kubernetes pkg/controller/daemon/util, AddOrUpdateDaemonPodTolerations):
# a kubelet plugin runs through them. The unschedulable one is a cordon, said so.
CORDON_TAINT = "node.kubernetes.io/unschedulable"
DAEMON_TOLERATED = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/network-unavailable",
        CORDON_TAINT,
    }
)


def untolerated(
    node: ObservedNode, tolerations: list[list[ObservedToleration]]
) -> list[ObservedTaint]:
    """The node's blocking taints that no one of the pod templates ``tolerations`` runs through.

    A taint is tolerated when any template tolerates it (one DaemonSet of the
    plugin running there is enough); with no template, none is.
    """
    return [
        t
        for t in node.blocking_taints
        if t.key not in DAEMON_TOLERATED
        and not any(any(x.tolerates(t) for x in template) for template in tolerations)
    ]


def gpu_node_unavailable(
    node: ObservedNode, plugin_tolerations: list[list[ObservedToleration]] | None
) -> str | None:
    """Why a GPU node's GPUs are not available to new pods; None when they are.

    Cordoned (``spec.unschedulable``), or tainted (NoSchedule, NoExecute)
    so that the DRA driver's kubelet plugin cannot run there: the taints are
    judged against the plugin DaemonSets' tolerations (``plugin_tolerations``),
    and not at all when no plugin DaemonSet was observed (the plugin check
    says that).
    """
    why: list[str] = []
    if node.unschedulable or any(t.key == CORDON_TAINT for t in node.blocking_taints):
        why.append("cordoned")
    if plugin_tolerations is not None:
        taints = untolerated(node, plugin_tolerations)
        if taints:
            shown = ", ".join(printable(t.shown, 400) for t in taints[:3])
            more = len(taints) - 3
            why.append(f"taint {shown}" + (f" and {more} more" if more > 0 else ""))
    return " and ".join(why) or None


def gpu_signs(gpus: GpuNodes) -> str:
    return (
        f"the {gpus.taint} taint, a label {', '.join(gpus.labels)}, an NFD PCI label of vendor "
        f"{gpus.pci_vendor}, {gpus.resource} capacity or a {gpus.driver} ResourceSlice"
    )
