"""Simulated nodes: a layout of GPU and CPU nodes that kwok keeps Ready.

A GPU node is what one real NVIDIA H200 machine reports (the files of the
workplace's shared fixture ``hardware/nvidia-h200``, read off that machine,
found beside the project or through ``MODELPLANE_HARDWARE_DIR``): the PCI label
node-feature-discovery derives from the GPU's class and vendor, the taint GPU
node pools carry, and the ``resource.k8s.io/v1`` ResourceSlice the NVIDIA DRA
driver's kubelet plugin publishes for it. No value here is made up: each comes
from those files, or from the upstream rule that turns them into labels and
attributes (cited where used).
"""

from __future__ import annotations

import csv
import os
import re
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from modelplane.catalog import components as catalog

# The profile is the shared fixture's, read where it lies and never copied
# into the project: beside the repository, or wherever the variable says.
HARDWARE_ENV = "MODELPLANE_HARDWARE_DIR"
SHARED_HARDWARE_DIR = (
    Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "hardware" / "nvidia-h200"
)


class HardwareMissingError(ValueError):
    """GPU nodes were asked for, and the H200 profile they are built from is not there."""


def hardware_dir() -> Path:
    """Where the H200 profile is; ``HardwareMissingError`` saying where it was looked for."""
    chosen = os.environ.get(HARDWARE_ENV)
    path = Path(chosen) if chosen else SHARED_HARDWARE_DIR
    if not (path / "nvidia-smi-query.csv").is_file():
        raise HardwareMissingError(
            f"GPU nodes take every value from the NVIDIA H200 profile of the shared fixtures "
            f"(hardware/nvidia-h200), not found at {path}: set {HARDWARE_ENV} to that "
            "directory, or ask for CPU nodes only (--nodes cpu=N)"
        )
    return path


# kwok manages the nodes carrying this annotation and no others, so a node a
# test creates for another purpose is never touched.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
SIM_LABEL = "modelplane.ai/simulated-node"

DEFAULT_LAYOUT = "gpu=2,cpu=1"


class NodeLayoutError(ValueError):
    """A ``--nodes`` value that is not a layout."""


