"""status.target and GPUsAvailable: the rules of plan.capacity, as tables."""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests.shared_fixtures import real_chart, yaml_docs
from tests.testenv.nodes import HardwareMissingError, h200, hardware_dir, resource_slice
from tests.testenv.nodes import node as sim_node

from modelplane.api.crd import servingstack_crd
from modelplane.api.spec import ServingStackSpec
from modelplane.api.status import TargetStatus
from modelplane.api.status_limits import CONSTRAINTS
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.components._common import GPUS
from modelplane.catalog.facts import (
    ClusterFacts,
    Nodes,
    ObservedNode,
    ObservedQuota,
    ObservedTaint,
    ObservedWorkload,
    WorkloadsOfKind,
)
from modelplane.catalog.gpu_nodes import NOT_SELECTED, gpu_node_unavailable, gpu_nodes
from modelplane.catalog.placement import (
    NodeSelection,
    NodeTerm,
    ObservedToleration,
    Placement,
    Requirement,
)
from modelplane.catalog.types import Finding, RequirementStatus
from modelplane.plan.capacity import (
    MAX_DEVICE_GROUPS,
    MAX_DEVICES_PER_SLICE,
    MAX_DRIVER_VERSION,
    MAX_KUBERNETES_VERSION,
    MAX_PRODUCT,
    ConditionStatus,
    DeviceGroup,
    GpuCheck,
    GpuReason,
    TargetSummary,
    gpu_findings,
    gpus_available,
    summarize_target,
)
from modelplane.plan.model import RequirementResult, Severity

DRIVER = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"
NFD = "feature.node.kubernetes.io/pci-0302_10de.present"
MET, WARNING, UNKNOWN = RequirementStatus.MET, RequirementStatus.WARNING, RequirementStatus.UNKNOWN
VERSION = {"major": "1", "minor": "34", "gitVersion": "v1.34.2"}


def node(name: str, *, gpu: bool = True, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "labels": {NFD: "true"} if gpu else {}}}
    obj.update(extra)
    return obj


def device(
    name: str = "gpu-0",
    *,
    product: Any = H100,
    memory: Any = "81559Mi",
    driver_version: Any = "580.159.4",
    kind: Any = "gpu",
) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": kind},
            "uuid": {"string": f"GPU-{name}"},
            "productName": {"string": product},
            "driverVersion": {"version": driver_version},
        },
        "capacity": {"memory": {"value": memory}},
    }


def rslice(
    node_name: str,
    *devices: dict[str, Any],
    driver: Any = DRIVER,
    pool: str | None = None,
    generation: Any = 1,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices) or [device()],
        },
    }


def four_h100() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("a"), node("b"), node("cpu", gpu=False)]
    slices = [
        rslice("a", device("gpu-0"), device("gpu-1")),
        rslice("b", device("gpu-0"), device("gpu-1")),
    ]
    return nodes, slices


# ---- summarize_target ------------------------------------------------------------------


def test_summary_groups_devices_by_product_memory_and_driver() -> None:
    nodes, slices = four_h100()
    summary = summarize_target(VERSION, nodes, slices)
    assert summary == TargetSummary(
        kubernetes_version="v1.34.2",
        gpu_nodes=2,
        gpus=4,
        devices=[
            DeviceGroup(
                product=H100, count=4, memory="81559Mi", driver_version="580.159.4", nodes=2
            )
        ],
    )
    assert summary.model_dump(by_alias=True) == {
        "kubernetesVersion": "v1.34.2",
        "gpuNodes": 2,
        "gpus": 4,
        "devices": [
            {
                "product": H100,
                "count": 4,
                "memory": "81559Mi",
                "driverVersion": "580.159.4",
                "nodes": 2,
            }
        ],
        "otherDevices": 0,
    }


