"""What a target offers in GPUs, and whether it offers them: ``status.target`` and GPUsAvailable.

Pure, like the rest of the plan: raw objects and advisory findings in, a
summary and a condition out. ``summarize_target`` reads the objects as the
API server sent them (``/version``, Nodes, ResourceSlices), defensively:
any field may be missing or of another type, and nothing a target wrote
reaches status without ``printable`` and a limit.

Who can write what is counted. ResourceSlices are cluster-scoped, so no
namespace role (admin, edit) grants them; a DRA driver's ClusterRole does
(kubernetes/website examples/dra/driver-install/clusterrole.yaml grants
create/update on resourceslices, with no restriction on ``spec.driver``),
and a kubelet may write only slices of its own node (NodeRestriction,
the ``nodeName`` field's documented purpose). So any installed DRA driver
can publish a slice of any driver name for any node name. Only slices of
the catalog's GPU driver are counted, only on a Node that exists, only of
each pool's newest generation ("a consumer must only use ResourceSlices
with the highest generation number", ResourceSlice v1 API reference), and a
device is counted once per (pool, device name), its identity in the API.

The ResourceSlice shape is ``resource.k8s.io/v1``, the version the repo
lists (``catalog.facts.RESOURCE_SLICES``): ``spec.driver``, ``spec.nodeName``,
``spec.pool{name, generation}``, ``spec.devices[]{name, attributes,
capacity}``; v1beta1 nested a device's fields under ``basic``, which is read
too, for an ``--observed`` file written from an older server. The NVIDIA
driver publishes a GPU as a device with attributes ``type`` ("gpu"),
``uuid``, ``productName`` (string), ``driverVersion`` (version) and
capacity ``memory`` (a binary-SI quantity): kubernetes-sigs/dra-driver-nvidia-gpu
cmd/gpu-kubelet-plugin/deviceinfo.go (``GpuInfo.GetDevice``), upstream-facts
§5. Only ``type: gpu`` devices are GPUs here, as in the ``gpu.nvidia.com``
DeviceClass selector (``device.attributes['gpu.nvidia.com'].type == 'gpu'``):
MIG and VFIO devices are published with other types.

``gpus_available`` does not judge the cluster again: it takes the
advisories' own findings (``gpu_findings`` picks them out of the plan's
requirement results by advisory kind) and the summary, and names one state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from modelplane.api import status_limits
from modelplane.catalog.components import node_feature_discovery, nvidia_dra_driver
from modelplane.catalog.components._common import GPUS
from modelplane.catalog.facts import ObservedNode, blocking_taints
from modelplane.catalog.gpu_nodes import gpu_node_unavailable, gpu_nodes
from modelplane.catalog.placement import Placement
from modelplane.catalog.types import Component, Finding, GpuNodes, RequirementStatus, Severity
from modelplane.untrusted import printable
from modelplane.vocabulary import GpuCheck as GpuCheck
from modelplane.vocabulary import GpuReason as GpuReason

if TYPE_CHECKING:
    # Annotations only: plan.model holds this module's models in the Plan.
    from modelplane.plan.model import RequirementResult

# ---- limits: the status fields' own (api.status_limits) ------------------------------

MAX_KUBERNETES_VERSION = status_limits.string_limit("target.kubernetesVersion")
MAX_PRODUCT = status_limits.string_limit("target.devices[].product")
MAX_DRIVER_VERSION = status_limits.string_limit("target.devices[].driverVersion")
MAX_MEMORY = status_limits.string_limit("target.devices[].memory")
MAX_DEVICE_GROUPS = status_limits.list_limit("target.devices")
MAX_DEVICES_PER_SLICE = status_limits.DEVICES_PER_SLICE
MAX_LISTED_GROUPS = status_limits.LISTED_DEVICE_GROUPS
MAX_CONDITION_MESSAGE = status_limits.GPUS_MESSAGE

GPU_DEVICE_TYPE = "gpu"
# The multiplication sign of "H100 x4", escaped: ruff flags it as a look-alike of "x".
TIMES = "\u00d7"

# A Kubernetes quantity (apimachinery resource.ParseQuantity): a signed
# decimal number, then a binary or decimal SI suffix or an exponent. ASCII
# digits only: Python's \d takes any script's, which the API server refuses.
_QUANTITY = re.compile(
    r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


class _Model(BaseModel):
    # As the status models: camelCase on the wire, frozen, nothing extra.
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class DeviceGroup(_Model):
    """GPUs of one product, memory and driver version, and how many nodes have them."""

    product: str = Field(max_length=MAX_PRODUCT)
    count: int = Field(ge=0)
    memory: str = Field(default="", max_length=MAX_MEMORY)  # a quantity, "" when not published
    driver_version: str = Field(default="", max_length=MAX_DRIVER_VERSION)
    nodes: int = Field(ge=0)


class TargetSummary(_Model):
    """``status.target``: what the cluster offers."""

    kubernetes_version: str = Field(default="", max_length=MAX_KUBERNETES_VERSION)
    gpu_nodes: int = Field(default=0, ge=0)  # nodes with any sign of a GPU (catalog GPUS)
    gpus: int = Field(default=0, ge=0)  # GPU devices the DRA driver publishes
    devices: list[DeviceGroup] = Field(default_factory=list, max_length=MAX_DEVICE_GROUPS)
    # GPUs in the groups left out of ``devices``, so the counts still add up.
    other_devices: int = Field(default=0, ge=0)


# ---- the summary -----------------------------------------------------------------------


def summarize_target(
    version_info: object,
    nodes: object,
    resource_slices: object,
    *,
    gpus: GpuNodes = GPUS,
    plugin_placements: list[Placement] | None = None,
) -> TargetSummary:
    """``status.target`` from ``GET /version``, the Nodes and the ResourceSlices, as listed.

    Each argument is taken as whatever arrived: an entry that is not an
    object, or a field of the wrong type, counts as absent. A GPU on a node
    that is cordoned, or that the kubelet plugin cannot run on (its
    DaemonSets' ``plugin_placements`` leave the node out or do not tolerate
    its taints, see ``gpu_node_unavailable``), is not counted: it takes no
    new pod.
    """
    # By name: a list from a file may repeat a node, a LIST never does.
    by_name = {n.name: n for n in (_node(item) for item in _items(nodes)) if n is not None}
    observed, names = list(by_name.values()), set(by_name)
    devices = _gpu_devices(resource_slices, gpus.driver, names)
    with_slices = sorted({node for node, _ in devices.values()})
    gpu = gpu_nodes(gpus, observed, {gpus.driver: with_slices})
    out = {n.name for n in gpu if gpu_node_unavailable(n, plugin_placements) is not None}
    devices = {k: v for k, v in devices.items() if v[0] not in out}

    groups: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
    for node, key in devices.values():
        count, on = groups.get(key, (0, set()))
        on.add(node)
        groups[key] = (count + 1, on)
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))
    shown = [
        DeviceGroup(
            product=product,
            count=count,
            memory=memory,
            driver_version=driver_version,
            nodes=len(on),
        )
        for (product, memory, driver_version), (count, on) in ordered[:MAX_DEVICE_GROUPS]
    ]
    return TargetSummary(
        kubernetes_version=kubernetes_version(version_info),
        gpu_nodes=len(gpu),
        gpus=len(devices),
        devices=shown,
        other_devices=sum(count for _, (count, _) in ordered[MAX_DEVICE_GROUPS:]),
    )


def kubernetes_version(version_info: object) -> str:
    """``gitVersion`` of ``GET /version``, else ``v<major>.<minor>``, else ""."""
    info = _obj(version_info)
    git = info.get("gitVersion")
    if isinstance(git, str) and git:
        return printable(git, MAX_KUBERNETES_VERSION)
    major, minor = info.get("major"), info.get("minor")
    if isinstance(major, str) and isinstance(minor, str) and major and minor:
        return printable(f"v{major}.{minor}", MAX_KUBERNETES_VERSION)
    return ""


def _obj(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: object) -> list[Mapping[str, Any]]:
    # A LIST answer's items, or the list itself.
    if isinstance(value, Mapping):
        value = value.get("items")
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _node(obj: Mapping[str, Any]) -> ObservedNode | None:
    """A Node reduced as ``catalog.facts`` reduces it, skipping what is not of its type."""
    meta, spec, status = _obj(obj.get("metadata")), _obj(obj.get("spec")), _obj(obj.get("status"))
    name = _str(meta.get("name"))
    if not name:
        return None
    labels = {
        k: v
        for k, v in _obj(meta.get("labels")).items()
        if isinstance(k, str) and isinstance(v, str)
    }
    taints_in = spec.get("taints")
    taints = [
        key
        for t in (taints_in if isinstance(taints_in, list) else [])
        if (key := _str(_obj(t).get("key")))
    ]
    allocatable = {
        str(k): v
        for k, v in _obj(status.get("allocatable")).items()
        if isinstance(v, str) and "/" in str(k)
    }
    return ObservedNode(
        name=name,
        labels=labels,
        taints=taints,
        allocatable=allocatable,
        unschedulable=spec.get("unschedulable") is True,
        blocking_taints=blocking_taints(taints_in),
    )


def _gpu_devices(
    resource_slices: object, driver: str, nodes: set[str]
) -> dict[tuple[str, str], tuple[str, tuple[str, str, str]]]:
    """(pool, device name) -> (node, (product, memory, driver version)) of every GPU counted."""
    newest: dict[str, int] = {}
    slices: list[tuple[str, int, str, list[Any]]] = []
    for item in _items(resource_slices):
        spec = _obj(item.get("spec"))
        node = _str(spec.get("nodeName"))
        pool = _obj(spec.get("pool"))
        pool_name, generation = _str(pool.get("name")), pool.get("generation", 0)
        devices = spec.get("devices")
        if (
            _str(spec.get("driver")) != driver
            or node not in nodes
            or not pool_name
            or not isinstance(generation, int)
            or isinstance(generation, bool)
            or not isinstance(devices, list)
        ):
            continue
        newest[pool_name] = max(newest.get(pool_name, generation), generation)
        slices.append((pool_name, generation, node, devices))
    out: dict[tuple[str, str], tuple[str, tuple[str, str, str]]] = {}
    for pool_name, generation, node, devices in slices:
        if generation != newest[pool_name]:
            continue
        for device in devices[:MAX_DEVICES_PER_SLICE]:
            found = _gpu(_obj(device), driver)
            if found is not None:
                out.setdefault((pool_name, found[0]), (node, found[1]))
    return out


def _gpu(device: Mapping[str, Any], driver: str) -> tuple[str, tuple[str, str, str]] | None:
    """(device name, its group key) when the device is a GPU, else None."""
    name = _str(device.get("name"))
    basic = _obj(device.get("basic"))  # v1beta1
    attributes = _obj(device.get("attributes") or basic.get("attributes"))
    capacity = _obj(device.get("capacity") or basic.get("capacity"))
    if not name or _attribute(attributes, driver, "type") != GPU_DEVICE_TYPE:
        return None
    memory = _obj(capacity.get("memory")).get("value")
    # A quantity is shown as published, and only if it is one: a cut one is not.
    memory_text = (
        memory
        if isinstance(memory, str) and len(memory) <= MAX_MEMORY and _QUANTITY.fullmatch(memory)
        else ""
    )
    key = (
        printable(_attribute(attributes, driver, "productName") or "unknown", MAX_PRODUCT),
        memory_text,
        printable(_attribute(attributes, driver, "driverVersion"), MAX_DRIVER_VERSION),
    )
    return name, key


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str:
    """A string or version attribute, by its short name or qualified by the driver's domain."""
    value = _obj(attributes.get(name) or attributes.get(f"{driver}/{name}"))
    for kind in ("string", "version"):
        if isinstance(value.get(kind), str):
            return str(value[kind])
    return ""


