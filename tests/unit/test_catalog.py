"""The catalog: one record per component, with the facts and values the spec states."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from modelplane.api.models import ServingStackSpec
from modelplane.catalog import components as c
from modelplane.catalog.components import COMPONENTS, components_for, components_of_stack
from modelplane.pins import Stack

from .conftest import REQUIREMENTS_DOC

GKE_ROOT = "/home/kubernetes/bin/nvidia"

# The Envoy Gateway values block of the requirements document, kept here so the
# assertion runs on every clone; test_envoy_gateway_values_match_the_spec_file
# holds this copy against the document itself wherever it is present.
ENVOY_GATEWAY_VALUES_YAML = """\
config:
  envoyGateway:
    extensionApis:
      enableBackend: true
    extensionManager:
      hooks:
        xdsTranslator:
          translation:
            listener:
              includeAll: true
            route:
              includeAll: true
            cluster:
              includeAll: true
            secret:
              includeAll: true
          post:
          - Translation
          - Cluster
          - Route
      service:
        fqdn:
          hostname: ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local
          port: 1063
      backendResources:
      - group: inference.networking.k8s.io
        kind: InferencePool
        version: v1
"""

# Chart, version and namespace per component as the requirements document and
# upstream-facts.md state them.
CHARTS = {
    "cert-manager": ("cert-manager", "v1.20.2", "https://charts.jetstack.io"),
    "kube-prometheus-stack": (
        "kube-prometheus-stack",
        "84.4.0",
        "https://prometheus-community.github.io/helm-charts",
    ),
    "node-feature-discovery": (
        "node-feature-discovery",
        "0.19.0",
        "https://kubernetes-sigs.github.io/node-feature-discovery/charts",
    ),
    "nvidia-dra-driver-gpu": (
        "dra-driver-nvidia-gpu",
        "0.4.1",
        "oci://registry.k8s.io/dra-driver-nvidia/charts",
    ),
    "envoy-gateway": ("gateway-helm", "v1.8.4", "oci://docker.io/envoyproxy"),
    "ai-gateway-crds": ("ai-gateway-crds-helm", "v1.1.0", "oci://docker.io/envoyproxy"),
    "ai-gateway": ("ai-gateway-helm", "v1.1.0", "oci://docker.io/envoyproxy"),
    "trust-manager": ("trust-manager", "v0.25.0", "https://charts.jetstack.io"),
    "leader-worker-set": ("lws", "v0.8.0", "oci://registry.k8s.io/lws/charts"),
    "grove": ("grove-charts", "v0.1.0-alpha.12-rc2", "oci://ghcr.io/ai-dynamo/grove"),
    "kai-scheduler": (
        "kai-scheduler",
        "v0.16.8",
        "oci://ghcr.io/kai-scheduler/kai-scheduler",
    ),
}


def _spec(**fields: Any) -> ServingStackSpec:
    return ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}], **fields}
    )


def test_every_component_of_the_design_is_in_the_catalog() -> None:
    names = {comp.name for comp in COMPONENTS}
    assert names >= {
        "cert-manager",
        "kube-prometheus-stack",
        "node-feature-discovery",
        "nvidia-dra-driver-gpu",
        "envoy-gateway",
        "ai-gateway-crds",
        "ai-gateway",
        "gaie-crds",
        "trust-manager",
        "dra-driver-critical-pods-quota",
        "leader-worker-set",
        "grove",
        "kai-scheduler",
    }
    assert len(names) == len(COMPONENTS)


@pytest.mark.parametrize(("name", "expected"), sorted(CHARTS.items()))
def test_charts_versions_and_release_names(name: str, expected: tuple[str, str, str]) -> None:
    comp = c.BY_NAME[name]
    chart, version, _repository = expected
    assert comp.chart is not None
    assert (comp.chart.chart, comp.version, comp.chart.repository) == expected
    assert comp.version_for(_spec()) == version
    assert comp.release_name == f"mp-{chart}"


def test_release_names_are_unique_and_short() -> None:
    names = [comp.release_name for comp in COMPONENTS if comp.chart is not None]
    assert len(names) == len(set(names))
    assert all(len(n) <= 53 for n in names)  # Helm's release name limit


def test_version_fields_override_versions() -> None:
    spec = _spec(
        versions={
            "certManager": "v9.0.1",
            "envoyGateway": "v9.0.2",
            "nodeFeatureDiscovery": "9.0.3",
            "nvidiaDraDriver": "9.0.4",
            "prometheus": "9.0.5",
            "trustManager": "v9.0.6",
        },
        standard={"leaderWorkerSet": "v9.0.7"},
        dynamo={"grove": "v9.0.8", "kaiScheduler": "v9.0.9", "modelExpress": "9.1.0"},
    )
    expected = {
        "cert-manager": "v9.0.1",
        "envoy-gateway": "v9.0.2",
        "node-feature-discovery": "9.0.3",
        "nvidia-dra-driver-gpu": "9.0.4",
        "kube-prometheus-stack": "9.0.5",
        "trust-manager": "v9.0.6",
        "leader-worker-set": "v9.0.7",
        "grove": "v9.0.8",
        "kai-scheduler": "v9.0.9",
        "modelexpress-crds": "9.1.0",
    }
    for name, version in expected.items():
        assert c.BY_NAME[name].version_for(spec) == version, name


@pytest.mark.parametrize(
    ("name", "namespace"),
    [
        ("cert-manager", "cert-manager"),
        ("kube-prometheus-stack", "monitoring"),
        ("node-feature-discovery", "node-feature-discovery"),
        ("nvidia-dra-driver-gpu", "nvidia-dra-driver"),
        ("dra-driver-critical-pods-quota", "nvidia-dra-driver"),
        ("envoy-gateway", "envoy-gateway-system"),
        ("ai-gateway-crds", "envoy-ai-gateway-system"),
        ("ai-gateway", "envoy-ai-gateway-system"),
        ("trust-manager", "modelplane-system"),
        ("leader-worker-set", "lws-system"),
        ("grove", "grove-system"),
        ("kai-scheduler", "kai-scheduler"),
    ],
)
def test_namespaces(name: str, namespace: str) -> None:
    assert c.BY_NAME[name].namespace == namespace


def test_stacks() -> None:
    standard = {comp.name for comp in components_of_stack(Stack.STANDARD)}
    dynamo = {comp.name for comp in components_of_stack(Stack.DYNAMO)}
    assert "leader-worker-set" in standard and "leader-worker-set" not in dynamo
    for name in ("grove", "kai-scheduler", "modelexpress-crds"):
        assert name in dynamo and name not in standard
    common = {
        "cert-manager",
        "kube-prometheus-stack",
        "node-feature-discovery",
        "nvidia-dra-driver-gpu",
        "dra-driver-critical-pods-quota",
        "envoy-gateway",
        "ai-gateway-crds",
        "ai-gateway",
        "gaie-crds",
        "trust-manager",
    }
    assert standard == common | {"leader-worker-set"}
    assert dynamo == common | {"grove", "kai-scheduler", "modelexpress-crds"}


def test_dependencies_come_first_and_exist() -> None:
    seen: set[str] = set()
    for comp in COMPONENTS:
        for dep in comp.depends_on:
            assert dep in c.BY_NAME, dep
            assert dep in seen, f"{comp.name} is listed before its dependency {dep}"
            assert comp.stacks <= c.BY_NAME[dep].stacks
        seen.add(comp.name)


def test_envoy_gateway_values_are_the_spec_block_exactly() -> None:
    values = c.BY_NAME["envoy-gateway"].values(_spec())
    assert values == yaml.safe_load(ENVOY_GATEWAY_VALUES_YAML)
    # Whatever else the spec says, the values stay the same.
    assert c.BY_NAME["envoy-gateway"].values(
        _spec(stack="Dynamo", nvidiaDriverRoot=GKE_ROOT, gateway={"hostname": "a.example"})
    ) == yaml.safe_load(ENVOY_GATEWAY_VALUES_YAML)


def _spec_values_block() -> str:
    lines = REQUIREMENTS_DOC.read_text().splitlines()
    start = lines.index("yaml") + 1
    end = lines.index("", start)
    return "\n".join(lines[start:end]) + "\n"


def test_envoy_gateway_values_match_the_spec_file() -> None:
    if not REQUIREMENTS_DOC.exists():
        pytest.skip(f"the requirements document is not at {REQUIREMENTS_DOC} (no ../shared/spec)")
    block = _spec_values_block()
    assert yaml.safe_load(block) == yaml.safe_load(ENVOY_GATEWAY_VALUES_YAML)
    assert c.BY_NAME["envoy-gateway"].values(_spec()) == yaml.safe_load(block)


def test_kube_prometheus_stack_values() -> None:
    values = c.BY_NAME["kube-prometheus-stack"].values(_spec())
    prometheus = values["prometheus"]["prometheusSpec"]
    assert prometheus["podMonitorSelectorNilUsesHelmValues"] is False
    assert prometheus["podMonitorNamespaceSelector"] == {}
    assert values["grafana"] == {"enabled": False}
    assert values["alertmanager"] == {"enabled": False}
    [job] = prometheus["additionalScrapeConfigs"]
    assert job["job_name"] == "envoy-gateway-proxy"
    assert job["metrics_path"] == "/stats/prometheus"
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"]}
    # Envoy proxy pods: component=proxy, managed by Envoy Gateway; stats on 19001.
    assert (
        keep[
            (
                "__meta_kubernetes_pod_label_app_kubernetes_io_component",
                "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by",
            )
        ]
        == "proxy;envoy-gateway"
    )
    assert keep[("__meta_kubernetes_pod_container_port_number",)] == "19001"


def test_nfd_worker_tolerates_the_gpu_taint() -> None:
    values = c.BY_NAME["node-feature-discovery"].values(_spec())
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values[
        "worker"
    ]["tolerations"]


def test_dra_driver_values_default_root() -> None:
    values = c.BY_NAME["nvidia-dra-driver-gpu"].values(_spec())
    assert values == {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
    }


def test_dra_driver_values_gke_root() -> None:
    values = c.BY_NAME["nvidia-dra-driver-gpu"].values(_spec(nvidiaDriverRoot=GKE_ROOT))
    assert values == {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
        "nvidiaDriverRoot": GKE_ROOT,
    }


@pytest.mark.parametrize(
    ("root", "quota"),
    [("/", False), (GKE_ROOT, True), ("/run/nvidia/driver", True)],
)
def test_critical_pods_quota_only_for_a_non_default_root(root: str, quota: bool) -> None:
    for stack in ("Standard", "Dynamo"):
        names = {comp.name for comp in components_for(_spec(stack=stack, nvidiaDriverRoot=root))}
        assert ("dra-driver-critical-pods-quota" in names) is quota


def test_critical_pods_quota_object() -> None:
    comp = c.BY_NAME["dra-driver-critical-pods-quota"]
    assert comp.objects is not None
    objects = comp.objects(_spec(nvidiaDriverRoot=GKE_ROOT))
    [quota] = [o for o in objects if o["kind"] == "ResourceQuota"]
    assert quota["metadata"]["namespace"] == c.BY_NAME["nvidia-dra-driver-gpu"].namespace
    [expression] = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expression == {
        "operator": "In",
        "scopeName": "PriorityClass",
        "values": ["system-node-critical", "system-cluster-critical"],
    }
    assert quota["spec"]["hard"]["pods"]
    # The DRA driver is installed only once the quota is in place.
    assert comp.name in c.BY_NAME["nvidia-dra-driver-gpu"].depends_on


def test_trust_manager_watches_modelplane_system() -> None:
    values = c.BY_NAME["trust-manager"].values(_spec())
    assert values["app"]["trust"]["namespace"] == "modelplane-system"
    assert c.MODELPLANE_NAMESPACE == "modelplane-system"


def test_ai_gateway_controller_is_reachable_where_envoy_gateway_dials() -> None:
    ai = c.BY_NAME["ai-gateway"]
    values = ai.values(_spec())
    name = values["controller"]["fullnameOverride"]
    address = f"{name}.{ai.namespace}.svc.cluster.local"
    assert address == "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local"
    eg = c.BY_NAME["envoy-gateway"].values(_spec())["config"]["envoyGateway"]
    assert eg["extensionManager"]["service"]["fqdn"] == {"hostname": address, "port": 1063}
    # The chart binds InferencePool read access to Envoy Gateway's namespace.
    assert values["envoyGateway"]["namespace"] == c.BY_NAME["envoy-gateway"].namespace
    assert set(ai.depends_on) == {"ai-gateway-crds", "envoy-gateway"}


def test_cert_manager_installs_its_crds() -> None:
    assert c.BY_NAME["cert-manager"].values(_spec())["crds"]["enabled"] is True


def test_gaie_crds_come_from_the_pinned_release_and_can_be_mirrored() -> None:
    gaie = c.BY_NAME["gaie-crds"]
    assert gaie.manifests is not None and gaie.chart is None
    url = gaie.manifests.url(gaie.version)
    assert re.fullmatch(
        r"https://github\.com/kubernetes-sigs/gateway-api-inference-extension/releases/"
        r"download/v\d+\.\d+\.\d+/manifests\.yaml",
        url,
    )
    assert url.endswith(f"/{gaie.version}/manifests.yaml")
    mirrored = gaie.manifests.url(gaie.version, "https://mirror.internal/gaie/")
    assert mirrored == f"https://mirror.internal/gaie/{gaie.version}/manifests.yaml"
    [req] = gaie.requirements
    assert req.title == "CRD inferencepools.inference.networking.k8s.io serving v1"


def test_modelexpress_crds_are_configuration() -> None:
    mx = c.BY_NAME["modelexpress-crds"]
    assert mx.role == "config"
    assert mx.manifests is not None
    assert "0.4.1" in mx.manifests.url(mx.version_for(_spec()))


def test_only_substrate_is_skipped_in_provided_mode() -> None:
    roles = {comp.name: comp.role for comp in COMPONENTS}
    assert [n for n, r in roles.items() if r == "config"] == ["modelexpress-crds"]