def test_summary_accepts_a_list_answer_and_separates_groups() -> None:
    nodes = [node("a"), node("b")]
    slices = [
        rslice("a", device("gpu-0"), device("gpu-1", driver_version="575.1.0")),
        rslice("b", device("gpu-0", product="NVIDIA L4", memory="23034Mi")),
    ]
    summary = summarize_target(VERSION, {"items": nodes}, {"items": slices})
    # Equal counts sort by product, memory, driver version.
    assert [(g.product, g.memory, g.driver_version, g.count, g.nodes) for g in summary.devices] == [
        (H100, "81559Mi", "575.1.0", 1, 1),
        (H100, "81559Mi", "580.159.4", 1, 1),
        ("NVIDIA L4", "23034Mi", "580.159.4", 1, 1),
    ]
    assert summary.gpus == 3


@pytest.mark.parametrize(
    ("case", "slices", "gpus"),
    [
        ("another driver's slice", [rslice("a", driver="example.com")], 0),
        ("a driver name of another type", [rslice("a", driver=["gpu.nvidia.com"])], 0),
        ("a node that does not exist", [rslice("ghost")], 0),
        ("no pool name", [{"spec": {"driver": DRIVER, "nodeName": "a", "devices": [device()]}}], 0),
        ("a generation that is not a number", [rslice("a", generation="9")], 0),
        ("a generation that is a bool", [rslice("a", generation=True)], 0),
        ("devices not a list", [{"spec": {**rslice("a")["spec"], "devices": {"x": 1}}}], 0),
        ("a MIG device", [rslice("a", device(kind="mig"))], 0),
        ("a device without a type", [rslice("a", {"name": "gpu-0", "attributes": {}})], 0),
        ("a device without a name", [rslice("a", {**device(), "name": ""})], 0),
        ("a device that is not an object", [rslice("a", "gpu-0", device())], 1),  # type: ignore[arg-type]
        ("a slice that is not an object", ["slice", 7, None, rslice("a")], 1),
        ("spec of the wrong type", [{"spec": "x"}, {"spec": None}, rslice("a")], 1),
        ("the same device twice in a pool", [rslice("a"), rslice("a")], 1),
        (
            "an older generation of the pool",
            [
                rslice("a", device("gpu-0"), device("gpu-1"), generation=1),
                rslice("a", generation=2),
            ],
            1,
        ),
        (
            "one pool over two slices",
            [rslice("a", device("gpu-0")), rslice("a", device("gpu-1"))],
            2,
        ),
        (
            "too many devices in one slice",
            [rslice("a", *(device(f"gpu-{i}") for i in range(200)))],
            MAX_DEVICES_PER_SLICE,
        ),
        ("slices not a list", {"items": "x"}, 0),
        ("nothing", None, 0),
    ],
)
def test_which_devices_count(case: str, slices: Any, gpus: int) -> None:
    summary = summarize_target(VERSION, [node("a")], slices)
    assert summary.gpus == gpus, case
    assert sum(g.count for g in summary.devices) + summary.other_devices == gpus


def test_v1beta1_basic_device_is_read() -> None:
    d = device()
    legacy = {"name": "gpu-0", "basic": {"attributes": d["attributes"], "capacity": d["capacity"]}}
    summary = summarize_target(VERSION, [node("a")], [rslice("a", legacy)])
    assert summary.gpus == 1
    assert summary.devices[0].product == H100


def test_qualified_attribute_names_are_read() -> None:
    d = device()
    d["attributes"] = {f"{DRIVER}/{k}": v for k, v in d["attributes"].items()}
    summary = summarize_target(VERSION, [node("a")], [rslice("a", d)])
    assert (summary.gpus, summary.devices[0].product) == (1, H100)


