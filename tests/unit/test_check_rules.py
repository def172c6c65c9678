"""The check rules, evaluated purely: facts written by hand, no API server."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from modelplane.catalog import components as catalog
from modelplane.catalog.advisories import (
    contains,
    flag_value,
    image_repository,
    image_tag,
    is_image,
)
from modelplane.catalog.gpu_nodes import is_nfd_vendor_label
from modelplane.checks.checker import check_results, provided_stack, summarize
from modelplane.pins import Stack
from modelplane.plan import plan
from modelplane.plan.model import RequirementResult, RequirementStatus
from modelplane.plan.observed import (
    ClusterFacts,
    Observed,
    ObservedConfigMap,
    ObservedNode,
    ObservedObject,
    ObservedQuota,
    ObservedService,
    ObservedWorkload,
)

MET, UNMET = RequirementStatus.MET, RequirementStatus.UNMET
WARNING, UNKNOWN = RequirementStatus.WARNING, RequirementStatus.UNKNOWN
PROMETHEUSES = "monitoring.coreos.com/v1/prometheuses"


def every_api(stack: Stack) -> Observed:
    """Everything the stack's checked requirements ask for, served."""
    apis: dict[str, dict[str, list[str]]] = {}
    objects: dict[str, list[str]] = {}
    for component in catalog.components_of_stack(stack):
        for r in component.requirements:
            apis.setdefault(r.api.group, {}).setdefault(r.api.resource, []).append(r.api.version)
            if hasattr(r, "name"):
                key = r.api.key
                objects.setdefault(key, []).append(r.name)
    return Observed(apis=apis, objects=objects)


def with_facts(stack: Stack = Stack.STANDARD, **facts: Any) -> list[RequirementResult]:
    observed = every_api(stack).model_copy(update={"cluster": ClusterFacts(**facts)})
    return check_results(stack, observed)


def result(results: list[RequirementResult], component: str, starts: str) -> RequirementResult:
    (found,) = [r for r in results if r.component == component and r.requirement.startswith(starts)]
    return found


def deploy(
    name: str, image: str, *, ns: str = "x", args: list[str] | None = None, ok: bool = True
) -> ObservedWorkload:
    return ObservedWorkload(
        kind="Deployment", namespace=ns, name=name, images=[image], args=args or [], available=ok
    )


# ---- helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "repo", "tag"),
    [
        ("quay.io/jetstack/trust-manager:v0.25.0", "quay.io/jetstack/trust-manager", "v0.25.0"),
        ("localhost:5000/grove/grove-operator:v1", "localhost:5000/grove/grove-operator", "v1"),
        ("localhost:5000/grove/grove-operator", "localhost:5000/grove/grove-operator", None),
        ("ghcr.io/x/y@sha256:abc", "ghcr.io/x/y", None),
        ("ghcr.io/x/y:v1@sha256:abc", "ghcr.io/x/y", "v1"),
    ],
)
def test_image_parts(image: str, repo: str, tag: str | None) -> None:
    assert image_repository(image) == repo
    assert image_tag(image) == tag


def test_image_match_needs_a_path_boundary() -> None:
    assert is_image("docker.io/envoyproxy/gateway:v1.8.4", "envoyproxy/gateway")
    assert is_image("mirror.local/envoyproxy/gateway:v1.8.4", "envoyproxy/gateway")
    assert not is_image("docker.io/envoyproxy/gateway-dev:v1", "envoyproxy/gateway")
    assert not is_image("docker.io/notenvoyproxy/gateway:v1", "envoyproxy/gateway")


def test_flag_value_reads_both_spellings_and_the_last_wins() -> None:
    assert flag_value(["--a=1", "--trust-namespace", "x"], "--trust-namespace") == "x"
    assert flag_value(["--trust-namespace=a", "--trust-namespace=b"], "--trust-namespace") == "b"
    assert flag_value(["--trust-namespaces=a"], "--trust-namespace") is None


