"""Fixture charts and manifests that stand in for the real substrate.

Each chart has the real chart's name and the catalog's pinned version, renders
its values into a ConfigMap (so tests read back exactly what the operator
installed) and brings minimal CRDs of the APIs the real component serves, so
the plan's gates open as they would on a real cluster. The CRDs are the
project's own (schemaless, one served version), made from the kind and scope
the catalog's requirements give, so a new component brings its own.
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
from tests.testenv import find_binaries, helm_environ

from modelplane.catalog import components as catalog
from modelplane.catalog.types import Component, CRDServes, ObjectExists

# CRDs each fixture chart brings: (group, version, plural, kind, namespaced).
Crd = tuple[str, str, str, str, bool]

# APIs the product's own configuration uses that no requirement checks: the
# chart that serves them brings them too, or the configuration stays held back.
EXTRA_CRDS: dict[str, list[Crd]] = {
    "cert-manager": [("cert-manager.io", "v1", "issuers", "Issuer", True)],
}


def required_crds(component: Component) -> list[Crd]:
    """The stand-in CRDs of what the component's requirements check, and its extras."""
    out = [
        (r.api.group, r.version, r.api.resource, r.kind, r.namespaced)
        for r in component.requirements
        if isinstance(r, CRDServes)
    ]
    return out + EXTRA_CRDS.get(component.name, [])


def _stand_in_spec(kind: str, name: str) -> dict[str, Any]:
    # A DeviceClass is named after its driver and selects that driver's
    # devices only, as the DRA driver's own does.
    if kind == "DeviceClass":
        return {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]}
    return {}


def required_objects(component: Component) -> list[dict[str, Any]]:
    """Stand-ins for the objects the component's requirements check (the DeviceClass)."""
    return [
        {
            "apiVersion": r.api.group_version,
            "kind": r.kind,
            "metadata": {"name": r.name},
            "spec": _stand_in_spec(r.kind, r.name),
        }
        for r in component.requirements
        if isinstance(r, ObjectExists)
    ]


# From the catalog, so that every chart's fixture serves what its component is
# checked by, and a Managed install reaches Ready (keyed by chart, as helm is).
CHART_CRDS: dict[str, list[Crd]] = {
    c.chart.chart: required_crds(c) for c in catalog.COMPONENTS if c.chart is not None
}
MANIFEST_CRDS: dict[str, list[Crd]] = {
    c.name: required_crds(c) for c in catalog.COMPONENTS if c.manifests is not None
}
_CHART_OBJECTS: dict[str, list[dict[str, Any]]] = {
    c.chart.chart: required_objects(c) for c in catalog.COMPONENTS if c.chart is not None
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
    # A chart the catalog does not know has no entry: an error, not a chart
    # that quietly serves nothing and leaves its stack short of Ready.
    docs = [crd(*c) for c in CHART_CRDS[name]] + _CHART_OBJECTS[name]
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


@dataclass(frozen=True)
class Helm:
    """Runs the built helm with a private home; ``kubeconfig`` args are added by callers."""

    binary: Path
    home: Path

    @property
    def environ(self) -> dict[str, str]:
        return helm_environ(self.home)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc


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