@pytest.mark.parametrize(
    ("field", "value", "product", "memory", "driver_version"),
    [
        ("product", None, "unknown", "81559Mi", "580.159.4"),
        ("product", 42, "unknown", "81559Mi", "580.159.4"),
        ("product", "A\x1b[31mB\u202eC\n", "A\\u001b[31mB\\u202eC ", "81559Mi", "580.159.4"),
        ("product", "P" * 100_000, "P" * (MAX_PRODUCT - 1) + "…", "81559Mi", "580.159.4"),
        ("memory", 85520809984, H100, "", "580.159.4"),
        ("memory", "80 GiB; rm -rf", H100, "", "580.159.4"),
        ("memory", "1" * 100, H100, "", "580.159.4"),
        ("memory", "80Gi", H100, "80Gi", "580.159.4"),
        ("memory", "8.5e10", H100, "8.5e10", "580.159.4"),
        # Digits of other scripts are \d to Python, never to the API server.
        ("memory", "\u0668\u0660Gi", H100, "", "580.159.4"),
        ("memory", "80e\u0661\u0660", H100, "", "580.159.4"),
        ("driver_version", {"x": 1}, H100, "81559Mi", ""),
        ("driver_version", "9" * 1000, H100, "81559Mi", "9" * (MAX_DRIVER_VERSION - 1) + "…"),
    ],
)
def test_device_fields_are_bounded(
    field: str, value: Any, product: str, memory: str, driver_version: str
) -> None:
    summary = summarize_target(VERSION, [node("a")], [rslice("a", device(**{field: value}))])
    (group,) = summary.devices
    assert (group.product, group.memory, group.driver_version) == (product, memory, driver_version)


def test_groups_are_capped_and_the_rest_counted() -> None:
    n = MAX_DEVICE_GROUPS + 4
    slices = [rslice("a", *(device(f"gpu-{i}", product=f"GPU {i:02}") for i in range(n)))]
    summary = summarize_target(VERSION, [node("a")], slices)
    assert len(summary.devices) == MAX_DEVICE_GROUPS
    assert summary.gpus == n
    assert summary.other_devices == 4


@pytest.mark.parametrize(
    ("case", "nodes", "gpu_nodes"),
    [
        ("NFD label", [node("a")], 1),
        ("no sign", [node("a", gpu=False)], 0),
        ("the GPU taint", [node("a", gpu=False, spec={"taints": [{"key": "nvidia.com/gpu"}]})], 1),
        (
            "a device plugin's resource",
            [node("a", gpu=False, status={"allocatable": {"nvidia.com/gpu": "8"}})],
            1,
        ),
        ("taints of the wrong type", [node("a", gpu=False, spec={"taints": "x"})], 0),
        ("a taint that is not an object", [node("a", gpu=False, spec={"taints": [1, None]})], 0),
        ("labels of the wrong type", [{"metadata": {"name": "a", "labels": ["x"]}}], 0),
        (
            "a label value of the wrong type",
            [{"metadata": {"name": "a", "labels": {NFD: True}}}],
            0,
        ),
        ("no name", [{"metadata": {"labels": {NFD: "true"}}}], 0),
        ("a label key of the wrong type", [{"metadata": {"name": "a", "labels": {1: "x"}}}], 0),
        ("the same node twice", [node("a"), node("a")], 1),
        ("a name of the wrong type", [{"metadata": {"name": 5, "labels": {NFD: "true"}}}], 0),
        ("metadata of the wrong type", [{"metadata": "a"}, "node", None], 0),
        ("nodes not a list", "nodes", 0),
    ],
)
def test_gpu_nodes(case: str, nodes: Any, gpu_nodes: int) -> None:
    assert summarize_target(VERSION, nodes, []).gpu_nodes == gpu_nodes, case


def test_a_node_with_slices_but_no_label_is_a_gpu_node() -> None:
    summary = summarize_target(VERSION, [node("a", gpu=False)], [rslice("a")])
    assert (summary.gpu_nodes, summary.gpus) == (1, 1)


