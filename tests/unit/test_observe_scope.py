"""What observe reads of a target is scoped by namespace, never by a label a tenant can set."""

from __future__ import annotations

import pytest

from modelplane.api.spec import ServingStackSpec
from modelplane.catalog.components import components_for
from modelplane.observe.state import RELEASE_NAMESPACES, release_of, wanted
from modelplane.observe.watches import watch_keys

from .test_watch_cache import SERVED

# CRDs are watched whole (their events tell what is served); DeviceClasses
# are the requirements' own cluster-scoped objects.
CLUSTER_SCOPED = {
    "customresourcedefinitions",
    "namespaces",
    "gatewayclasses",
    "bundles",
    "queues",
    "deviceclasses",
    # The GPU checks' (observe.gpu_watch).
    "nodes",
    "resourceslices",
}


def _spec(stack: str) -> ServingStackSpec:
    return ServingStackSpec.model_validate(
        {
            "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
            "stack": stack,
            "gateway": {"hostname": "west.example.com"},
        }
    )


@pytest.mark.parametrize("stack", ["Standard", "Dynamo"])
def test_every_namespaced_watch_names_a_namespace(stack: str) -> None:
    spec = _spec(stack)
    keys = watch_keys(wanted(spec), SERVED)
    # CRDs are watched whole (their events tell what is served); DeviceClasses
    # are the requirements' own cluster-scoped objects.
    scoped = [
        k for k in keys if k.api.resource not in CLUSTER_SCOPED | {"customresourcedefinitions"}
    ]
    assert scoped
    assert all(k.namespace for k in scoped), [k for k in scoped if not k.namespace]
    # One watch of Helm's Secrets per release namespace of the stack.
    secrets = {k.namespace for k in keys if k.api.resource == "secrets"}
    assert secrets == {c.namespace for c in components_for(spec) if c.chart is not None}


def test_a_release_namespace_reads_only_the_catalogs_releases_in_it() -> None:
    want = wanted(_spec("Standard"))
    keys = [k for k in watch_keys(want, SERVED) if k.api.resource == "secrets"]
    (ai_gateway,) = [k for k in keys if k.namespace == "envoy-ai-gateway-system"]
    assert ai_gateway.labels is not None
    assert "name in (mp-ai-gateway-crds-helm,mp-ai-gateway-helm)" in ai_gateway.labels
    assert ai_gateway.labels.startswith("owner=helm,")


def test_a_look_alike_outside_its_release_namespace_is_no_release() -> None:
    name, namespace = next(iter(sorted(RELEASE_NAMESPACES.items())))
    secret = {
        "metadata": {
            "name": f"sh.helm.release.v1.{name}.v2",
            "namespace": namespace,
            "labels": {"owner": "helm", "name": name, "version": "2", "status": "deployed"},
        }
    }
    assert release_of(secret) is not None
    secret["metadata"]["namespace"] = "tenant-a"
    assert release_of(secret) is None