# ---- GPUsAvailable ---------------------------------------------------------------------


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class GpuAvailability(_Model):
    status: ConditionStatus
    reason: GpuCheck | GpuReason
    message: str = Field(max_length=MAX_CONDITION_MESSAGE)


def gpu_check(advisory: object) -> GpuCheck | None:
    """Which GPU check an advisory of the catalog is, by its kind; None if it is none."""
    if isinstance(advisory, node_feature_discovery.GpuNodesLabelled):
        return GpuCheck.NFD_LABELS
    if isinstance(advisory, nvidia_dra_driver.CriticalPodsAdmitted):
        return GpuCheck.CRITICAL_PODS_QUOTA
    if isinstance(advisory, nvidia_dra_driver.GpuNodesPublishSlices):
        return GpuCheck.RESOURCE_SLICES
    if isinstance(advisory, nvidia_dra_driver.NoNodeAdvertises):
        return GpuCheck.DEVICE_PLUGIN
    if isinstance(advisory, nvidia_dra_driver.GpuNodesSchedulable):
        return GpuCheck.NODES_UNAVAILABLE
    if isinstance(advisory, nvidia_dra_driver.PluginOnEveryGpuNode):
        return GpuCheck.KUBELET_PLUGIN
    return None


def gpu_findings(
    results: Iterable[RequirementResult], components: Iterable[Component]
) -> dict[GpuCheck, Finding]:
    """The GPU checks' findings among the plan's requirement results.

    ``components`` are the catalog components the plan evaluated; a result
    is matched to its advisory by component name and title, and the advisory
    to its check by kind, so a reworded title cannot lose a check.
    """
    checks: dict[tuple[str, str], GpuCheck] = {}
    for component in components:
        for advisory in component.advisories:
            check = gpu_check(advisory)
            if check is not None:
                checks[(component.name, advisory.title)] = check
    out: dict[GpuCheck, Finding] = {}
    for r in results:
        check = checks.get((r.component, r.requirement))
        if check is not None and r.severity is Severity.ADVISORY:
            out[check] = (r.status, r.message)
    return out