@pytest.mark.parametrize(
    ("info", "version"),
    [
        (VERSION, "v1.34.2"),
        ({"gitVersion": "v1.34.2-gke.1234000"}, "v1.34.2-gke.1234000"),
        ({"major": "1", "minor": "35+"}, "v1.35+"),
        ({"gitVersion": 134, "major": "1", "minor": "34"}, "v1.34"),
        ({"major": 1, "minor": 34}, ""),
        ({"gitVersion": "v1\x1b]0;x\x07"}, "v1\\u001b]0;x\\u0007"),
        ({"gitVersion": "v" * 500}, "v" * (MAX_KUBERNETES_VERSION - 1) + "…"),
        ("v1.34.2", ""),
        (None, ""),
    ],
)
def test_kubernetes_version(info: Any, version: str) -> None:
    assert summarize_target(info, [], []).kubernetes_version == version


# ---- gpus_available --------------------------------------------------------------------

FOUR = TargetSummary(
    kubernetes_version="v1.34.2",
    gpu_nodes=2,
    gpus=4,
    devices=[DeviceGroup(product=H100, count=4, memory="81559Mi", nodes=2)],
)
NO_NODES = TargetSummary(kubernetes_version="v1.34.2")
NODES_NO_DEVICES = TargetSummary(gpu_nodes=2)
ALL_MET: dict[GpuCheck, Finding] = {check: (MET, "fine") for check in GpuCheck}


def warn(check: GpuCheck, message: str = "broken") -> dict[GpuCheck, Finding]:
    return {**ALL_MET, check: (WARNING, message)}


@pytest.mark.parametrize(
    ("case", "findings", "summary", "status", "reason", "message"),
    [
        (
            "GPUs published",
            ALL_MET,
            FOUR,
            ConditionStatus.TRUE,
            GpuReason.PUBLISHED,
            "4 GPUs on 2 nodes: NVIDIA H100 80GB HBM3 \u00d74",
        ),
        ("no findings at all", {}, FOUR, ConditionStatus.TRUE, GpuReason.PUBLISHED, None),
        (
            "no GPU node yet",
            {**ALL_MET, GpuCheck.NFD_LABELS: (UNKNOWN, "no node shows a sign of a GPU")},
            NO_NODES,
            ConditionStatus.UNKNOWN,
            GpuReason.NO_GPU_NODES,
            None,
        ),
        ("not read", {}, None, ConditionStatus.UNKNOWN, GpuReason.NOT_OBSERVED, None),
        (
            "GPU nodes, no device",
            ALL_MET,
            NODES_NO_DEVICES,
            ConditionStatus.FALSE,
            GpuReason.NO_GPU_DEVICES,
            "2 GPU nodes publish no GPU device of gpu.nvidia.com",
        ),
        (
            "slices not listable",
            {GpuCheck.RESOURCE_SLICES: (UNKNOWN, "cannot observe resourceslices: not served")},
            NODES_NO_DEVICES,
            ConditionStatus.UNKNOWN,
            GpuReason.NOT_OBSERVED,
            "cannot observe resourceslices: not served",
        ),
        *[
            (
                f"{check} warns",
                warn(check, f"{check} says"),
                FOUR,
                ConditionStatus.FALSE,
                check.value,
                f"{check} says",
            )
            for check in GpuCheck
        ],
        (
            "a warning wins over no GPU node",
            warn(GpuCheck.CRITICAL_PODS_QUOTA),
            NO_NODES,
            ConditionStatus.FALSE,
            "CriticalPodsNotAdmitted",
            "broken",
        ),
        (
            "a warning wins over not read",
            warn(GpuCheck.DEVICE_PLUGIN),
            None,
            ConditionStatus.FALSE,
            "DevicePluginAdvertises",
            "broken",
        ),
        (
            "the root cause first, the others named",
            {
                **ALL_MET,
                GpuCheck.RESOURCE_SLICES: (WARNING, "no slices"),
                GpuCheck.NFD_LABELS: (WARNING, "no labels"),
                GpuCheck.DEVICE_PLUGIN: (WARNING, "plugin"),
            },
            FOUR,
            ConditionStatus.FALSE,
            "NFDLabelsMissing",
            "no labels (also: ResourceSlicesMissing, DevicePluginAdvertises)",
        ),
        (
            "an unknown check is not a failure",
            {GpuCheck.CRITICAL_PODS_QUOTA: (UNKNOWN, "namespace not known")},
            FOUR,
            ConditionStatus.TRUE,
            GpuReason.PUBLISHED,
            None,
        ),
    ],
)
def test_gpus_available(
    case: str,
    findings: dict[GpuCheck, Finding],
    summary: TargetSummary | None,
    status: ConditionStatus,
    reason: str,
    message: str | None,
) -> None:
    got = gpus_available(findings, summary)
    assert (got.status, got.reason) == (status, reason), case
    if message is not None:
        assert got.message == message


