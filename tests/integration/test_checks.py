"""The Provided-mode checks and ``modelplane check`` against a real kube-apiserver.

Each API server here is this module's own (started from the testbin that
conftest.py's ``testbin`` fixture vouches for), so CRDs added and removed
never disturb other tests. No kubelet or controller-manager runs: objects
whose status matters (Deployments, Nodes) get their status written by hand.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType
from tests.integration.hubs import private_env
from tests.shared_fixtures import upstream_dir, yaml_docs
from tests.testenv import TestEnv
from tests.testenv import kube as testenv_kube
from tests.waiting import wait_for_async
from typer.testing import CliRunner

from modelplane.catalog.components import BY_NAME, components_of_stack
from modelplane.checks.checker import check_results, summarize
from modelplane.cli.main import app
from modelplane.kube.client import METADATA_LIST, TargetClient, list_objects
from modelplane.kube.discovery import served_apis
from modelplane.observe.facts import needed_facts, observe_for_check
from modelplane.observe.state import SECRETS
from modelplane.pins import Stack
from modelplane.plan.model import RequirementResult, RequirementStatus

MET = RequirementStatus.MET
UNMET = RequirementStatus.UNMET
WARNING = RequirementStatus.WARNING
UNKNOWN = RequirementStatus.UNKNOWN

PROJECT_CRDS = Path(__file__).resolve().parent.parent / "fixtures" / "crds"
UPSTREAM = upstream_dir()

# The spec's "Checked" CRDs (000_3c48735b7dd4bba3.txt), written here on their
# own so the catalog is tested against the spec rather than against itself.
BOTH, STANDARD, DYNAMO = {Stack.STANDARD, Stack.DYNAMO}, {Stack.STANDARD}, {Stack.DYNAMO}
SPEC_CHECKED: dict[str, tuple[str, set[Stack]]] = {
    "certificates.cert-manager.io": ("v1", BOTH),
    "podmonitors.monitoring.coreos.com": ("v1", BOTH),
    "servicemonitors.monitoring.coreos.com": ("v1", BOTH),
    "nodefeatures.nfd.k8s-sigs.io": ("v1alpha1", BOTH),
    "gatewayclasses.gateway.networking.k8s.io": ("v1", BOTH),
    "gateways.gateway.networking.k8s.io": ("v1", BOTH),
    "httproutes.gateway.networking.k8s.io": ("v1", BOTH),
    "envoyproxies.gateway.envoyproxy.io": ("v1alpha1", BOTH),
    "backends.gateway.envoyproxy.io": ("v1alpha1", BOTH),
    "clienttrafficpolicies.gateway.envoyproxy.io": ("v1alpha1", BOTH),
    "aigatewayroutes.aigateway.envoyproxy.io": ("v1alpha1", BOTH),
    "inferencepools.inference.networking.k8s.io": ("v1", BOTH),
    "bundles.trust.cert-manager.io": ("v1alpha1", BOTH),
    "leaderworkersets.leaderworkerset.x-k8s.io": ("v1", STANDARD),
    "podcliquesets.grove.io": ("v1alpha1", DYNAMO),
    "queues.scheduling.run.ai": ("v2", DYNAMO),
}
DEVICE_CLASS_REQUIREMENT = "DeviceClass gpu.nvidia.com (resource.k8s.io/v1)"
WAIT_SECONDS = 60.0
DRA_IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
DRA_NAMESPACE = BY_NAME["nvidia-dra-driver-gpu"].namespace


# ---- writing objects by hand, with lightkube ------------------------------------------


class Kube:
    """Server-side apply and delete as the admin; remembers what to clean up."""

    def __init__(self, env: TestEnv) -> None:
        self.env = env
        self.client = testenv_kube.client(env, timeout=60)
        self.created: list[dict[str, Any]] = []

    def _res(self, body: dict[str, Any]) -> Any:
        return testenv_kube.resource_for(self.client, body["apiVersion"], body["kind"])

    def apply(self, body: dict[str, Any], status: dict[str, Any] | None = None) -> None:
        self.client.apply(self._res(body).from_dict(body), force=True)
        if body["kind"] != "Namespace":
            self.created.append(body)
        if status is not None:
            self.set_status(body, status)

    def set_status(self, body: dict[str, Any], status: dict[str, Any]) -> None:
        meta = body["metadata"]
        self.client.patch(
            self._res(body).Status,
            meta["name"],
            {"status": status},
            namespace=meta.get("namespace"),
            patch_type=PatchType.MERGE,
        )

    def delete(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        try:
            self.client.delete(self._res(body), meta["name"], namespace=meta.get("namespace"))
        except ApiError as err:
            assert err.status.code == 404, err.status.message

    def exists(self, body: dict[str, Any]) -> bool:
        meta = body["metadata"]
        return (
            testenv_kube.get(
                self.client, body["apiVersion"], body["kind"], meta["name"], meta.get("namespace")
            )
            is not None
        )

    def namespace(self, name: str) -> None:
        # Never deleted: without a namespace controller it would stay Terminating.
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def close(self) -> None:
        self.client.close()

    def cleanup(self) -> None:
        for body in reversed(self.created):
            self.delete(body)
        self.created.clear()
        self.close()


def load_docs(paths: list[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs += [d for d in yaml_docs(path) if isinstance(d, dict)]
    return docs


def crd_served(apis: dict[str, dict[str, list[str]]], crd: dict[str, Any]) -> bool:
    spec = crd["spec"]
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    have = apis.get(spec["group"], {}).get(spec["names"]["plural"], [])
    return all(v in have for v in served)


def crd_gone(apis: dict[str, dict[str, list[str]]], crd: dict[str, Any]) -> bool:
    spec = crd["spec"]
    return spec["names"]["plural"] not in apis.get(spec["group"], {})


@asynccontextmanager
async def client_for(env: TestEnv) -> AsyncIterator[AsyncClient]:
    config = KubeConfig.from_file(str(env.kubeconfig_path)).get()
    client = TargetClient(config, ConnectionParams(trust_env=False))
    try:
        yield client
    finally:
        await client.close()


async def until_discovery(
    env: TestEnv, predicate: Callable[[dict[str, dict[str, list[str]]]], bool]
) -> None:
    """Poll aggregated discovery until ``predicate`` holds (a new CRD takes a moment)."""
    async with client_for(env) as client:

        async def settled() -> bool:
            return predicate(await served_apis(client))

        await wait_for_async("discovery to settle", settled, deadline=WAIT_SECONDS)


async def results_for(env: TestEnv, stack: Stack) -> list[RequirementResult]:
    async with client_for(env) as client:
        return check_results(stack, await observe_for_check(client, stack))


def not_met(results: list[RequirementResult]) -> dict[str, RequirementResult]:
    return {
        r.requirement: r
        for r in results
        if r.severity == "required" and r.status is not RequirementStatus.MET
    }


def one(results: list[RequirementResult], component: str, starts: str) -> RequirementResult:
    found = [r for r in results if r.component == component and r.requirement.startswith(starts)]
    assert len(found) == 1, [r.requirement for r in results if r.component == component]
    return found[0]


def load_substrate(kube: Kube, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    for doc in docs:
        kube.apply(doc)
    return crds


# ---- environments ---------------------------------------------------------------


@pytest.fixture(scope="module")
def env(testbin: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestEnv]:
    """A target with the project's minimal CRDs and the gpu.nvidia.com DeviceClass."""
    with private_env(tmp_path_factory.mktemp("checks")) as env:
        kube = Kube(env)
        crds = load_substrate(kube, load_docs(sorted(PROJECT_CRDS.glob("*.yaml"))))
        kube.close()
        asyncio.run(until_discovery(env, lambda apis: all(crd_served(apis, c) for c in crds)))
        yield env