def test_contains_reports_each_difference_by_path() -> None:
    expected = {"a": {"b": 1, "c": [{"k": "v"}], "d": ["x", "y"]}}
    assert contains(expected, {"a": {"b": 1, "c": [{"k": "v", "extra": 1}], "d": ["y", "x"]}}) == []
    assert contains(expected, {"a": {"b": 2, "d": ["x"]}}) == [
        "a.b is 2, not 1",
        "a.c is missing",
        'a.d lacks "y"',
    ]


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("feature.node.kubernetes.io/pci-10de.present", True),
        ("feature.node.kubernetes.io/pci-0302_10de.present", True),
        ("feature.node.kubernetes.io/pci-0300_10de.present", True),
        ("feature.node.kubernetes.io/pci-0300_1002.present", False),  # AMD
        ("feature.node.kubernetes.io/pci-10de.sriov.capable", False),
        ("nvidia.com/gpu.present", False),
    ],
)
def test_nfd_vendor_labels(key: str, ok: bool) -> None:
    assert is_nfd_vendor_label(catalog.GPUS, key, "true") is ok


# ---- checked requirements -------------------------------------------------------------


def test_every_api_served_meets_every_checked_requirement() -> None:
    for stack in Stack:
        results = check_results(stack, every_api(stack))
        assert results and all(r.status is MET for r in results)


def test_a_missing_sibling_crd_is_unmet_although_its_group_version_is_served() -> None:
    observed = every_api(Stack.STANDARD)
    apis = {g: dict(r) for g, r in observed.apis.items()}
    del apis["gateway.networking.k8s.io"]["gateways"]
    results = check_results(Stack.STANDARD, observed.model_copy(update={"apis": apis}))
    unmet = [r for r in results if r.status is UNMET]
    assert [r.requirement for r in unmet] == ["CRD gateways.gateway.networking.k8s.io serving v1"]
    assert "is not served" in unmet[0].message


def test_another_version_names_both() -> None:
    observed = every_api(Stack.STANDARD)
    apis = {g: dict(r) for g, r in observed.apis.items()}
    apis["gateway.networking.k8s.io"]["gateways"] = ["v1beta1"]
    results = check_results(Stack.STANDARD, observed.model_copy(update={"apis": apis}))
    (unmet,) = [r for r in results if r.status is UNMET]
    assert unmet.message.startswith(
        "CRD gateways.gateway.networking.k8s.io serves v1beta1, not v1: install the Gateway API"
    )


def test_stacks_check_their_own_components_and_not_the_products_config() -> None:
    standard = {r.component for r in check_results(Stack.STANDARD, Observed())}
    dynamo = {r.component for r in check_results(Stack.DYNAMO, Observed())}
    assert "leader-worker-set" in standard and "leader-worker-set" not in dynamo
    assert {"grove", "kai-scheduler"} <= dynamo and not {"grove", "kai-scheduler"} & standard
    assert "modelexpress-crds" not in dynamo


# ---- advisories -----------------------------------------------------------------------


def test_no_cluster_facts_no_advisories() -> None:
    p = plan(provided_stack(Stack.STANDARD), every_api(Stack.STANDARD))
    assert all(r.severity == "required" for r in p.requirements)


def test_unobserved_facts_are_unknown_and_say_why() -> None:
    results = with_facts(unobservable={"workloads": "403 deployments is forbidden"})
    r = result(results, "trust-manager", "trust-manager runs with")
    assert r.status is UNKNOWN
    assert r.message == "cannot observe workloads: 403 deployments is forbidden"


def test_advisories_never_unmet_and_never_decide_requirements_met() -> None:
    facts = ClusterFacts(
        nodes=[
            ObservedNode(name="n", taints=["nvidia.com/gpu"], allocatable={"nvidia.com/gpu": "8"})
        ],
        resource_slices={},
        workloads=[],
        config_maps=[],
        services=[],
        quotas=[],
    )
    p = plan(
        provided_stack(Stack.DYNAMO),
        every_api(Stack.DYNAMO).model_copy(update={"cluster": facts}),
    )
    advisory = [r for r in p.requirements if r.severity == "advisory"]
    assert advisory and all(r.status is not UNMET for r in advisory)
    assert any(r.status is WARNING for r in advisory)
    assert p.requirements_met
    assert all(c.state == "Met" for c in p.components if c.mode == "Provided")
    assert summarize(p.requirements).requirements_met