def test_reasons_are_condition_reasons() -> None:
    # metav1.Condition's reason pattern, as the CRD holds it.
    pattern = CONSTRAINTS["conditions[].reason"]["pattern"]
    for reason in [*(c.value for c in GpuCheck), *(r.value for r in GpuReason)]:
        assert re.fullmatch(pattern, reason), reason


def test_message_names_groups_and_is_bounded() -> None:
    devices = [DeviceGroup(product=f"G{i}", count=1, nodes=1) for i in range(8)]
    summary = TargetSummary(gpu_nodes=1, gpus=9, devices=devices, other_devices=1)
    got = gpus_available({}, summary)
    shown = ", ".join(f"G{i} \u00d71" for i in range(5))
    assert got.message == f"9 GPUs on 1 node: {shown}, 3 more, 1 others"
    hostile = gpus_available(warn(GpuCheck.NFD_LABELS, "\x1b[2J" + "x" * 100_000), FOUR)
    assert hostile.message.startswith("\\u001b[2J")
    assert len(hostile.message) <= 4096


def test_one_gpu_one_node() -> None:
    summary = summarize_target(VERSION, [node("a")], [rslice("a")])
    assert gpus_available({}, summary).message == "1 GPU on 1 node: NVIDIA H100 80GB HBM3 \u00d71"


# ---- the advisories' own judgements ----------------------------------------------------


def _results(facts: ClusterFacts) -> list[RequirementResult]:
    spec = ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}]}
    )
    out = []
    for component in COMPONENTS:
        for advisory in component.advisories:
            status, message = advisory.evaluate(component, spec, facts)
            out.append(
                RequirementResult(
                    component=component.name,
                    requirement=advisory.title,
                    status=status,
                    message=message,
                    severity=Severity.ADVISORY,
                )
            )
    return out


GPU_NODE = ObservedNode(name="a", labels={NFD: "true"}, taints=["nvidia.com/gpu"])
BARE_GPU_NODE = ObservedNode(name="a", taints=["nvidia.com/gpu"])
PLUGIN = ObservedWorkload(
    kind="DaemonSet",
    namespace="nvidia-dra-driver",
    name="kubelet-plugin",
    images=["registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"],
    available=True,
    scheduled=1,
    available_on=1,
)
MAINTENANCE = ObservedTaint(key="maintenance", value="true", effect="NoExecute")
TOLERATES_GPU = [ObservedToleration(key="nvidia.com/gpu", operator="Exists")]
IN_MAINTENANCE = GPU_NODE.model_copy(
    update={
        "blocking_taints": [
            ObservedTaint(key="nvidia.com/gpu", effect="NoSchedule"),
            MAINTENANCE,
        ]
    }
)
# A selection GPU_NODE (NFD's pci-0302_10de label) does not meet.
ONLY_PCI_10DE = NodeSelection(
    terms=[
        NodeTerm(
            labels=[
                Requirement(
                    key="feature.node.kubernetes.io/pci-10de.present",
                    operator="In",
                    values=["true"],
                )
            ]
        )
    ]
)
GKE_QUOTA = ObservedQuota(
    namespace="kube-system",
    name="gcp-critical-pods",
    priority_classes=["system-node-critical", "system-cluster-critical"],
)


