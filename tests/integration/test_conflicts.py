"""A Managed stack onto a simulated GPU cluster that already runs what it would clash with.

One cluster, one test: the cert-manager stand-in chart installed first
under another release name in cert-manager's namespace, an existing CRD of
kube-prometheus-stack's that no release of the product wrote, and a device
plugin's DaemonSet with a GPU node advertising ``nvidia.com/gpu``.
``modelplane diff`` lists each and exits 1; the operator installs the other
components and holds those three back with the reason on the hub (Ready
``ConflictsFound``). Then the spec adopts cert-manager (diff lists what it
takes over first) and the other clashes go: the stack converges,
cert-manager's objects taken over with helm's --take-ownership. Last, the
spec names a GatewayClass another controller holds: the gateway
configuration is held back, naming it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Event, Node
from lightkube.types import PatchType
from tests.integration.hubs import Harness, stack_body
from tests.integration.substrate import Substrate
from tests.testenv import TestEnv, find_binaries
from tests.waiting import gone, wait_for

from modelplane.catalog import components as catalog
from modelplane.catalog.configuration import GATEWAY_CLASSES

CERT_MANAGER = catalog.BY_NAME["cert-manager"]
PROMETHEUS = "kube-prometheus-stack"
DRA = "nvidia-dra-driver-gpu"
# In cert-manager's own namespace: the same objects as the product's release
# would write, which spec.adopt can take over.
OTHER_RELEASE, OTHER_NAMESPACE = "other-cm", CERT_MANAGER.namespace
# A CRD of the Prometheus Operator's group that someone else applied first.
FOREIGN_CRD = "podmonitors.monitoring.coreos.com"
PLUGIN = "nvidia-device-plugin-daemonset"
# A GatewayClass of another gateway, which the spec names in the middle of the test.
OTHER_CLASS = "other-gateway"
GATEWAY_CLASS = create_global_resource(
    GATEWAY_CLASSES.group, GATEWAY_CLASSES.version, "GatewayClass", GATEWAY_CLASSES.resource
)
RUN_TIMEOUT = 300
DEADLINE = 600


def _foreign_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": FOREIGN_CRD},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": "podmonitors", "singular": "podmonitor", "kind": "PodMonitor"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _device_plugin() -> dict[str, Any]:
    labels = {"name": PLUGIN}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PLUGIN, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # On no node: only its presence matters here.
                    "nodeSelector": {"example.com/none": "none"},
                    "containers": [
                        {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
                    ],
                },
            },
        },
    }


def _gpu_node(target: Client) -> str:
    """The first node carrying the GPU taint, as the simulated cluster makes them."""
    return min(
        n.metadata.name
        for n in target.list(Node)
        if n.metadata and n.metadata.name and "gpu" in n.metadata.name
    )


def _advertise(target: Client, gpus: str) -> None:
    target.patch(
        Node.Status,
        _gpu_node(target),
        {"status": {"allocatable": {"nvidia.com/gpu": gpus}, "capacity": {"nvidia.com/gpu": gpus}}},
        patch_type=PatchType.MERGE,
    )


@pytest.fixture
def clashing(
    hub: Client,
    hub_env: TestEnv,
    sim_nodes_target: TestEnv,
    workload_substrate: Substrate,
    tmp_path: Path,
) -> Iterator[Harness]:
    h = Harness(hub, hub_env, sim_nodes_target, workload_substrate, tmp_path, "conflicts")
    try:
        yield h
        # The session's simulated cluster is the other modules' too: the
        # stack's releases, the adopted release's storage and the foreign
        # GatewayClass go.
        h.tear_down()
        h.substrate_helm(
            "uninstall", OTHER_RELEASE, "--namespace", OTHER_NAMESPACE, "--ignore-not-found"
        )
        # Gone already if the teardown took the Gateway API's CRDs with it.
        with contextlib.suppress(ApiError, httpx2.HTTPStatusError):
            h.target.delete(GATEWAY_CLASS, OTHER_CLASS)
    finally:
        h.stop()


def _diff(h: Harness, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    stack = h.tmp / "stack.yaml"
    stack.write_text(yaml.safe_dump(stack_body(h.ns, "stack", spec)))
    return subprocess.run(
        [
            sys.executable, "-m", "modelplane.cli.main", "diff",
            "-f", str(stack),
            "--kubeconfig", str(h.target_env.kubeconfig_path),
            "--chart-repository", h.substrate.chart_repository,
            "--gaie-manifests-url", f"{h.substrate.manifests_base}/gaie-crds",
            "--manifests-url-for",
            f"modelexpress-crds={h.substrate.manifests_base}/modelexpress-crds",
        ],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
        env={**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])},
    )  # fmt: skip


def _events(h: Harness, reason: str) -> list[str]:
    return [e.message or "" for e in h.hub.list(Event, namespace=h.ns) if e.reason == reason]


def test_conflicts_hold_their_components_back_and_converge_once_removed(
    clashing: Harness,
) -> None:
    h = clashing
    h.substrate_helm(
        "install", OTHER_RELEASE, CERT_MANAGER.chart.chart,  # type: ignore[union-attr]
        "--repo", h.substrate.chart_repository, "--version", CERT_MANAGER.version,
        "--namespace", OTHER_NAMESPACE, "--create-namespace",
    )  # fmt: skip
    h.target.create(CustomResourceDefinition.from_dict(_foreign_crd()))
    h.target.create(DaemonSet.from_dict(_device_plugin()))
    _advertise(h.target, "8")

    # diff names each clash and its owner before anything changes, and exits 1.
    proc = _diff(h, {})
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert f"conflict: cert-manager: Deployment {OTHER_NAMESPACE}/" in out, out
    assert f"Helm release {OTHER_NAMESPACE}/{OTHER_RELEASE}" in out, out
    assert f"conflict: {PROMETHEUS}: CustomResourceDefinition {FOREIGN_CRD}" in out, out
    assert f"conflict: {DRA}: DaemonSet kube-system/{PLUGIN}" in out, out
    assert f"conflict: {DRA}: Node {_gpu_node(h.target)}" in out, out
    assert "mp-cert-manager" not in h.helm_releases()

    # The operator installs the others and holds the three back, saying why.
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    h.create({})
    h.start()
    wait_for(
        "a ConflictsFound event for each held-back component",
        lambda: all(
            any(f"release mp-{chart}" in m for m in _events(h, "ConflictsFound"))
            for chart in ("cert-manager", PROMETHEUS, "dra-driver-nvidia-gpu")
        ),
        deadline=DEADLINE,
    )
    messages = " ".join(_events(h, "ConflictsFound"))
    assert f"Helm release {OTHER_NAMESPACE}/{OTHER_RELEASE}" in messages
    assert FOREIGN_CRD in messages and PLUGIN in messages
    wait_for(
        "the components without a clash installed",
        lambda: "mp-node-feature-discovery" in h.helm_releases() and "mp-lws" in h.helm_releases(),
        deadline=DEADLINE,
    )
    releases = h.helm_releases()
    assert "mp-cert-manager" not in releases and f"mp-{PROMETHEUS}" not in releases
    # Every failure a conflict: Ready says so, and Stalled, as no retry clears it.
    ready = h.wait_condition("Ready", "False", "ConflictsFound", deadline=DEADLINE)
    assert "would clash" in ready["message"], ready
    assert h.condition("Stalled").get("status") == "True"

    # The spec adopts cert-manager, and the other clashes go. diff lists what
    # adopting takes over, and from whom, before anything else.
    adopt = {"adopt": ["cert-manager"]}
    h.target.delete(CustomResourceDefinition, FOREIGN_CRD)
    h.target.delete(DaemonSet, PLUGIN, namespace="kube-system")
    _advertise(h.target, "0")
    wait_for(
        "the foreign CRD gone",
        lambda: gone(h.target, CustomResourceDefinition, FOREIGN_CRD),
        deadline=DEADLINE,
    )
    proc = _diff(h, adopt)
    assert proc.returncode == 1, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("adopts: cert-manager: "), proc.stdout
    owner = f"from Helm release {OTHER_NAMESPACE}/{OTHER_RELEASE}"
    assert f"adopts: cert-manager: Deployment {OTHER_NAMESPACE}/cert-manager-webhook {owner}" in (
        proc.stdout
    )
    assert "conflict:" not in proc.stdout, proc.stdout

    # The same stack converges. The operator is restarted so that the test
    # does not wait out the held-back components' backoff (up to 5 minutes,
    # plan.decisions).
    h.stop()
    h.create(adopt)
    h.start()
    h.wait_condition("Ready", "True", deadline=DEADLINE)
    assert {"mp-cert-manager", f"mp-{PROMETHEUS}"} <= set(h.helm_releases())
    # Taken over with helm's --take-ownership: the objects are the product's release's.
    webhook = h.target.get(Deployment, "cert-manager-webhook", namespace=OTHER_NAMESPACE)
    notes = (webhook.metadata and webhook.metadata.annotations) or {}
    assert notes.get("meta.helm.sh/release-name") == "mp-cert-manager", notes
    # Said once, naming each object and its former owner.
    (adopted,) = _events(h, "Adopted")
    assert "release mp-cert-manager took over" in adopted and owner in adopted, adopted
    assert f"{OTHER_NAMESPACE}/cert-manager-webhook" in adopted, adopted

    # A GatewayClass of the spec's name that another controller holds holds
    # the gateway configuration back, naming it and its owner.
    h.target.create(
        GATEWAY_CLASS.from_dict(
            {
                "apiVersion": GATEWAY_CLASSES.group_version,
                "kind": "GatewayClass",
                "metadata": {"name": OTHER_CLASS},
                "spec": {"controllerName": "example.com/other-gateway"},
            }
        )
    )
    h.create({**adopt, "gateway": {"className": OTHER_CLASS}})
    ready = h.wait_condition("Ready", "False", "ConflictsFound", deadline=DEADLINE)
    assert f"GatewayClass {OTHER_CLASS}" in ready["message"], ready
    (held,) = [m for m in _events(h, "ConflictsFound") if f"GatewayClass {OTHER_CLASS}" in m]
    assert "its controller is example.com/other-gateway" in held, held
