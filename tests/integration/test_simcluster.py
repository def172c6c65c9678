"""The simulated GPU cluster: nodes kwok keeps Ready, workloads that run, the CLI contract."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Namespace, Node
from tests.integration.conftest import ChartRepo, Helm
from tests.integration.hubs import client_for
from tests.integration.simcluster import require_gpu_hardware
from tests.testenv import TestEnv
from tests.testenv.simcluster import PROCESSES, SimCluster
from tests.waiting import wait_for

GPU_NODES = ["sim-gpu-0", "sim-gpu-1"]
CPU_NODES = ["sim-cpu-0"]
# NFD's default PCI label for class 0x030200 (3D controller), vendor 10de: the
# H200 of the shared hardware fixture (its README and sysfs-pci-10de.txt).
H200_NFD_LABEL = "feature.node.kubernetes.io/pci-0302_10de.present"


def _ready(node: Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _slices(env: TestEnv) -> list[dict[str, Any]]:
    with env.http_client() as http:
        resp = http.get("/apis/resource.k8s.io/v1/resourceslices")
        resp.raise_for_status()
        return list(resp.json()["items"])


def test_gpu_nodes_are_ready_h200s_with_nfd_labels_and_resource_slices(
    sim_nodes_target: TestEnv,
) -> None:
    client = client_for(sim_nodes_target)
    nodes = {n.metadata.name: n for n in client.list(Node) if n.metadata and n.metadata.name}
    assert sorted(nodes) == sorted(GPU_NODES + CPU_NODES)
    wait_for(
        "every node Ready (kwok)",
        lambda: all(_ready(client.get(Node, name)) for name in nodes),
        deadline=120,
    )
    nodes = {name: client.get(Node, name) for name in nodes}
    for name in GPU_NODES:
        labels = nodes[name].metadata.labels or {}  # type: ignore[union-attr]
        assert labels[H200_NFD_LABEL] == "true"
        taints = nodes[name].spec.taints or []  # type: ignore[union-attr]
        assert [(t.key, t.effect) for t in taints] == [("nvidia.com/gpu", "NoSchedule")]
    assert H200_NFD_LABEL not in (nodes["sim-cpu-0"].metadata.labels or {})  # type: ignore[union-attr]

    slices = {s["spec"]["nodeName"]: s for s in _slices(sim_nodes_target)}
    assert sorted(slices) == GPU_NODES
    for name, item in slices.items():
        spec = item["spec"]
        assert spec["driver"] == "gpu.nvidia.com"
        assert spec["pool"] == {"name": name, "generation": 1, "resourceSliceCount": 1}
        (device,) = spec["devices"]
        attrs = device["attributes"]
        # Every value as nvidia-smi reported it on the real H200 (fixture files).
        assert attrs["type"] == {"string": "gpu"}
        assert attrs["productName"] == {"string": "NVIDIA H200"}
        assert attrs["brand"] == {"string": "NVIDIA"}
        assert attrs["architecture"] == {"string": "Hopper"}
        assert attrs["driverVersion"] == {"version": "580.159.4"}
        assert attrs["cudaDriverVersion"] == {"version": "13.0.0"}
        assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
        assert attrs["pcieBusID"] == {"string": "0000:00:06.0"}
        assert device["capacity"] == {"memory": {"value": "143771Mi"}}


def _workloads(client: Client, ns: str) -> None:
    client.create(Namespace.from_dict({"metadata": {"name": ns}}))
    labels = {"app": "probe"}
    pod: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]},
    }
    client.create(
        Deployment.from_dict(
            {
                "metadata": {"name": "probe", "namespace": ns},
                "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": pod},
            }
        )
    )
    for name, tolerate in (("everywhere", True), ("cpu-only", False)):
        template = json.loads(json.dumps(pod))
        if tolerate:
            template["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        client.create(
            DaemonSet.from_dict(
                {
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"selector": {"matchLabels": labels}, "template": template},
                }
            )
        )


def test_deployments_and_daemonsets_become_available(sim_nodes_target: TestEnv) -> None:
    client = client_for(sim_nodes_target)
    ns = "sim-workloads"
    _workloads(client, ns)

    def available() -> bool:
        status = client.get(Deployment, "probe", namespace=ns).status
        conditions = (status.conditions if status else None) or []
        return any(c.type == "Available" and c.status == "True" for c in conditions) and (
            status is not None and status.readyReplicas == 2
        )

    wait_for("the Deployment Available with 2 ready replicas", available, deadline=120)

    def ready(name: str) -> int:
        status = client.get(DaemonSet, name, namespace=ns).status
        return 0 if status is None else status.numberReady

    # The GPU taint keeps a DaemonSet without the toleration off GPU nodes.
    wait_for("a pod on each of 3 nodes", lambda: ready("everywhere") == 3, deadline=120)
    wait_for("a pod on the CPU node", lambda: ready("cpu-only") == 1, deadline=120)
    assert client.get(DaemonSet, "cpu-only", namespace=ns).status.desiredNumberScheduled == 1  # type: ignore[union-attr]


def test_helm_install_wait_returns_once_the_fixture_chart_runs(
    sim_nodes_target: TestEnv, helm: Helm, chart_repo: ChartRepo
) -> None:
    kube = ["--kubeconfig", str(sim_nodes_target.kubeconfig_path)]
    helm.run(
        "install", "waited", "mp-demo",
        "--repo", chart_repo.url,
        "--version", chart_repo.charts["mp-demo"],
        "--namespace", "sim-helm",
        "--create-namespace",
        "--set", "model.replicas=2",
        "--wait", "--timeout", "180s",
        *kube,
    )  # fmt: skip
    # --wait returned, so the Deployment is ready now, not eventually.
    deploy = client_for(sim_nodes_target).get(Deployment, "waited-mp-demo", namespace="sim-helm")
    assert deploy.status is not None and deploy.status.readyReplicas == 2
    helm.run("uninstall", "waited", "--namespace", "sim-helm", "--wait", *kube)


def _testenv(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.testenv", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"testenv {' '.join(args)}: {proc.returncode}\n{proc.stderr}")
    return proc


def test_a_bad_node_layout_is_refused_naming_the_option(tmp_path: Path) -> None:
    proc = _testenv("start", str(tmp_path / "env"), "--nodes", "gpu=2,tpu=1", check=False)
    assert proc.returncode == 2
    assert "--nodes: 'tpu=1' is not KIND=COUNT" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "env").exists()


def _write_crds(root: Path) -> None:
    nested = root / "a" / "b"
    nested.mkdir(parents=True)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.sim.example.com"},
        "spec": {
            "group": "sim.example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "sim.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'sim.example.com'"}}]},
    }
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-applied"}}
    (nested / "crds.yaml").write_text(yaml.safe_dump_all([crd, other, device_class]))
    (root / "README.md").write_text("not YAML: skipped\n")


def test_cli_start_applies_crds_runs_nodes_and_stop_stops_only_its_own(tmp_path: Path) -> None:
    require_gpu_hardware()  # it asks for a GPU node
    directory = tmp_path / "env"
    crds = tmp_path / "crds"
    _write_crds(crds)
    # A process whose command line names the directory but that start did not
    # start: stop must leave it running.
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", f"{directory}/bystander"]
    )
    try:
        proc = _testenv("start", str(directory), "--nodes", "gpu=1,cpu=1", "--crds", str(crds))
        assert proc.stdout.strip() == f"export KUBECONFIG={directory / 'kubeconfig'}"
        env = TestEnv(directory)
        cluster = SimCluster(env)
        started = {**cluster.pids(), **env.pids()}
        assert set(started) == {
            "kube-apiserver",
            "etcd",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        with env.http_client() as http:
            # start returned, so the CRD is Established now.
            crd = http.get(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.sim.example.com"
            ).json()
            conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
            assert conditions["Established"] == "True"
            assert http.get("/apis/resource.k8s.io/v1/deviceclasses/sim.example.com").is_success
            assert http.get("/api/v1/namespaces/default/configmaps/not-applied").status_code == 404
            nodes = http.get("/api/v1/nodes").json()["items"]
            assert sorted(n["metadata"]["name"] for n in nodes) == ["sim-cpu-0", "sim-gpu-0"]

        stopped = _testenv("stop", str(directory))
        assert stopped.returncode == 0
        for name, pid in started.items():
            assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"{name} still runs"
        assert bystander.poll() is None, "stop ended a process it did not start"
        assert set(PROCESSES) >= {"kwok", "kube-scheduler", "kube-controller-manager"}
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(10)
        _testenv("stop", str(directory), check=False)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def test_testenv_passes_no_credentials_on_command_lines(sim_nodes_target: TestEnv) -> None:
    token = sim_nodes_target.token
    for pid in SimCluster(sim_nodes_target).pids().values():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert token not in cmdline
        assert "BEGIN" not in cmdline
    assert os.stat(sim_nodes_target.kubeconfig_path).st_mode & 0o077 == 0


def _check(env: TestEnv) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "modelplane.cli.main", "check",
         "--kubeconfig", str(env.kubeconfig_path), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return list(json.loads(proc.stdout)["results"])


DEVICE_PLUGIN_ADVISORY = "no node advertises nvidia.com/gpu through a device plugin"


def _allocatable(env: TestEnv, node: str, gpus: str | None) -> None:
    patch = {
        "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}
    }
    with env.http_client() as http:
        resp = http.patch(
            f"/api/v1/nodes/{node}/status",
            content=json.dumps(patch).encode(),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        resp.raise_for_status()


def test_a_device_plugin_beside_dra_is_one_more_daemonset(sim_nodes_target: TestEnv) -> None:
    client = client_for(sim_nodes_target)
    (before,) = [r for r in _check(sim_nodes_target) if r["requirement"] == DEVICE_PLUGIN_ADVISORY]
    assert before["status"] == "met"
    labels = {"name": "nvidia-device-plugin-ds"}
    plugin = DaemonSet.from_dict(
        {
            "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {H200_NFD_LABEL: "true"},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                        "containers": [
                            {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
                        ],
                    },
                },
            },
        }
    )
    client.create(plugin)
    try:
        wait_for(
            "the device plugin on both GPU nodes",
            lambda: (
                (s := client.get(DaemonSet, plugin.metadata.name, namespace="kube-system").status)  # type: ignore[union-attr]
                is not None
                and s.numberReady == 2
            ),
            deadline=120,
        )
        # The kubelet's part, which kwok does not play: a registered device
        # plugin's resource appears in the node's capacity and allocatable.
        for node in GPU_NODES:
            _allocatable(sim_nodes_target, node, "1")
        (after,) = [
            r for r in _check(sim_nodes_target) if r["requirement"] == DEVICE_PLUGIN_ADVISORY
        ]
        assert after["status"] == "warning"
        assert all(node in after["message"] for node in GPU_NODES)
    finally:
        for node in GPU_NODES:
            _allocatable(sim_nodes_target, node, None)
        client.delete(DaemonSet, "nvidia-device-plugin-daemonset", namespace="kube-system")