@pytest.mark.parametrize(
    ("case", "facts", "status", "reason"),
    [
        (
            "all well",
            ClusterFacts(
                nodes=[GPU_NODE], resource_slices={DRIVER: ["a"]}, workloads=[PLUGIN], quotas=[]
            ),
            ConditionStatus.TRUE,
            GpuReason.PUBLISHED,
        ),
        (
            "NFD labels missing",
            ClusterFacts(
                nodes=[BARE_GPU_NODE], resource_slices={DRIVER: []}, workloads=[], quotas=[]
            ),
            ConditionStatus.FALSE,
            "NFDLabelsMissing",
        ),
        (
            "no slices",
            ClusterFacts(
                nodes=[GPU_NODE], resource_slices={DRIVER: []}, workloads=[PLUGIN], quotas=[]
            ),
            ConditionStatus.FALSE,
            "ResourceSlicesMissing",
        ),
        (
            "a device plugin",
            ClusterFacts(
                nodes=[GPU_NODE.model_copy(update={"allocatable": {"nvidia.com/gpu": "8"}})],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "DevicePluginAdvertises",
        ),
        (
            "the kubelet plugin scheduled on no GPU node",
            ClusterFacts(
                nodes=[GPU_NODE],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN.model_copy(update={"scheduled": 0, "available_on": 0})],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "KubeletPluginNotRunning",
        ),
        (
            "the kubelet plugin not available where scheduled",
            ClusterFacts(
                nodes=[GPU_NODE],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN.model_copy(update={"available_on": 0, "available": False})],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "KubeletPluginNotRunning",
        ),
        (
            "quota not admitting the driver's pods",
            ClusterFacts(
                nodes=[GPU_NODE],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN],
                quotas=[GKE_QUOTA],
            ),
            ConditionStatus.FALSE,
            "CriticalPodsNotAdmitted",
        ),
        (
            "every GPU node tainted for maintenance, the plugin evicted",
            ClusterFacts(
                nodes=[IN_MAINTENANCE],
                resource_slices={DRIVER: ["a"]},
                workloads=[
                    PLUGIN.model_copy(
                        update={"scheduled": 0, "available_on": 0, "tolerations": TOLERATES_GPU}
                    )
                ],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "GPUNodesUnavailable",
        ),
        (
            "a GPU node the kubelet plugin's node affinity leaves out",
            ClusterFacts(
                nodes=[GPU_NODE],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN.model_copy(update={"selection": ONLY_PCI_10DE})],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "GPUNodesUnavailable",
        ),
        (
            "a cordoned GPU node",
            ClusterFacts(
                nodes=[GPU_NODE.model_copy(update={"unschedulable": True})],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN],
                quotas=[],
            ),
            ConditionStatus.FALSE,
            "GPUNodesUnavailable",
        ),
        (
            "the GPU taint, which the plugin tolerates",
            ClusterFacts(
                nodes=[
                    GPU_NODE.model_copy(
                        update={
                            "blocking_taints": [
                                ObservedTaint(key="nvidia.com/gpu", effect="NoSchedule")
                            ]
                        }
                    )
                ],
                resource_slices={DRIVER: ["a"]},
                workloads=[PLUGIN.model_copy(update={"tolerations": TOLERATES_GPU})],
                quotas=[],
            ),
            ConditionStatus.TRUE,
            GpuReason.PUBLISHED,
        ),
    ],
)
def test_follows_the_catalog_advisories(
    case: str, facts: ClusterFacts, status: ConditionStatus, reason: str
) -> None:
    findings = gpu_findings(_results(facts), COMPONENTS)
    assert set(GpuCheck) <= set(findings)
    gpus = 4 if status is ConditionStatus.TRUE else 0
    summary = TargetSummary(gpu_nodes=1, gpus=gpus)
    got = gpus_available(findings, summary)
    assert (got.status, got.reason) == (status, reason), (case, got.message)