def test_envoy_gateway_config_compared_with_the_catalog_values() -> None:
    def cm(doc: Any) -> ObservedConfigMap:
        return ObservedConfigMap(
            namespace="eg", name="envoy-gateway-config", data={"envoy-gateway.yaml": doc}
        )

    title = "Envoy Gateway's extensionManager"
    rendered = catalog.BY_NAME["envoy-gateway"].values(provided_stack(Stack.STANDARD).spec)
    doc = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyGateway"}
    doc |= rendered["config"]["envoyGateway"]
    ok = with_facts(config_maps=[cm(yaml.safe_dump(doc))])
    assert result(ok, "envoy-gateway", title).status is MET
    doc["extensionManager"]["hooks"]["xdsTranslator"]["post"] = ["Translation"]
    bad = result(with_facts(config_maps=[cm(yaml.safe_dump(doc))]), "envoy-gateway", title)
    assert bad.status is WARNING
    assert 'extensionManager.hooks.xdsTranslator.post lacks "Cluster"' in bad.message
    assert result(with_facts(config_maps=[cm(": not yaml [")]), "envoy-gateway", title).status is (
        WARNING
    )
    assert result(with_facts(config_maps=[]), "envoy-gateway", title).status is UNKNOWN


def test_service_port() -> None:
    def svc(ports: list[int]) -> ObservedService:
        return ObservedService(
            namespace="envoy-ai-gateway-system", name="ai-gateway-controller", ports=ports
        )

    title = "Service ai-gateway-controller"
    assert result(with_facts(services=[svc([9443, 1063])]), "ai-gateway", title).status is MET
    assert result(with_facts(services=[svc([9443])]), "ai-gateway", title).status is WARNING
    assert result(with_facts(services=[]), "ai-gateway", title).status is WARNING


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["--trust-namespace=modelplane-system"], MET),
        (["--trust-namespace", "modelplane-system"], MET),
        (["--trust-namespace=cert-manager"], WARNING),
        ([], WARNING),  # the default is cert-manager
    ],
)
def test_trust_namespace(args: list[str], status: RequirementStatus) -> None:
    tm = deploy("trust-manager", "quay.io/jetstack/trust-manager:v0.25.0", args=args)
    r = result(with_facts(workloads=[tm]), "trust-manager", "trust-manager runs with")
    assert r.status is status


def test_prometheus_selectors() -> None:
    def prom(spec: dict[str, Any]) -> ObservedObject:
        return ObservedObject(namespace="monitoring", name="p", spec=spec)

    title = "Prometheus selects"
    everything = {"podMonitorSelector": {}, "podMonitorNamespaceSelector": {}}
    assert (
        result(
            with_facts(custom={PROMETHEUSES: [prom(everything)]}), "kube-prometheus-stack", title
        ).status
        is MET
    )
    release = {
        "podMonitorSelector": {"matchLabels": {"release": "x"}},
        "podMonitorNamespaceSelector": {},
    }
    r = result(with_facts(custom={PROMETHEUSES: [prom(release)]}), "kube-prometheus-stack", title)
    assert r.status is WARNING
    # One Prometheus that selects everything is enough.
    both = [prom(release), prom(everything)]
    assert (
        result(with_facts(custom={PROMETHEUSES: both}), "kube-prometheus-stack", title).status
        is MET
    )
    assert (
        result(with_facts(custom={PROMETHEUSES: []}), "kube-prometheus-stack", title).status
        is UNKNOWN
    )
    not_served = with_facts(
        unobservable={PROMETHEUSES: "prometheuses.monitoring.coreos.com is not served"}
    )
    assert result(not_served, "kube-prometheus-stack", title).status is UNKNOWN