def gpus_available(
    findings: Mapping[GpuCheck, Finding], summary: TargetSummary | None
) -> GpuAvailability:
    """GPUsAvailable from the GPU checks' findings and what the target offers.

    False when a check warns (the first in ``GpuCheck`` order gives the
    reason; the others are named), or when GPU nodes publish no GPU.
    Unknown when the target was not read, or has no GPU node yet: pools
    that scale from zero are not failing. True with the count otherwise.
    A check with no finding (its component is not in the stack) is not
    judged.
    """
    failing = [
        (check, findings[check][1])
        for check in GpuCheck
        if check in findings and findings[check][0] is RequirementStatus.WARNING
    ]
    if failing:
        (check, message), rest = failing[0], failing[1:]
        if rest:
            message += f" (also: {', '.join(c.value for c, _ in rest)})"
        return _availability(ConditionStatus.FALSE, check, message)
    if summary is None:
        return _availability(
            ConditionStatus.UNKNOWN,
            GpuReason.NOT_OBSERVED,
            "the target's nodes and ResourceSlices were not read",
        )
    if summary.gpu_nodes == 0:
        return _availability(
            ConditionStatus.UNKNOWN,
            GpuReason.NO_GPU_NODES,
            "no node shows a sign of a GPU yet; a GPU pool that scales from zero is counted "
            "when its first node joins",
        )
    if summary.gpus == 0:
        slices = findings.get(GpuCheck.RESOURCE_SLICES)
        if slices is not None and slices[0] is RequirementStatus.UNKNOWN:
            # The slices could not be listed: nothing says there are none.
            return _availability(ConditionStatus.UNKNOWN, GpuReason.NOT_OBSERVED, slices[1])
        many = summary.gpu_nodes > 1
        return _availability(
            ConditionStatus.FALSE,
            GpuReason.NO_GPU_DEVICES,
            f"{summary.gpu_nodes} GPU node{'s' if many else ''} publish{'' if many else 'es'} "
            f"no GPU device of {GPUS.driver}",
        )
    return _availability(ConditionStatus.TRUE, GpuReason.PUBLISHED, offered(summary))


def offered(summary: TargetSummary) -> str:
    """``4 GPUs on 2 nodes: NVIDIA H100 80GB HBM3 \u00d74``, for a person."""
    gpus = f"{summary.gpus} GPU{'' if summary.gpus == 1 else 's'}"
    nodes = f"{summary.gpu_nodes} node{'' if summary.gpu_nodes == 1 else 's'}"
    groups = [f"{g.product} {TIMES}{g.count}" for g in summary.devices[:MAX_LISTED_GROUPS]]
    more = len(summary.devices) - MAX_LISTED_GROUPS
    if more > 0:
        groups.append(f"{more} more")
    if summary.other_devices:
        groups.append(f"{summary.other_devices} others")
    return f"{gpus} on {nodes}: {', '.join(groups)}"


def _availability(
    status: ConditionStatus, reason: GpuCheck | GpuReason, message: str
) -> GpuAvailability:
    return GpuAvailability(
        status=status, reason=reason, message=printable(message, MAX_CONDITION_MESSAGE)
    )