def _upstream_files() -> list[Path]:
    if not UPSTREAM.is_dir():
        pytest.skip(f"shared upstream fixtures are absent ({UPSTREAM})")
    return sorted(UPSTREAM.glob("*/*.yaml"))


@pytest.fixture(scope="module", params=["project", "upstream"])
def crd_env(
    request: pytest.FixtureRequest,
    testbin: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestEnv, dict[str, dict[str, Any]]]]:
    """A fresh target loaded with one CRD source; yields it and the CRDs by name."""
    files = sorted(PROJECT_CRDS.glob("*.yaml")) if request.param == "project" else _upstream_files()
    with private_env(tmp_path_factory.mktemp(f"crds-{request.param}")) as env:
        kube = Kube(env)
        # Later documents win (Gateway API comes twice upstream: standard and experimental).
        crds = {c["metadata"]["name"]: c for c in load_substrate(kube, load_docs(files))}

        async def settle() -> None:
            await until_discovery(env, lambda apis: all(crd_served(apis, c) for c in crds.values()))
            for crd in crds.values():
                await until_storage_ready(kube, crd)

        asyncio.run(settle())
        kube.close()
        yield env, crds


@pytest.fixture
def kube(env: TestEnv) -> Iterator[Kube]:
    k = Kube(env)
    try:
        yield k
    finally:
        k.cleanup()


# ---- the checked requirements ----------------------------------------------------------