def test_gpu_node_checks() -> None:
    gpu_labelled = ObservedNode(
        name="a", labels={"feature.node.kubernetes.io/pci-0302_10de.present": "true"}
    )
    gpu_bare = ObservedNode(name="b", taints=["nvidia.com/gpu"])
    cpu = ObservedNode(name="c", labels={"nvidia.com/gpu.present": "false"})
    results = with_facts(
        nodes=[gpu_labelled, gpu_bare, cpu], resource_slices={"gpu.nvidia.com": ["a"]}
    )
    labels = result(results, "node-feature-discovery", "GPU nodes carry")
    assert labels.status is WARNING and labels.message.startswith("GPU node b lacks")
    slices = result(results, "nvidia-dra-driver-gpu", "GPU nodes publish")
    assert slices.status is WARNING and slices.message.startswith("GPU node b has no ResourceSlice")
    plugin = result(results, "nvidia-dra-driver-gpu", "no node advertises")
    assert plugin.status is MET
    only_cpu = with_facts(nodes=[cpu], resource_slices={})
    assert result(only_cpu, "node-feature-discovery", "GPU nodes carry").status is UNKNOWN
    # A node that publishes slices is a GPU node even without any label.
    sliced = ObservedNode(name="s")
    r = with_facts(nodes=[sliced], resource_slices={"gpu.nvidia.com": ["s"]})
    assert result(r, "node-feature-discovery", "GPU nodes carry").status is WARNING
    assert result(r, "nvidia-dra-driver-gpu", "GPU nodes publish").status is MET
    no_slices_api = with_facts(nodes=[gpu_bare], unobservable={"resourceslices": "not served"})
    assert result(no_slices_api, "nvidia-dra-driver-gpu", "GPU nodes publish").status is UNKNOWN


def test_critical_pods_quota() -> None:
    gke = ObservedQuota(
        namespace="kube-system",
        name="gcp-critical-pods",
        priority_classes=["system-node-critical", "system-cluster-critical"],
    )
    plugin = ObservedWorkload(
        kind="DaemonSet",
        namespace="nvidia-dra-driver",
        name="dra-driver-nvidia-gpu-kubelet-plugin",
        images=["registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"],
    )
    allow = gke.model_copy(update={"namespace": "nvidia-dra-driver", "name": "allow"})
    title = "the DRA driver's namespace admits"
    comp = "nvidia-dra-driver-gpu"
    assert result(with_facts(quotas=[], workloads=[]), comp, title).status is MET
    assert result(with_facts(quotas=[gke], workloads=[]), comp, title).status is UNKNOWN
    assert result(with_facts(quotas=[gke], workloads=[plugin]), comp, title).status is WARNING
    assert result(with_facts(quotas=[gke, allow], workloads=[plugin]), comp, title).status is MET


def test_kai_scheduler_name() -> None:
    image = "ghcr.io/kai-scheduler/kai-scheduler/scheduler:v0.16.8"
    title = "a scheduler answers"

    def check(*workloads: ObservedWorkload) -> RequirementStatus:
        return result(
            with_facts(Stack.DYNAMO, workloads=list(workloads)), "kai-scheduler", title
        ).status

    assert check(deploy("kai-scheduler-default", image)) is MET
    assert check(deploy("sched", image, args=["--scheduler-name=kai-scheduler"])) is MET
    assert check(deploy("other-default", image)) is WARNING
    assert check(deploy("kai-scheduler-default", image, args=["--scheduler-name=x"])) is WARNING
    assert check() is UNKNOWN


def test_grove_version_follows_the_spec_pin() -> None:
    repo = "ghcr.io/ai-dynamo/grove/grove-operator"
    title = "the Grove operator runs"

    def check(image: str) -> RequirementResult:
        return result(
            with_facts(Stack.DYNAMO, workloads=[deploy("grove-operator", image)]), "grove", title
        )

    assert check(f"{repo}:v0.1.0-alpha.12-rc2").status is MET
    old = check(f"{repo}:v0.1.0-alpha.12-rc1")
    assert old.status is WARNING and "not v0.1.0-alpha.12-rc2" in old.message
    assert check(f"{repo}@sha256:abc").status is UNKNOWN


def test_controllers_available() -> None:
    title = "the cert-manager controller and webhook available"
    c = deploy("cm", "quay.io/jetstack/cert-manager-controller:v1.20.2")
    w = deploy("cm-webhook", "quay.io/jetstack/cert-manager-webhook:v1.20.2")
    down = w.model_copy(update={"available": False})
    assert result(with_facts(workloads=[c, w]), "cert-manager", title).status is MET
    r = result(with_facts(workloads=[c, down]), "cert-manager", title)
    assert r.status is WARNING and "Deployment x/cm-webhook is not Available" in r.message
    assert result(with_facts(workloads=[c]), "cert-manager", title).status is WARNING
    assert result(with_facts(workloads=[]), "cert-manager", title).status is UNKNOWN


def test_every_advisory_is_listed_under_a_not_checked_component() -> None:
    for component in catalog.COMPONENTS:
        if component.advisories:
            assert component.role == "substrate"
            assert component.not_checked, component.name
