"""The catalog: one record per component, with the facts and values the spec states."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.shared_fixtures import upstream_dir, yaml_docs

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog import components as c
from modelplane.catalog.components import (
    COMPONENTS,
    CatalogError,
    components_for,
    components_of_stack,
    ordered,
)
from modelplane.catalog.reference import components_table, with_components_table
from modelplane.catalog.types import Component, CRDServes
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

CATALOG_PAGE = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"
UPSTREAM = upstream_dir()
PACKAGE = Path(c.__file__).parent
CHART_COMPONENTS = [comp for comp in COMPONENTS if comp.chart is not None]
PINNED = [comp for comp in COMPONENTS if comp.version_field is not None]


def _spec(**fields: Any) -> ServingStackSpec:
    return ServingStackSpec.model_validate(
        {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}], **fields}
    )


def _component(name: str, **fields: Any) -> Component:
    record: dict[str, Any] = {
        "summary": "",
        "namespace": "",
        "version": "1.0.0",
        "stacks": c.BOTH,
        "order": 0,
    }
    return Component(name=name, **{**record, **fields})


# --- one module per component -----------------------------------------------------


def test_every_module_of_the_package_is_one_component() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("_"))
    for module in modules:
        record = importlib.import_module(f"{c.__name__}.{module}").COMPONENT
        assert c.BY_NAME[record.name] is record
    assert len(c.BY_NAME) == len(COMPONENTS) == len(modules)


def test_the_design_components_are_there() -> None:
    # Spot checks of the design, not a list to extend: the catalog is the list.
    assert {"cert-manager", "envoy-gateway", "gaie-crds", "grove"} <= set(c.BY_NAME)


@pytest.mark.parametrize("comp", CHART_COMPONENTS, ids=lambda comp: comp.name)
def test_a_chart_installs_its_pin_under_its_own_release_name(comp: Component) -> None:
    assert comp.chart is not None
    assert comp.version_for(_spec()) == comp.version
    assert comp.release_name == f"mp-{comp.chart.chart}"
    assert comp.chart.repository.startswith(("https://", "oci://"))


def test_release_names_are_unique_and_short() -> None:
    names = [comp.release_name for comp in CHART_COMPONENTS]
    assert len(names) == len(set(names))
    assert all(len(n) <= 53 for n in names)  # Helm's release name limit


def test_version_fields_override_versions() -> None:
    # A distinct version for every pinned component, at the path its record names.
    wanted = {comp.name: f"9.0.{i}" for i, comp in enumerate(PINNED)}
    fields: dict[str, dict[str, str]] = {}
    for comp in PINNED:
        assert comp.version_field is not None
        group, _, name = comp.version_field.partition(".")
        fields.setdefault(group, {})[name] = wanted[comp.name]
    spec = _spec(**fields)
    for comp in PINNED:
        assert comp.version_for(spec) == wanted[comp.name], comp.name
    # Each group has exactly the catalog's fields: none written by hand besides.
    for group in ("versions", "standard", "dynamo"):
        model = type(getattr(spec, group))
        assert {f.alias for f in model.model_fields.values()} == {
            f.partition(".")[2]
            for f in (comp.version_field for comp in PINNED)
            if f and f.startswith(group + ".")
        }


def test_a_version_field_is_in_its_stacks_group() -> None:
    groups = {c.BOTH: "versions", c.STANDARD: "standard", c.DYNAMO: "dynamo"}
    for comp in PINNED:
        assert comp.version_field is not None
        assert comp.version_field.partition(".")[0] == groups[comp.stacks], comp.name


@pytest.mark.parametrize("comp", COMPONENTS, ids=lambda comp: comp.name)
def test_namespace_is_a_dns_label_or_cluster_scoped(comp: Component) -> None:
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", comp.namespace) or (
        comp.namespace == "" and comp.kind == "manifests"
    )


def test_stacks() -> None:
    for stack in Stack:
        assert components_of_stack(stack) == [comp for comp in COMPONENTS if stack in comp.stacks]
    assert c.BY_NAME["leader-worker-set"].stacks == {Stack.STANDARD}
    for name in ("grove", "kai-scheduler", "modelexpress-crds"):
        assert c.BY_NAME[name].stacks == {Stack.DYNAMO}
    assert c.BY_NAME["cert-manager"].stacks == {Stack.STANDARD, Stack.DYNAMO}


def test_dependencies_come_first_and_exist() -> None:
    seen: set[str] = set()
    for comp in COMPONENTS:
        for dep in comp.depends_on:
            assert dep in c.BY_NAME, dep
            assert dep in seen, f"{comp.name} is listed before its dependency {dep}"
            assert comp.stacks <= c.BY_NAME[dep].stacks
        seen.add(comp.name)


def test_order_breaks_ties_then_the_name_does() -> None:
    a, b, z = _component("a", order=2), _component("b", order=1), _component("z", order=1)
    assert [comp.name for comp in ordered([a, z, b])] == ["b", "z", "a"]


@pytest.mark.parametrize(
    ("components", "error"),
    [
        (
            [_component("a", order=1, depends_on=("b",)), _component("b", order=2)],
            "a (order 1) depends on b, whose order 2 is not lower",
        ),
        ([_component("a", depends_on=("gone",))], "a depends on gone, which is not in"),
        (
            [
                _component("a", order=1, depends_on=("b",)),
                _component("b", stacks=c.DYNAMO),
            ],
            "a is on a stack its dependency b is not on",
        ),
        ([_component("a", depends_on=("a",))], "a (order 0) depends on a, whose order 0"),
        (
            [_component("a", order=1, depends_on=("b",)), _component("b", order=1)],
            "a (order 1) depends on b, whose order 1 is not lower",
        ),
        ([_component("a"), _component("a")], "two components share the name a"),
    ],
)
def test_a_catalog_that_does_not_hold_together_is_refused(
    components: list[Component], error: str
) -> None:
    with pytest.raises(CatalogError, match=re.escape(error)):
        ordered(components)


def test_the_docs_component_table_is_generated_from_the_catalog() -> None:
    page = CATALOG_PAGE.read_text()
    assert with_components_table(page) == page, (
        "docs/catalog.md's component table is stale: run hack/catalog-docs.sh"
    )
    # Every substrate component has its row, with its pin.
    rows = {
        line.split(" | ")[0].removeprefix("| "): line for line in components_table().splitlines()
    }
    for comp in COMPONENTS:
        assert (comp.name in rows) is (comp.role == "substrate"), comp.name
        if comp.name in rows and comp.kind != "objects":
            assert f"| {comp.version} |" in rows[comp.name]


def test_the_docs_table_is_refused_without_its_markers() -> None:
    with pytest.raises(ValueError, match="the page has no"):
        with_components_table("# no table here\n")


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


@pytest.mark.parametrize("name", ["nvidia-dra-driver-gpu", "node-feature-discovery"])
def test_node_agents_are_rolled_by_the_operator_not_the_chart(name: str) -> None:
    # OnDelete: helm changes the template and restarts nothing (plan.node_agents).
    component = c.BY_NAME[name]
    values = component.values(_spec())
    strategy = (values.get("kubeletPlugin") or values["worker"])["updateStrategy"]
    # The null drops the chart's default rollingUpdate, which Helm would merge in.
    assert strategy == {"type": "OnDelete", "rollingUpdate": None}
    assert component.node_agent is not None


def test_dra_driver_values_default_root() -> None:
    values = c.BY_NAME["nvidia-dra-driver-gpu"].values(_spec())
    assert values == {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
        "kubeletPlugin": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}},
    }


def test_dra_driver_values_gke_root() -> None:
    values = c.BY_NAME["nvidia-dra-driver-gpu"].values(_spec(nvidiaDriverRoot=GKE_ROOT))
    assert values == {
        "gpuResourcesEnabledOverride": True,
        "resources": {"computeDomains": {"enabled": False}},
        "kubeletPlugin": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}},
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


def _upstream_crds() -> dict[str, dict[str, Any]]:
    if not UPSTREAM.is_dir():
        pytest.skip(f"the shared upstream fixtures are not at {UPSTREAM}")
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(UPSTREAM.glob("*/*.yaml")):
        for doc in yaml_docs(path):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                out[doc["metadata"]["name"]] = doc["spec"]
    return out


def test_each_required_crd_has_the_kind_and_scope_upstream_gives_it() -> None:
    # The stand-in CRDs of the tests are made from these, so they must be the real ones.
    upstream = _upstream_crds()
    for comp in COMPONENTS:
        for r in comp.requirements:
            if isinstance(r, CRDServes):
                spec = upstream[r.crd]
                assert spec["names"]["kind"] == r.kind, r.crd
                assert (spec["scope"] == "Namespaced") is r.namespaced, r.crd
                assert r.version in [v["name"] for v in spec["versions"] if v.get("served")]
