"""Which nodes are GPU nodes, and whether their GPUs are available to new pods.

The signs of a GPU node (a taint, labels, NFD's PCI labels, capacity, the
driver's ResourceSlices) and what keeps its GPUs from new pods (a cordon, a
taint the kubelet plugin does not tolerate, a node selector or node affinity
of the plugin that leaves the node out), shared by the GPU advisories of
NFD and the DRA driver and by ``plan.capacity``'s count. Pure, as the
advisories are.

A sign of a GPU is no promise that the plugin runs there: the DRA driver's
chart selects nodes by NFD's ``pci-10de``, ``pci-0302_10de`` and
``pci-0300_10de`` labels (and two more), so a node known as a GPU node only
by its taint, a cloud's accelerator label or another NFD label layout gets
no plugin, and its GPUs take no pod.
"""

from __future__ import annotations

from collections.abc import Callable

from modelplane.catalog.advisories import MET, UNKNOWN, WARNING, cannot, listed
from modelplane.catalog.facts import ClusterFacts, ObservedNode, ObservedTaint
from modelplane.catalog.placement import Placement
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


def untolerated(node: ObservedNode, templates: list[Placement]) -> list[ObservedTaint]:
    """The node's blocking taints that no one of the pod ``templates`` runs through.

    A taint is tolerated when any template tolerates it (one DaemonSet of the
    plugin running there is enough); with no template, none is.
    """
    return [
        t
        for t in node.blocking_taints
        if t.key not in DAEMON_TOLERATED and not any(p.tolerates(t) for p in templates)
    ]


# Why a GPU node gets no kubelet plugin when none of its DaemonSets selects it.
NOT_SELECTED = "the kubelet plugin's node selector and node affinity leave it out"


def plugin_kept_off(node: ObservedNode, plugins: list[Placement]) -> str | None:
    """Why the kubelet plugin (its DaemonSets' pod templates) cannot run on ``node``; None
    when one of them can: none selects the node, or the taints none of those that do
    tolerates."""
    selecting = [p for p in plugins if p.selection.selects(node.name, node.labels)]
    if not selecting:
        return NOT_SELECTED
    taints = untolerated(node, selecting)
    if not taints:
        return None
    shown = ", ".join(printable(t.shown, 400) for t in taints[:3])
    more = len(taints) - 3
    return f"taint {shown}" + (f" and {more} more" if more > 0 else "")


def gpu_node_unavailable(node: ObservedNode, plugins: list[Placement] | None) -> str | None:
    """Why a GPU node's GPUs are not available to new pods; None when they are.

    Cordoned (``spec.unschedulable``), or the DRA driver's kubelet plugin
    cannot run there (``plugin_kept_off``): judged against the plugin
    DaemonSets' pod templates (``plugins``), and not at all when no plugin
    DaemonSet was observed (the plugin check says that).
    """
    why: list[str] = []
    if node.unschedulable or any(t.key == CORDON_TAINT for t in node.blocking_taints):
        why.append("cordoned")
    kept_off = None if plugins is None else plugin_kept_off(node, plugins)
    if kept_off is not None:
        why.append(kept_off)
    return " and ".join(why) or None


def gpu_signs(gpus: GpuNodes) -> str:
    return (
        f"the {gpus.taint} taint, a label {', '.join(gpus.labels)}, an NFD PCI label of vendor "
        f"{gpus.pci_vendor}, {gpus.resource} capacity or a {gpus.driver} ResourceSlice"
    )