def test_the_maintenance_message_names_the_nodes_and_the_taint() -> None:
    facts = ClusterFacts(
        nodes=[IN_MAINTENANCE, IN_MAINTENANCE.model_copy(update={"name": "b"})],
        resource_slices={DRIVER: ["a", "b"]},
        workloads=[PLUGIN.model_copy(update={"scheduled": 0, "tolerations": TOLERATES_GPU})],
        quotas=[],
    )
    got = gpus_available(gpu_findings(_results(facts), COMPONENTS), TargetSummary(gpu_nodes=2))
    assert got.message.startswith(
        "GPU nodes a, b: taint maintenance=true:NoExecute: their GPUs are not available"
    ), got.message
    assert "(also: KubeletPluginNotRunning)" in got.message, got.message


def test_gpus_on_nodes_the_plugin_cannot_run_on_are_not_counted() -> None:
    nodes, slices = four_h100()
    nodes[0]["spec"] = {"taints": [{"key": "maintenance", "value": "true", "effect": "NoExecute"}]}
    nodes[1]["spec"] = {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    plugins = [Placement(tolerations=TOLERATES_GPU)]
    summary = summarize_target(VERSION, nodes, slices, plugin_placements=plugins)
    assert (summary.gpu_nodes, summary.gpus) == (2, 2), summary
    nodes[1]["spec"]["unschedulable"] = True
    summary = summarize_target(VERSION, nodes, slices, plugin_placements=plugins)
    assert (summary.gpu_nodes, summary.gpus) == (2, 0), summary
    # Without the plugin observed, the taints are not judged; a cordon still is.
    summary = summarize_target(VERSION, nodes, slices)
    assert summary.gpus == 2, summary


def _real_kubelet_plugin() -> ObservedWorkload:
    """The DRA driver's kubelet plugin DaemonSet of the real render, as the facts reduce it."""
    docs = yaml_docs(real_chart("dra-driver-nvidia-gpu", "0.4.1") / "rendered-standard.yaml")
    [obj] = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DaemonSet"]
    [plugin] = WorkloadsOfKind("DaemonSet").reduce([obj])["workloads"]
    assert isinstance(plugin, ObservedWorkload)
    return plugin


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
MAINTENANCE_TAINT = {"key": "maintenance", "value": "true", "effect": "NoExecute"}
GKE_H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def _observed_node(labels: dict[str, str], spec: dict[str, Any], name: str = "n") -> ObservedNode:
    obj = {"metadata": {"name": name, "labels": labels}, "spec": spec}
    [found] = Nodes().reduce([obj])["nodes"]
    assert isinstance(found, ObservedNode)
    return found


@pytest.mark.parametrize(
    ("case", "labels", "spec", "why"),
    [
        ("NFD's label, the GPU taint", {NFD: "true"}, {"taints": [GPU_TAINT]}, None),
        (
            "NFD's vendor-only label",
            {"feature.node.kubernetes.io/pci-10de.present": "true"},
            {},
            None,
        ),
        ("GPU feature discovery's label", {"nvidia.com/gpu.present": "true"}, {}, None),
        ("GKE's accelerator label only", GKE_H100, {"taints": [GPU_TAINT]}, NOT_SELECTED),
        (
            "NFD labels of vendor and device",
            {"feature.node.kubernetes.io/pci-10de_2335.present": "true"},
            {},
            NOT_SELECTED,
        ),
        ("the GPU taint only", {}, {"taints": [GPU_TAINT]}, NOT_SELECTED),
        (
            "selected, in maintenance",
            {NFD: "true"},
            {"taints": [GPU_TAINT, MAINTENANCE_TAINT]},
            "taint maintenance=true:NoExecute",
        ),
        (
            "cordoned and left out",
            GKE_H100,
            {"unschedulable": True},
            f"cordoned and {NOT_SELECTED}",
        ),
    ],
)
def test_a_gpu_node_the_real_kubelet_plugin_cannot_run_on_is_unavailable(
    case: str, labels: dict[str, str], spec: dict[str, Any], why: str | None
) -> None:
    plugin = _real_kubelet_plugin()
    node = _observed_node(labels, spec)
    assert gpu_nodes(GPUS, [node], {}) == [node], case
    assert gpu_node_unavailable(node, [plugin.placement]) == why, case
    # Another DaemonSet of the plugin that selects every node is enough.
    everywhere = Placement(tolerations=[ObservedToleration(operator="Exists")])
    assert gpu_node_unavailable(node, [plugin.placement, everywhere]) == (
        "cordoned" if spec.get("unschedulable") else None
    ), case


def test_the_gpus_of_a_node_the_plugin_leaves_out_are_neither_counted_nor_available() -> None:
    plugin = _real_kubelet_plugin().model_copy(update={"scheduled": 1, "available_on": 1})
    nodes, slices = four_h100()
    nodes[1]["metadata"]["labels"] = GKE_H100
    summary = summarize_target(VERSION, nodes, slices, plugin_placements=[plugin.placement])
    assert (summary.gpu_nodes, summary.gpus) == (2, 2), summary
    facts = ClusterFacts(
        nodes=[_observed_node({NFD: "true"}, {}, "nfd"), _observed_node(GKE_H100, {}, "gke")],
        resource_slices={DRIVER: ["nfd"]},
        workloads=[plugin],
        quotas=[],
    )
    [result] = [
        r
        for r in _results(facts)
        if r.requirement == "GPU nodes are schedulable and admit the kubelet plugin"
    ]
    assert result.status is WARNING
    assert result.message.startswith(f"GPU node gke: {NOT_SELECTED}: "), result.message


def test_required_results_are_not_gpu_findings() -> None:
    results = _results(ClusterFacts(nodes=[BARE_GPU_NODE], resource_slices={}))
    required = [r.model_copy(update={"severity": Severity.REQUIRED}) for r in results]
    assert gpu_findings(required, COMPONENTS) == {}


def test_the_simulated_clusters_objects() -> None:
    # The objects the integration tests' GPU cluster holds (tests/testenv/nodes.py),
    # so the lead's wiring reads the same shape these rules do.
    try:
        hardware_dir()
    except HardwareMissingError as exc:
        pytest.skip(str(exc))
    gpu = h200()
    nodes = [sim_node("g0", gpu=gpu), sim_node("g1", gpu=gpu), sim_node("c0", gpu=None)]
    slices = [resource_slice("g0", gpu), resource_slice("g1", gpu)]
    summary = summarize_target({"gitVersion": "v1.34.2"}, nodes, slices)
    assert summary.devices == [
        DeviceGroup(
            product="NVIDIA H200", count=2, memory="143771Mi", driver_version="580.159.4", nodes=2
        )
    ]
    got = gpus_available({}, summary)
    assert (got.status, got.message) == (
        ConditionStatus.TRUE,
        "2 GPUs on 2 nodes: NVIDIA H200 \u00d72",
    )


def test_the_summary_is_what_status_target_takes() -> None:
    # The plan's model and the CRD's (api.status.TargetStatus) agree on the wire.
    summary = summarize_target(VERSION, [node("a"), node("b")], [rslice("a"), rslice("b")])
    wire = summary.model_dump(by_alias=True)
    assert TargetStatus.model_validate(wire).model_dump(by_alias=True) == wire
    schema = servingstack_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    target = schema["properties"]["status"]["properties"]["target"]
    assert set(target["properties"]) == set(wire)
    item = target["properties"]["devices"]["items"]["properties"]
    assert set(item) == set(wire["devices"][0])
    assert item["product"]["maxLength"] == MAX_PRODUCT
