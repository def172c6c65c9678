"""The simulated cluster's pure parts: node layouts, the H200's values, Envoy Gateway's config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.testenv.nodes import (
    GpuHardware,
    HardwareMissingError,
    NodeLayout,
    NodeLayoutError,
    hardware_dir,
    node,
    resource_slice,
)
from tests.testenv.nodes import h200 as read_h200
from tests.testenv.simcluster import envoy_gateway_config

from modelplane.catalog import components as catalog


def test_layout_parses_kinds_in_any_order_and_defaults_missing_ones_to_zero() -> None:
    assert NodeLayout.parse("gpu=2,cpu=1") == NodeLayout(gpu=2, cpu=1)
    assert NodeLayout.parse("cpu=3") == NodeLayout(gpu=0, cpu=3)
    assert [n for n, _ in NodeLayout.parse("cpu=1,gpu=1").names()] == ["sim-gpu-0", "sim-cpu-0"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu=2,tpu=1", "'tpu=1' is not KIND=COUNT"),
        ("gpu", "'gpu' is not KIND=COUNT"),
        ("gpu=-1", "'gpu=-1' is not KIND=COUNT"),
        ("gpu=1,gpu=2", "gpu is given twice"),
        ("gpu=0,cpu=0", "has no nodes"),
        ("cpu=101", "more than 100 nodes"),
    ],
)
def test_a_bad_layout_names_the_option_and_the_part(text: str, says: str) -> None:
    with pytest.raises(NodeLayoutError) as err:
        NodeLayout.parse(text)
    assert str(err.value).startswith("--nodes: ")
    assert says in str(err.value)


def h200() -> GpuHardware:
    """The shared fixture's H200, or skip saying where it was looked for."""
    try:
        hardware_dir()
    except HardwareMissingError as exc:
        pytest.skip(str(exc))
    return read_h200()


def test_gpu_nodes_without_the_shared_profile_say_where_to_find_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MODELPLANE_HARDWARE_DIR", str(tmp_path))
    with pytest.raises(HardwareMissingError) as err:
        hardware_dir()
    assert str(tmp_path) in str(err.value)
    assert "MODELPLANE_HARDWARE_DIR" in str(err.value)
    assert "--nodes cpu=N" in str(err.value)


def test_h200_values_are_the_fixture_machines() -> None:
    gpu = h200()
    assert (gpu.pci_vendor, gpu.pci_device, gpu.pci_class) == ("10de", "2335", "030200")
    assert (gpu.memory_mib, gpu.driver_version, gpu.compute_capability) == (
        143771,
        "580.159.04",
        "9.0",
    )
    assert (gpu.product_name, gpu.architecture, gpu.cuda_version) == (
        "NVIDIA H200",
        "Hopper",
        "13.0",
    )
    assert not gpu.mig_enabled


def test_only_gpu_nodes_carry_the_nfd_label_and_the_taint() -> None:
    gpu = node("g", gpu=h200())
    cpu = node("c", gpu=None)
    label = "feature.node.kubernetes.io/pci-0302_10de.present"
    assert gpu["metadata"]["labels"][label] == "true"
    assert label not in cpu["metadata"]["labels"]
    assert gpu["spec"]["taints"][0]["key"] == catalog.GPU_TAINT_KEY
    assert "taints" not in cpu["spec"]
    # Versions are published as strict SemVer, as the DRA driver's parse prints them.
    attrs = resource_slice("g", h200())["spec"]["devices"][0]["attributes"]
    assert attrs["driverVersion"] == {"version": "580.159.4"}


def test_envoy_gateway_config_is_the_chart_defaults_with_the_catalogs_values() -> None:
    config = envoy_gateway_config()
    values = catalog.BY_NAME["envoy-gateway"].values(None)  # type: ignore[arg-type]
    assert config["kind"] == "EnvoyGateway"
    assert config["provider"] == {"type": "Kubernetes"}
    assert config["gateway"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"
    for key, value in values["config"]["envoyGateway"].items():
        assert config[key] == value
    # Round-trips through YAML as the ConfigMap carries it.
    assert yaml.safe_load(yaml.safe_dump(config)) == config
    wrong = envoy_gateway_config({"extensionManager": {"failOpen": True}})
    assert wrong["extensionManager"] == {"failOpen": True}