@pytest.mark.parametrize("stack", list(Stack))
async def test_every_crd_applied_meets_every_checked_requirement(
    crd_env: tuple[TestEnv, dict[str, dict[str, Any]]], stack: Stack
) -> None:
    env, _ = crd_env
    results = await results_for(env, stack)
    required = [r for r in results if r.severity == "required"]
    assert not_met(results) == {}
    expected = {
        f"CRD {name} serving {version}"
        for name, (version, stacks) in SPEC_CHECKED.items()
        if stack in stacks
    } | {DEVICE_CLASS_REQUIREMENT}
    assert {r.requirement for r in required} == expected
    assert summarize(results).requirements_met


async def until_storage_ready(kube: Kube, crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served"))
    api_version = f"{spec['group']}/{version}"
    res = testenv_kube.resource_for(kube.client, api_version, spec["names"]["kind"])

    async def ready() -> bool:
        across = {"namespace": "*"} if spec.get("scope") == "Namespaced" else {}
        try:
            next(iter(kube.client.list(res, chunk_size=1, **across)), None)
        except ApiError as err:
            return err.status.code != 429
        return True

    await wait_for_async(f"{api_version} to finish initialising", ready, deadline=WAIT_SECONDS)


async def until_gone(kube: Kube, body: dict[str, Any]) -> None:
    """Wait until a deleted object is gone (a deleted CRD lingers a moment)."""

    async def gone() -> bool:
        return not kube.exists(body)

    name = body["metadata"]["name"]
    await wait_for_async(f"{body['kind']} {name} to be gone", gone, deadline=WAIT_SECONDS)


async def test_removing_each_crd_makes_exactly_that_requirement_unmet(
    crd_env: tuple[TestEnv, dict[str, dict[str, Any]]],
) -> None:
    env, crds = crd_env
    kube = Kube(env)
    try:
        for name, (version, stacks) in SPEC_CHECKED.items():
            crd = crds[name]
            kube.delete(crd)
            await until_discovery(env, lambda apis, crd=crd: crd_gone(apis, crd))
            for stack in stacks:
                results = await results_for(env, stack)
                unmet = not_met(results)
                title = f"CRD {name} serving {version}"
                assert list(unmet) == [title], (name, stack, list(unmet))
                assert unmet[title].status is UNMET
                assert f"CRD {name} is not served" in unmet[title].message
            # Recreate once the old object is gone.
            await until_gone(kube, crd)
            kube.apply(crd)
            await until_discovery(env, lambda apis, crd=crd: crd_served(apis, crd))
            # Deleting a CRD while its storage still starts (LISTs answer 429)
            # can stall the API server's cleanup of it for minutes; the next
            # round deletes it again, so let the storage settle first.
            await until_storage_ready(kube, crd)
    finally:
        kube.close()
    assert not_met(await results_for(env, Stack.STANDARD)) == {}


async def test_crd_serving_another_version_is_unmet_naming_both(env: TestEnv) -> None:
    kube = Kube(env)
    original = next(
        d
        for d in load_docs([PROJECT_CRDS / "envoy-gateway.yaml"])
        if d["metadata"]["name"] == "gateways.gateway.networking.k8s.io"
    )
    old = json.loads(json.dumps(original))
    old["spec"]["versions"][0]["name"] = "v1beta1"
    try:
        kube.delete(original)
        await until_discovery(env, lambda apis: crd_gone(apis, original))
        await until_gone(kube, original)
        kube.apply(old)
        await until_discovery(env, lambda apis: crd_served(apis, old))
        unmet = not_met(await results_for(env, Stack.STANDARD))
        assert list(unmet) == ["CRD gateways.gateway.networking.k8s.io serving v1"]
        message = unmet["CRD gateways.gateway.networking.k8s.io serving v1"].message
        assert "serves v1beta1, not v1" in message
        assert "Gateway API" in message  # says what to do
        # Its siblings still serve v1, so the group-version stays available:
        # the check looks at the CRD itself.
        async with client_for(env) as client:
            apis = await served_apis(client)
        assert "v1" in apis["gateway.networking.k8s.io"]["httproutes"]
    finally:
        kube.delete(old)
        await until_gone(kube, old)
        kube.apply(original)
        kube.close()
        await until_discovery(env, lambda apis: crd_served(apis, original))


async def test_missing_device_class_is_unmet(env: TestEnv) -> None:
    kube = Kube(env)
    (device_class,) = load_docs([PROJECT_CRDS / "deviceclass-gpu.yaml"])
    try:
        kube.delete(device_class)
        unmet = not_met(await results_for(env, Stack.DYNAMO))
        assert list(unmet) == [DEVICE_CLASS_REQUIREMENT]
        assert "does not exist" in unmet[DEVICE_CLASS_REQUIREMENT].message
        assert unmet[DEVICE_CLASS_REQUIREMENT].component == "nvidia-dra-driver-gpu"
    finally:
        kube.apply(device_class)
        kube.close()
    assert not_met(await results_for(env, Stack.DYNAMO)) == {}


# ---- the advisory checks ---------------------------------------------------------------

_NOW = "2026-01-01T00:00:00Z"


def deployment(
    namespace: str, name: str, image: str, args: list[str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image, "args": args or []}]},
            },
        },
    }


