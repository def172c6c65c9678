"""Fixture charts and manifests that stand in for the real substrate.

Each chart has the real chart's name and the catalog's pinned version, renders
its values into a ConfigMap (so tests read back exactly what the operator
installed) and brings minimal CRDs of the APIs the real component serves, so
the plan's gates open as they would on a real cluster. The CRDs are the
project's own: schemaless, one served version.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.serving import serve_directory
from tests.testenv import find_binaries

from modelplane.catalog import components as catalog
from modelplane.catalog.types import Component

# CRDs each fixture chart brings: (group, version, plural, kind, namespaced).
Crd = tuple[str, str, str, str, bool]
_GW = "gateway.networking.k8s.io"
_EG = "gateway.envoyproxy.io"
CHART_CRDS: dict[str, list[Crd]] = {
    "cert-manager": [
        ("cert-manager.io", "v1", "certificates", "Certificate", True),
        ("cert-manager.io", "v1", "issuers", "Issuer", True),
    ],
    "kube-prometheus-stack": [
        ("monitoring.coreos.com", "v1", "podmonitors", "PodMonitor", True),
        ("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True),
    ],
    "node-feature-discovery": [
        ("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature", True)
    ],
    "gateway-helm": [
        (_GW, "v1", "gatewayclasses", "GatewayClass", False),
        (_GW, "v1", "gateways", "Gateway", True),
        (_GW, "v1", "httproutes", "HTTPRoute", True),
        (_EG, "v1alpha1", "envoyproxies", "EnvoyProxy", True),
        (_EG, "v1alpha1", "backends", "Backend", True),
        (_EG, "v1alpha1", "clienttrafficpolicies", "ClientTrafficPolicy", True),
    ],
    "ai-gateway-crds-helm": [
        ("aigateway.envoyproxy.io", "v1alpha1", "aigatewayroutes", "AIGatewayRoute", True)
    ],
    "trust-manager": [("trust.cert-manager.io", "v1alpha1", "bundles", "Bundle", False)],
    "lws": [("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True)],
    "kai-scheduler": [("scheduling.run.ai", "v2", "queues", "Queue", False)],
    "grove-charts": [("grove.io", "v1alpha1", "podcliquesets", "PodCliqueSet", True)],
}
MANIFEST_CRDS: dict[str, list[Crd]] = {
    "gaie-crds": [("inference.networking.k8s.io", "v1", "inferencepools", "InferencePool", True)],
    "modelexpress-crds": [
        ("modelexpress.nvidia.com", "v1alpha1", "modelmetadatas", "ModelMetadata", True)
    ],
}
# Versions besides the pins, for upgrade tests.
EXTRA_VERSIONS = {"kube-prometheus-stack": ["84.5.0"]}


def crd(group: str, version: str, plural: str, kind: str, namespaced: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if group.endswith(".k8s.io"):
        # The API server protects *.k8s.io groups; upstream CRDs carry this.
        metadata["annotations"] = {"api-approved.kubernetes.io": "unapproved, fixture"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "plural": plural,
                "kind": kind,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
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


_VALUES_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
  namespace: {{ .Release.Namespace }}
data:
  chart: {{ .Chart.Name | quote }}
  version: {{ .Chart.Version | quote }}
  values.json: {{ .Values | toJson | quote }}
"""

_DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": catalog.GPU_DEVICE_CLASS},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


def workload(kind: str, image: str, version: str) -> dict[str, Any]:
    """A Deployment or DaemonSet running ``image``, for a simulated cluster's kwok to run.

    It tolerates the GPU taint (as the real DRA and NFD DaemonSets do) and is
    never pulled: kwok runs pods without a kubelet.
    """
    name = image.rsplit("/", 1)[-1]
    labels = {"app.kubernetes.io/name": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [{"name": name, "image": f"registry.invalid/{image}:{version}"}],
                "tolerations": [{"key": catalog.GPU_TAINT_KEY, "operator": "Exists"}],
            },
        },
    }
    if kind == "Deployment":
        spec["replicas"] = 1
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def write_chart(
    root: Path, name: str, version: str, workloads: Sequence[tuple[str, str]] = ()
) -> Path:
    chart = root / f"{name}-{version}"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": name,
                "version": version,
                "description": f"fixture stand-in for {name}",
            }
        )
    )
    (chart / "values.yaml").write_text("{}\n")
    (chart / "templates" / "values.yaml").write_text(_VALUES_CONFIGMAP)
    docs = [crd(*c) for c in CHART_CRDS.get(name, [])]
    if name == "dra-driver-nvidia-gpu":
        docs.append(_DEVICE_CLASS)
    # (kind, image): only on a simulated cluster, where something runs them.
    docs += [workload(kind, image, version) for kind, image in workloads]
    if docs:
        (chart / "templates" / "apis.yaml").write_text(yaml.safe_dump_all(docs))
    return chart


@dataclass(frozen=True)
class Substrate:
    chart_repository: str
    manifests_base: str
    directory: Path


def component_workloads(component: Component) -> list[tuple[str, str]]:
    """(kind, image) of every workload the component's advisories look for."""
    out: list[tuple[str, str]] = []
    for advisory in component.advisories:
        found = getattr(advisory, "workloads", None)
        if found is not None:
            out += [(kind, image) for kind in found.kinds for image in found.images]
    return list(dict.fromkeys(out))


def serve_substrate(helm: Any, workdir: Path, *, workloads: bool = False) -> Iterator[Substrate]:
    """Package every catalog chart and the manifests, and serve them on loopback.

    With ``workloads``, each chart also runs the Deployments and DaemonSets
    its component's advisories look for, so ``helm install --wait`` waits for
    them on a simulated cluster (they never become ready on a bare API server).
    """
    sources = workdir / "sources"
    served = workdir / "served"
    served.mkdir(parents=True)
    for component in catalog.COMPONENTS:
        if component.chart is not None:
            for version in [component.version, *EXTRA_VERSIONS.get(component.name, [])]:
                chart = write_chart(
                    sources,
                    component.chart.chart,
                    version,
                    component_workloads(component) if workloads else (),
                )
                helm.run("package", str(chart), "--destination", str(served / "charts"))
    with serve_directory(served) as url:
        helm.run("repo", "index", str(served / "charts"), "--url", f"{url}/charts")
        for component in catalog.COMPONENTS:
            if component.manifests is not None:
                path = (
                    served
                    / "manifests"
                    / component.name
                    / component.manifests.path.format(version=component.version)
                )
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(
                    yaml.safe_dump_all([crd(*c) for c in MANIFEST_CRDS[component.name]])
                )
        yield Substrate(f"{url}/charts", f"{url}/manifests", served)


def run_operator(
    hub_kubeconfig: Path, substrate: Substrate, namespace: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    # The interpreter running the tests, not whichever "python" is first on PATH.
    args = [
        sys.executable,
        "-m",
        "modelplane.cli.main",
        "run",
        "--kubeconfig",
        str(hub_kubeconfig),
        "--namespace",
        namespace,
        "--chart-repository",
        substrate.chart_repository,
        "--gaie-manifests-url",
        f"{substrate.manifests_base}/gaie-crds",
        "--manifests-url-for",
        f"modelexpress-crds={substrate.manifests_base}/modelexpress-crds",
        "--resync",
        "30",
        "--helm-timeout",
        "60",
        *extra,
    ]
    # The operator finds helm only through MODELPLANE_HELM or PATH; give it the built one.
    env = {**os.environ, "MODELPLANE_HELM": str(find_binaries()["helm"])}
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