class NodeLayout(BaseModel):
    """How many nodes of each kind the simulated cluster has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: int = Field(default=0, ge=0, le=100)
    cpu: int = Field(default=0, ge=0, le=100)

    @classmethod
    def parse(cls, text: str) -> NodeLayout:
        """``gpu=2,cpu=1`` (either part may be left out; at least one node)."""
        counts: dict[str, int] = {}
        for part in (p.strip() for p in text.split(",")):
            kind, sep, value = part.partition("=")
            if not sep or kind not in ("gpu", "cpu") or not value.isdigit():
                raise NodeLayoutError(
                    f"--nodes: {part!r} is not KIND=COUNT with KIND gpu or cpu "
                    f"(e.g. {DEFAULT_LAYOUT})"
                )
            if kind in counts:
                raise NodeLayoutError(f"--nodes: {kind} is given twice in {text!r}")
            counts[kind] = int(value)
            if counts[kind] > 100:
                raise NodeLayoutError(f"--nodes: {kind}={value} is more than 100 nodes")
        layout = cls(**counts)
        if layout.gpu + layout.cpu == 0:
            raise NodeLayoutError(f"--nodes: {text!r} has no nodes")
        return layout

    def __str__(self) -> str:
        return f"gpu={self.gpu},cpu={self.cpu}"

    def names(self) -> list[tuple[str, bool]]:
        """(node name, is a GPU node), GPU nodes first."""
        return [(f"sim-gpu-{i}", True) for i in range(self.gpu)] + [
            (f"sim-cpu-{i}", False) for i in range(self.cpu)
        ]


class GpuHardware(BaseModel):
    """What one GPU reports, as read off the real machine."""

    model_config = ConfigDict(frozen=True)

    product_name: str
    brand: str
    architecture: str
    uuid: str
    pci_address: str  # sysfs form, 0000:00:06.0
    pci_vendor: str  # 10de
    pci_device: str  # 2335
    pci_class: str  # 030200
    memory_mib: int
    driver_version: str  # as the driver prints it, 580.159.04
    cuda_version: str  # 13.0
    compute_capability: str  # 9.0
    addressing_mode: str
    mig_enabled: bool


@cache
def h200() -> GpuHardware:
    """The H200 of the shared fixture ``hardware/nvidia-h200``."""
    source = hardware_dir()
    with (source / "nvidia-smi-query.csv").open(newline="") as fh:
        rows = [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(fh)]
    (gpu,) = rows
    # 0000:00:06.0 class=0x030200 device=0x2335 subsys=0x18bf
    sysfs = (source / "sysfs-pci-10de.txt").read_text().split()
    fields = dict(f.split("=", 1) for f in sysfs[1:])
    # The vendor is the low half of nvidia-smi's pci.device_id (0x233510DE).
    device_id = gpu["pci.device_id"].lower().removeprefix("0x")
    xml = ET.parse(source / "nvidia-smi-q.xml").getroot()  # the shared fixture, trusted
    card = xml.find("gpu")
    if card is None:
        raise ValueError(f"{source / 'nvidia-smi-q.xml'} names no gpu")

    def text(node: ET.Element, path: str) -> str:
        value = node.findtext(path)
        if value is None:
            raise ValueError(f"{source / 'nvidia-smi-q.xml'} has no {path}")
        return value.strip()

    memory = re.fullmatch(r"(\d+) MiB", gpu["memory.total [MiB]"])
    if memory is None:
        raise ValueError(f"unexpected memory.total {gpu['memory.total [MiB]']!r}")
    return GpuHardware(
        product_name=gpu["name"],
        brand=text(card, "product_brand"),
        architecture=text(card, "product_architecture"),
        uuid=gpu["uuid"],
        pci_address=sysfs[0],
        pci_vendor=device_id[4:],
        pci_device=fields["device"].removeprefix("0x"),
        pci_class=fields["class"].removeprefix("0x"),
        memory_mib=int(memory.group(1)),
        driver_version=gpu["driver_version"],
        cuda_version=text(xml, "cuda_version"),
        compute_capability=gpu["compute_cap"],
        addressing_mode=text(card, "addressing_mode"),
        mig_enabled=gpu["mig.mode.current"] != "Disabled",
    )


def nfd_labels(gpu: GpuHardware) -> dict[str, str]:
    """The PCI label NFD's default worker configuration puts on the node.

    Default ``deviceLabelFields: [class, vendor]``, the class cut to its
    first four hex digits: ``pci-0302_10de.present`` for a 3D controller
    (upstream-facts §4, node-feature-discovery v0.19.0
    docs/reference/worker-configuration-reference.md).
    """
    return {f"{catalog.GPUS.nfd_label_prefix}{gpu.pci_class[:4]}_{gpu.pci_vendor}.present": "true"}


def _semver(version: str) -> str:
    # The DRA driver parses its versions with Masterminds/semver and publishes
    # String(): "9.0" -> "9.0.0", "580.159.04" -> "580.159.4" (the API
    # server's version attributes are strict SemVer, without leading zeros).
    parts = [str(int(p)) for p in version.split(".")]
    return ".".join(([*parts, "0", "0"])[:3])


def resource_slice(node: str, gpu: GpuHardware) -> dict[str, Any]:
    """The ResourceSlice the DRA driver's kubelet plugin publishes for one GPU on ``node``.

    One pool per node named after it; the device ``gpu-<minor>`` with the
    attributes and memory capacity of kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/deviceinfo.go (GpuInfo.GetDevice); upstream-facts §5.
    """
    attributes: dict[str, dict[str, str]] = {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu.uuid},
        "productName": {"string": gpu.product_name},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
        "cudaComputeCapability": {"version": _semver(gpu.compute_capability)},
        "driverVersion": {"version": _semver(gpu.driver_version)},
        "cudaDriverVersion": {"version": _semver(gpu.cuda_version)},
        "pcieBusID": {"string": gpu.pci_address},
        "addressingMode": {"string": gpu.addressing_mode},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{catalog.GPU_DEVICE_CLASS}", "labels": {SIM_LABEL: "true"}},
        "spec": {
            "driver": catalog.GPU_DEVICE_CLASS,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": attributes,
                    "capacity": {"memory": {"value": f"{gpu.memory_mib}Mi"}},
                }
            ],
        },
    }


def node(name: str, *, gpu: GpuHardware | None) -> dict[str, Any]:
    """A Node kwok manages; a GPU node carries NFD's label and the GPU taint."""
    labels = {
        SIM_LABEL: "true",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
    }
    spec: dict[str, Any] = {}
    if gpu is not None:
        labels.update(nfd_labels(gpu))
        # GPU node pools are tainted so only pods that ask for GPUs land there
        # (GKE: nvidia.com/gpu=present:NoSchedule); the catalog's GPU rules
        # read the same key.
        spec["taints"] = [
            {"key": catalog.GPU_TAINT_KEY, "value": "present", "effect": "NoSchedule"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
        },
        "spec": spec,
    }