def available(yes: bool) -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": "Available",
                "status": "True" if yes else "False",
                "reason": "ByHand",
                "message": "written by the test",
                "lastUpdateTime": _NOW,
                "lastTransitionTime": _NOW,
            }
        ]
    }


def node(
    name: str,
    labels: dict[str, str] | None = None,
    taints: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints or []]},
    }


def node_status(allocatable: dict[str, str]) -> dict[str, Any]:
    return {"capacity": allocatable, "allocatable": allocatable}


async def advisory(
    env: TestEnv, component: str, starts: str, stack: Stack = Stack.STANDARD
) -> RequirementResult:
    results = await results_for(env, stack)
    result = one(results, component, starts)
    assert result.severity == "advisory"
    # Advisory results never decide RequirementsMet.
    assert summarize(results).requirements_met
    return result


# The EnvoyGateway document gateway-helm renders into envoy-gateway-config:
# chart defaults merged with the values the requirements page states.
ENVOY_GATEWAY_YAML = """\
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
logging:
  level:
    default: info
provider:
  type: Kubernetes
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


def eg_config(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "envoy-gateway-config", "namespace": "envoy-gateway-system"},
        "data": {"envoy-gateway.yaml": text},
    }


async def test_envoy_gateway_extension_manager_wiring(env: TestEnv, kube: Kube) -> None:
    title = "Envoy Gateway's extensionManager"
    assert (await advisory(env, "envoy-gateway", title)).status is UNKNOWN
    kube.namespace("envoy-gateway-system")
    kube.apply(eg_config(ENVOY_GATEWAY_YAML))
    result = await advisory(env, "envoy-gateway", title)
    assert result.status is MET, result.message

    wrong = yaml.safe_load(ENVOY_GATEWAY_YAML)
    wrong["extensionManager"]["service"]["fqdn"]["port"] = 1064
    del wrong["extensionManager"]["backendResources"]
    wrong["extensionApis"]["enableBackend"] = False
    kube.apply(eg_config(yaml.safe_dump(wrong)))
    result = await advisory(env, "envoy-gateway", title)
    assert result.status is WARNING
    assert "extensionManager.service.fqdn.port is 1064, not 1063" in result.message
    assert "extensionManager.backendResources is missing" in result.message
    assert "extensionApis.enableBackend is false, not true" in result.message


async def test_ai_gateway_controller_service(env: TestEnv, kube: Kube) -> None:
    def service(port: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "ai-gateway-controller", "namespace": "envoy-ai-gateway-system"},
            "spec": {"ports": [{"name": "grpc", "port": port}], "selector": {"app": "x"}},
        }

    title = "Service ai-gateway-controller"
    result = await advisory(env, "ai-gateway", title)
    assert result.status is WARNING and "does not exist" in result.message
    kube.namespace("envoy-ai-gateway-system")
    kube.apply(service(8080))
    result = await advisory(env, "ai-gateway", title)
    assert result.status is WARNING and "exposes ports 8080, not 1063" in result.message
    kube.apply(service(1063))
    assert (await advisory(env, "ai-gateway", title)).status is MET


async def test_trust_manager_trust_namespace(env: TestEnv, kube: Kube) -> None:
    title = "trust-manager runs with --trust-namespace"
    assert (await advisory(env, "trust-manager", title)).status is UNKNOWN
    # Where its chart's documentation installs it, beside cert-manager; the
    # catalog's own namespace is read too.
    kube.namespace("cert-manager")
    image = "quay.io/jetstack/trust-manager:v0.25.0"
    kube.apply(deployment("cert-manager", "trust-manager", image, ["--trust-namespace=other"]))
    result = await advisory(env, "trust-manager", title)
    assert result.status is WARNING
    assert "--trust-namespace=other" in result.message
    kube.apply(deployment("cert-manager", "trust-manager", image, ["--log-level=1"]))
    result = await advisory(env, "trust-manager", title)
    assert result.status is WARNING and "default cert-manager" in result.message
    kube.apply(
        deployment("cert-manager", "trust-manager", image, ["--trust-namespace=modelplane-system"])
    )
    assert (await advisory(env, "trust-manager", title)).status is MET


async def test_prometheus_selects_pod_monitors_everywhere(env: TestEnv, kube: Kube) -> None:
    def prometheus(spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": "prometheus-prometheus", "namespace": "monitoring"},
            "spec": spec,
        }

    title = "Prometheus selects PodMonitors"
    assert (await advisory(env, "kube-prometheus-stack", title)).status is UNKNOWN
    kube.namespace("monitoring")
    # The chart's default: the release label selector, own namespace only.
    kube.apply(prometheus({"podMonitorSelector": {"matchLabels": {"release": "mp"}}}))
    result = await advisory(env, "kube-prometheus-stack", title)
    assert result.status is WARNING
    assert 'spec.podMonitorSelector is {"matchLabels": {"release": "mp"}}' in result.message
    assert "spec.podMonitorNamespaceSelector is unset" in result.message
    # Recreated: server-side apply over a schemaless field would leave null, not {}.
    kube.delete(prometheus({}))
    kube.apply(prometheus({"podMonitorSelector": {}, "podMonitorNamespaceSelector": {}}))
    assert (await advisory(env, "kube-prometheus-stack", title)).status is MET


async def test_no_device_plugin_next_to_dra(env: TestEnv, kube: Kube) -> None:
    title = "no node advertises nvidia.com/gpu"
    kube.apply(node("gpu-a", taints=["nvidia.com/gpu"]), status=node_status({"cpu": "8"}))
    assert (await advisory(env, "nvidia-dra-driver-gpu", title)).status is MET
    kube.apply(
        node("gpu-b", taints=["nvidia.com/gpu"]),
        status=node_status({"cpu": "8", "nvidia.com/gpu": "8"}),
    )
    result = await advisory(env, "nvidia-dra-driver-gpu", title)
    assert result.status is WARNING and "gpu-b advertises nvidia.com/gpu" in result.message


async def test_gpu_nodes_carry_nfd_vendor_labels(env: TestEnv, kube: Kube) -> None:
    title = "GPU nodes carry NFD's PCI vendor label"
    kube.apply(node("cpu-only", labels={"kubernetes.io/os": "linux"}))
    assert (await advisory(env, "node-feature-discovery", title)).status is UNKNOWN
    labelled = {"feature.node.kubernetes.io/pci-0302_10de.present": "true"}
    kube.apply(node("gpu-labelled", labels=labelled, taints=["nvidia.com/gpu"]))
    assert (await advisory(env, "node-feature-discovery", title)).status is MET
    kube.apply(node("gpu-bare", labels={"nvidia.com/gpu.present": "true"}))
    result = await advisory(env, "node-feature-discovery", title)
    assert result.status is WARNING
    assert "gpu-bare" in result.message and "gpu-labelled" not in result.message


async def test_gpu_nodes_publish_resource_slices(env: TestEnv, kube: Kube) -> None:
    def slice_for(node_name: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpu.nvidia.com"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }

    title = "GPU nodes publish ResourceSlices"
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    kube.apply(node("gpu-1", labels=labels))
    kube.apply(node("gpu-2", labels=labels))
    kube.apply(slice_for("gpu-1"))
    result = await advisory(env, "nvidia-dra-driver-gpu", title)
    assert result.status is WARNING
    assert "gpu-2 has no ResourceSlice of gpu.nvidia.com" in result.message
    kube.apply(slice_for("gpu-2"))
    assert (await advisory(env, "nvidia-dra-driver-gpu", title)).status is MET


async def test_dra_namespace_admits_critical_pods_where_restricted(
    env: TestEnv, kube: Kube
) -> None:
    def quota(namespace: str, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "hard": {"pods": "1000"},
                "scopeSelector": {
                    "matchExpressions": [
                        {
                            "operator": "In",
                            "scopeName": "PriorityClass",
                            "values": ["system-node-critical", "system-cluster-critical"],
                        }
                    ]
                },
            },
        }

    plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dra-driver-kubelet-plugin", "namespace": DRA_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "plugin"}},
            "template": {
                "metadata": {"labels": {"app": "plugin"}},
                "spec": {
                    "containers": [
                        {
                            "name": "gpus",
                            "image": DRA_IMAGE,
                        }
                    ]
                },
            },
        },
    }
    title = "the DRA driver's namespace admits system-critical pods"
    result = await advisory(env, "nvidia-dra-driver-gpu", title)
    assert result.status is MET and "no PriorityClass-scoped ResourceQuota" in result.message
    kube.apply(quota("kube-system", "gcp-critical-pods"))
    assert (await advisory(env, "nvidia-dra-driver-gpu", title)).status is UNKNOWN
    kube.namespace(DRA_NAMESPACE)
    kube.apply(plugin)
    result = await advisory(env, "nvidia-dra-driver-gpu", title)
    assert result.status is WARNING
    assert f"{DRA_NAMESPACE} has no ResourceQuota" in result.message
    kube.apply(quota(DRA_NAMESPACE, "allow-critical-pods"))
    assert (await advisory(env, "nvidia-dra-driver-gpu", title)).status is MET


async def test_kai_scheduler_answers_to_kai_scheduler(env: TestEnv, kube: Kube) -> None:
    title = "a scheduler answers to schedulerName kai-scheduler"
    image = "ghcr.io/kai-scheduler/kai-scheduler/scheduler:v0.16.8"
    assert (await advisory(env, "kai-scheduler", title, Stack.DYNAMO)).status is UNKNOWN
    kube.namespace("kai-scheduler")
    kube.apply(deployment("kai-scheduler", "gang-default", image, ["--scheduler-name=gang"]))
    result = await advisory(env, "kai-scheduler", title, Stack.DYNAMO)
    assert result.status is WARNING and "answers to gang" in result.message
    kube.apply(deployment("kai-scheduler", "kai-scheduler-default", image))
    assert (await advisory(env, "kai-scheduler", title, Stack.DYNAMO)).status is MET


async def test_grove_runs_the_pinned_version(env: TestEnv, kube: Kube) -> None:
    title = "the Grove operator runs the pinned version"
    repo = "ghcr.io/ai-dynamo/grove/grove-operator"
    kube.namespace("grove-system")
    kube.apply(deployment("grove-system", "grove-operator", f"{repo}:v0.1.0-alpha.12-rc1"))
    result = await advisory(env, "grove", title, Stack.DYNAMO)
    assert result.status is WARNING
    assert "rc1" in result.message and "v0.1.0-alpha.12-rc2" in result.message
    kube.apply(deployment("grove-system", "grove-operator", f"{repo}:v0.1.0-alpha.12-rc2"))
    assert (await advisory(env, "grove", title, Stack.DYNAMO)).status is MET


async def test_controllers_available(env: TestEnv, kube: Kube) -> None:
    title = "the Envoy Gateway controller available"
    assert (await advisory(env, "envoy-gateway", title)).status is UNKNOWN
    kube.namespace("envoy-gateway-system")
    eg = deployment("envoy-gateway-system", "envoy-gateway", "docker.io/envoyproxy/gateway:v1.8.4")
    kube.apply(eg, status=available(False))
    result = await advisory(env, "envoy-gateway", title)
    assert result.status is WARNING
    assert "Deployment envoy-gateway-system/envoy-gateway is not Available" in result.message
    kube.set_status(eg, available(True))
    assert (await advisory(env, "envoy-gateway", title)).status is MET

    # cert-manager needs both its controller and its webhook.
    kube.namespace("cert-manager")
    controller = deployment("cert-manager", "cm", "quay.io/jetstack/cert-manager-controller:v1")
    kube.apply(controller, status=available(True))
    result = await advisory(env, "cert-manager", "the cert-manager controller")
    assert result.status is WARNING and "jetstack/cert-manager-webhook" in result.message
    webhook = deployment("cert-manager", "cm-webhook", "quay.io/jetstack/cert-manager-webhook:v1")
    kube.apply(webhook, status=available(True))
    assert (await advisory(env, "cert-manager", "the cert-manager controller")).status is MET


async def test_a_tenants_look_alikes_never_meet_an_advisory(env: TestEnv, kube: Kube) -> None:
    # Exactly what the components would hold, written in a tenant's own
    # namespace: the wiring, an Available controller, the trust namespace.
    tenant = "tenant-a"
    kube.namespace(tenant)
    config = eg_config(ENVOY_GATEWAY_YAML)
    kube.apply({**config, "metadata": {**config["metadata"], "namespace": tenant}})
    eg_image = "docker.io/envoyproxy/gateway:v1.8.4"
    kube.apply(deployment(tenant, "envoy-gateway", eg_image), status=available(True))
    trust = deployment(
        tenant,
        "trust-manager",
        "quay.io/jetstack/trust-manager:v0.25.0",
        ["--trust-namespace=modelplane-system"],
    )
    kube.apply(trust, status=available(True))
    checks = [
        ("envoy-gateway", "Envoy Gateway's extensionManager"),
        ("envoy-gateway", "the Envoy Gateway controller available"),
        ("trust-manager", "trust-manager runs with --trust-namespace"),
    ]
    for component, title in checks:
        result = await advisory(env, component, title)
        assert result.status is UNKNOWN, result
        assert tenant not in result.message, result
        assert f"namespace {BY_NAME[component].namespace}" in result.message, result

    # The same objects where the component is installed are its own.
    kube.namespace("envoy-gateway-system")
    kube.apply(eg_config(ENVOY_GATEWAY_YAML))
    kube.apply(
        deployment("envoy-gateway-system", "envoy-gateway", eg_image), status=available(True)
    )
    for component, title in checks[:2]:
        assert (await advisory(env, component, title)).status is MET, title


async def test_warnings_never_make_requirements_unmet(env: TestEnv, kube: Kube) -> None:
    kube.apply(node("plugin-node", taints=["nvidia.com/gpu"]), node_status({"nvidia.com/gpu": "1"}))
    results = await results_for(env, Stack.STANDARD)
    assert any(r.status is WARNING for r in results)
    assert all(r.status in (MET, UNMET) for r in results if r.severity == "required")
    assert all(r.status is not UNMET for r in results if r.severity == "advisory")
    assert summarize(results).requirements_met


async def test_observation_cost_does_not_grow_with_crds(env: TestEnv) -> None:
    """The whole check is a fixed number of requests, counted at the transport."""
    counted: list[str] = []

    class Counting(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            counted.append(f"{request.method} {request.url.path}")
            return await super().handle_async_request(request)

    config = KubeConfig.from_file(str(env.kubeconfig_path)).get()
    counting = Counting(verify=env.ssl_context())
    client = TargetClient(config, ConnectionParams(trust_env=False, transport=counting))  # type: ignore[arg-type]
    try:
        observed = await observe_for_check(client, Stack.DYNAMO)
    finally:
        await client.close()
    assert observed.cluster is not None
    assert sum(1 for p in counted if p.endswith("/customresourcedefinitions")) == 0
    assert counted[:2] == ["GET /api", "GET /apis"]
    # Discovery, the DeviceClasses, and one LIST per listing: a kind read in
    # each namespace a component is observed in, fixed by the catalog.
    listings = {f.listing for f in needed_facts(components_of_stack(Stack.DYNAMO))}
    assert len(counted) == 3 + len(listings), counted
    assert len(counted) == 18, counted


# ---- modelplane check ------------------------------------------------------------


def test_cli_exit_zero_when_every_checked_requirement_is_met(env: TestEnv) -> None:
    result = CliRunner().invoke(
        app, ["check", "--kubeconfig", str(env.kubeconfig_path), "--stack", "Dynamo"]
    )
    assert result.exit_code == 0, result.output
    assert "every checked requirement is met" in result.stdout
    assert "✓ CRD queues.scheduling.run.ai serving v2" in result.stdout
    assert "\nkai-scheduler\n" in result.stdout  # grouped by component


def test_cli_exit_one_and_json_when_a_requirement_is_unmet(env: TestEnv) -> None:
    kube = Kube(env)
    (device_class,) = load_docs([PROJECT_CRDS / "deviceclass-gpu.yaml"])
    try:
        kube.delete(device_class)
        args = ["check", "--kubeconfig", str(env.kubeconfig_path), "-o", "json"]
        result = CliRunner().invoke(app, args)
        table = CliRunner().invoke(app, args[:-2])
    finally:
        kube.apply(device_class)
        kube.close()
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert set(doc) >= {"results", "summary"}
    for r in doc["results"]:
        assert set(r) >= {"component", "requirement", "status", "message", "severity"}
        assert r["status"] in ("met", "unmet", "warning", "unknown")
    unmet = [r for r in doc["results"] if r["status"] == "unmet"]
    assert [r["requirement"] for r in unmet] == [DEVICE_CLASS_REQUIREMENT]
    assert doc["summary"]["unmet"] == 1 and doc["summary"]["requirementsMet"] is False
    assert table.exit_code == 1
    assert f"✗ {DEVICE_CLASS_REQUIREMENT}" in table.stdout
    assert "1 checked requirement unmet" in table.stdout


def test_cli_exit_two_on_usage_errors(env: TestEnv, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["check", "--kubeconfig", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    context = runner.invoke(
        app, ["check", "--kubeconfig", str(env.kubeconfig_path), "--context", "nope"]
    )
    assert context.exit_code == 2 and "nope" in context.stderr
    assert runner.invoke(app, ["check"]).exit_code == 2
    bad_stack = ["check", "--kubeconfig", str(env.kubeconfig_path), "--stack", "Nope"]
    assert runner.invoke(app, bad_stack).exit_code == 2


def test_cli_exit_two_without_traceback_when_unreachable(env: TestEnv, tmp_path: Path) -> None:
    config = yaml.safe_load(env.kubeconfig_path.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    path = tmp_path / "unreachable"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "modelplane.cli.main", "check", "--kubeconfig", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot reach the API server")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_exit_two_when_credentials_are_refused(env: TestEnv, tmp_path: Path) -> None:
    config = yaml.safe_load(env.kubeconfig_path.read_text())
    config["users"][0]["user"]["token"] = "not-the-token"
    path = tmp_path / "refused"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["check", "--kubeconfig", str(path)])
    assert result.exit_code == 2
    assert "refused the credentials (401" in result.stderr


# ---- images: the mirror rules and pull Secrets -------------------------------------

CONTROLLER = "quay.io/jetstack/cert-manager-controller:v1.20.2"
MIRROR_RULE = "quay.io=mirror.internal/quay"


def _check_json(env: TestEnv, *extra: str) -> tuple[int, dict[str, Any]]:
    args = ["check", "--kubeconfig", str(env.kubeconfig_path), "-o", "json", *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.stdout) if result.stdout else {}


def _mirror_results(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["results"] if r["requirement"] == "images pulled from the mirror"]


def test_check_warns_of_a_provided_workload_outside_the_mirror(env: TestEnv, kube: Kube) -> None:
    kube.namespace("cert-manager")
    controller = deployment("cert-manager", "cm", CONTROLLER)
    kube.apply(controller, status=available(True))
    code, plain = _check_json(env)
    assert code == 0 and _mirror_results(plain) == []
    code, doc = _check_json(env, "--image-registry-mirror", MIRROR_RULE)
    # Advice only: the verdict and the exit status stay.
    assert code == 0, doc
    (result,) = _mirror_results(doc)
    assert (result["component"], result["status"], result["severity"]) == (
        "cert-manager",
        "warning",
        "advisory",
    )
    assert "Deployment cert-manager/cm pulls " + CONTROLLER in result["message"]
    assert "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2" in result["message"]
    assert doc["summary"]["warning"] == plain["summary"]["warning"] + 1
    assert doc["summary"]["requirementsMet"] is True
    # Pointed at the mirror, the same workload is met.
    moved = "mirror.internal/quay/jetstack/cert-manager-controller:v1.20.2"
    kube.apply(deployment("cert-manager", "cm", moved), status=available(True))
    code, doc = _check_json(env, "--image-registry-mirror", MIRROR_RULE)
    assert code == 0 and [r["status"] for r in _mirror_results(doc)] == ["met"]


def test_check_refuses_a_bad_rule_or_secret_name(env: TestEnv) -> None:
    args = ["check", "--kubeconfig", str(env.kubeconfig_path)]
    bad_rule = CliRunner().invoke(app, [*args, "--image-registry-mirror", "quay.io"])
    assert bad_rule.exit_code == 2 and "--image-registry-mirror" in bad_rule.stderr
    bad_name = CliRunner().invoke(app, [*args, "--image-pull-secret", "Not_A_Name"])
    assert bad_name.exit_code == 2 and "--image-pull-secret" in bad_name.stderr


def _secret(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": '{"auths": {"mirror.internal": {"auth": "c2VjcmV0"}}}'},
    }


def test_check_names_a_missing_pull_secret_and_reads_no_secret_data(
    env: TestEnv, kube: Kube
) -> None:
    # On the Dynamo stack the product's own ModelExpress server runs in
    # "default", and pulls with the Secrets given.
    args = ("--stack", "Dynamo", "--image-pull-secret", "regcred")
    code, doc = _check_json(env, *args)
    assert code == 0, doc
    missing = [r for r in doc["results"] if r["requirement"].startswith("pull Secret")]
    assert [(r["requirement"], r["status"], r["severity"]) for r in missing] == [
        ("pull Secret regcred in default", "warning", "advisory")
    ]
    assert "PullSecretMissing: regcred in default" in missing[0]["message"]
    # Elsewhere is not there: still missing.
    kube.namespace("elsewhere")
    kube.apply(_secret("elsewhere", "regcred"))
    code, doc = _check_json(env, *args)
    assert [r["requirement"] for r in doc["results"] if r["requirement"].startswith("pull")] == [
        "pull Secret regcred in default"
    ]
    kube.apply(_secret("default", "regcred"))
    code, doc = _check_json(env, *args)
    assert code == 0
    assert not [r for r in doc["results"] if r["requirement"].startswith("pull Secret")]

    async def listed() -> list[dict[str, Any]]:
        async with client_for(env) as client:
            return await list_objects(
                client, SECRETS, fields="metadata.name=regcred", accept=METADATA_LIST
            )

    # What the reads ask for is the Secrets' metadata: the server sends no data.
    items = asyncio.run(listed())
    assert sorted(i["metadata"]["namespace"] for i in items) == ["default", "elsewhere"]
    assert all(set(i) <= {"metadata", "apiVersion", "kind"} for i in items), items


async def test_pull_secrets_cost_one_request_each(env: TestEnv) -> None:
    counted: list[str] = []

    class Counting(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            counted.append(f"{request.method} {request.url.path}")
            return await super().handle_async_request(request)

    config = KubeConfig.from_file(str(env.kubeconfig_path)).get()
    counting = Counting(verify=env.ssl_context())
    client = TargetClient(config, ConnectionParams(trust_env=False, transport=counting))  # type: ignore[arg-type]
    try:
        await observe_for_check(client, Stack.DYNAMO)
        without = len(counted)
        counted.clear()
        observed = await observe_for_check(client, Stack.DYNAMO, ("regcred", "other"))
    finally:
        await client.close()
    assert len(counted) == without + 2, counted
    assert sorted(observed.pull_secrets) == ["other", "regcred"]
