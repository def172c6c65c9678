"""Hand edits of what the operator owns are taken back; a stack without drift is left alone.

A Provided Dynamo stack on a target that serves the upstream Gateway API,
EnvoyProxy and KAI Queue CRDs (so the Gateway's listeners are a list keyed
by name, as on a real cluster) and the project's minimal CRDs for the rest.
The test edits objects the way ``kubectl edit`` / ``patch`` / ``replace``
do: Update operations under another field manager. The operator runs with a
short resync, so a correction does not depend on which kinds are watched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.generic_resource import (
    create_global_resource,
    create_namespaced_resource,
    load_in_cluster_generic_resources,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType
from tests.integration.hubs import Harness, HarnessOptions, client_for, crd_established
from tests.shared_fixtures import upstream_dir, yaml_docs
from tests.testenv import TestEnv
from tests.waiting import wait_for

from modelplane.api.models import ServingStack
from modelplane.catalog.configuration import (
    ENVOY_PROXY_NAME,
    GATEWAY_NAME,
    KAI_QUEUE,
    NS,
    configuration_for,
)
from modelplane.operator.stack_actions import DRIFT_CORRECTED
from modelplane.wire import MANAGED_BY, MANAGED_BY_LABEL

ROOT = Path(__file__).resolve().parents[2]
PROJECT_CRDS = ROOT / "tests" / "fixtures" / "crds"
UPSTREAM = upstream_dir()
UPSTREAM_CRDS = [
    UPSTREAM / "envoy-gateway" / "gatewayapi-crds.yaml",
    UPSTREAM / "envoy-gateway" / "gateway.envoyproxy.io_envoyproxies.yaml",
    UPSTREAM / "kai-scheduler" / "scheduling.run.ai_queues.yaml",
]
GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
ENVOY_PROXY = create_namespaced_resource(
    "gateway.envoyproxy.io", "v1alpha1", "EnvoyProxy", "envoyproxies"
)
QUEUE = create_global_resource("scheduling.run.ai", "v2", "Queue", "queues")
SPEC = {"stack": "Dynamo", "components": "Provided"}
RESYNC = "2"
# Bounds on how long the test may hang on two shared cores, not speed claims.
READY_DEADLINE = 180.0
DEADLINE = 60.0
EDITOR = "kubectl-edit"
# One hub namespace per test: a stack left by another test must not answer for this one.
HARNESS = HarnessOptions(prefix="drift")


def _resource(body: dict[str, Any]) -> Any:
    """lightkube's class for a body's kind: a built-in model, or a CRD's once loaded."""
    return codecs.resource_registry.load(body["apiVersion"], body["kind"])


def _load_target(target: TestEnv) -> None:
    """The project's CRDs and DeviceClass, with the upstream CRDs of the edited kinds."""
    for path in UPSTREAM_CRDS:
        if not path.is_file():
            pytest.skip(f"shared upstream fixtures are absent ({path})")
    docs: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*sorted(PROJECT_CRDS.glob("*.yaml")), *UPSTREAM_CRDS]:
        for doc in yaml_docs(path):
            # Later files win: the upstream CRD replaces the schemaless stand-in.
            if isinstance(doc, dict) and doc.get("kind") in (
                "CustomResourceDefinition",
                "DeviceClass",
            ):
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    client = client_for(target)
    for (kind, name), doc in docs.items():
        res = CustomResourceDefinition if kind == "CustomResourceDefinition" else _resource(doc)
        client.apply(res.from_dict(doc), name=name, force=True)
    for kind, name in docs:
        if kind == "CustomResourceDefinition":
            wait_for(
                f"CRD {name} established",
                lambda n=name: crd_established(client, n),
                deadline=DEADLINE,
            )


@pytest.fixture
def harness(harness: Harness, target: TestEnv) -> Harness:
    _load_target(target)
    return harness


def _owned_objects(target: Client) -> dict[str, str]:
    """resourceVersion of every configuration object, by kind/namespace/name."""
    stack = ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": "stack", "namespace": "t-drift"},
            "spec": {"secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}], **SPEC},
        }
    )
    out: dict[str, str] = {}
    # The kinds the server serves, as its CRDs say, for the lookups below.
    load_in_cluster_generic_resources(target)
    for obj in configuration_for(stack.spec):
        meta = obj.body["metadata"]
        live = target.get(_resource(obj.body), meta["name"], namespace=meta.get("namespace"))
        assert live.metadata is not None
        assert (live.metadata.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        out[obj.key] = str(live.metadata.resourceVersion)
    return out


def _drift_events(h: Harness) -> list[str]:
    with h.hub_env.http_client() as http:
        items = http.get(f"/api/v1/namespaces/{h.ns}/events").json()["items"]
    return [
        e["message"]
        for e in items
        if e["reason"] == DRIFT_CORRECTED and e["type"] == "Normal"
        # One Event object may stand for several if anything counted them.
        for _ in range(int(e.get("count") or 1))
    ]


def _resyncs(h: Harness, count: int) -> None:
    start = h.reconciles()
    wait_for(f"{count} more reconciles", lambda: h.reconciles() >= start + count, deadline=DEADLINE)


def _ready(h: Harness) -> str:
    condition = h.wait_condition("Ready", "True", deadline=READY_DEADLINE)
    return str(condition["lastTransitionTime"])


def test_a_stack_without_drift_writes_nothing_and_reports_no_drift(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create(SPEC)
    harness.start("--resync", RESYNC)
    _ready(harness)
    # The first resync after Ready may still finish what the last round did.
    _resyncs(harness, 1)
    versions = _owned_objects(harness.target)
    writes = harness.target_env.write_requests()

    _resyncs(harness, 4)

    assert harness.target_env.write_requests() == writes
    assert _owned_objects(harness.target) == versions
    assert _drift_events(harness) == []


def _listeners(target: Client) -> list[dict[str, Any]]:
    gateway = target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    return list(gateway["spec"]["listeners"])


def test_hand_edits_of_owned_fields_are_restored_and_reported(harness: Harness) -> None:
    harness.put_secret({"kubeconfig": harness.kubeconfig_text()})
    harness.create(SPEC)
    harness.start("--resync", RESYNC)
    became_ready = _ready(harness)
    target = client_for(harness.target_env, field_manager=EDITOR)
    ours = _listeners(target)
    assert [listener["name"] for listener in ours] == ["http"]

    # kubectl edit replacing the listeners: a PUT of the whole object.
    gateway = target.get(GATEWAY, GATEWAY_NAME, namespace=NS).to_dict()
    gateway["spec"]["listeners"] = [{"name": "edited", "port": 8080, "protocol": "HTTP"}]
    target.replace(GATEWAY.from_dict(gateway), field_manager=EDITOR)
    # kubectl patch of the EnvoyProxy's service settings and of a queue's quota.
    target.patch(
        ENVOY_PROXY,
        ENVOY_PROXY_NAME,
        {
            "spec": {
                "provider": {"kubernetes": {"envoyService": {"externalTrafficPolicy": "Local"}}}
            }
        },
        namespace=NS,
        patch_type=PatchType.MERGE,
        field_manager=EDITOR,
    )
    target.patch(
        QUEUE,
        KAI_QUEUE,
        {"spec": {"resources": {"gpu": {"quota": 4}}}},
        patch_type=PatchType.MERGE,
        field_manager=EDITOR,
    )

    def restored() -> bool:
        by_name = {listener["name"]: listener for listener in _listeners(target)}
        proxy = target.get(ENVOY_PROXY, ENVOY_PROXY_NAME, namespace=NS).to_dict()
        service = proxy["spec"]["provider"]["kubernetes"]["envoyService"]
        queue = target.get(QUEUE, KAI_QUEUE).to_dict()
        return (
            by_name.get("http") == ours[0]
            and service["externalTrafficPolicy"] == "Cluster"
            and queue["spec"]["resources"]["gpu"]["quota"] == -1
        )

    wait_for("the hand edits undone", restored, deadline=DEADLINE)
    # The listener the editor added is its own field, not the operator's:
    # server-side apply leaves it, as it leaves any other manager's.
    assert [listener["name"] for listener in _listeners(target)] == ["edited", "http"]

    expected = [
        f"restored Gateway {NS}/{GATEWAY_NAME}: spec.listeners[name=http]",
        f"restored EnvoyProxy {NS}/{ENVOY_PROXY_NAME}: "
        "spec.provider.kubernetes.envoyService.externalTrafficPolicy",
        f"restored Queue {KAI_QUEUE}: spec.resources.gpu.quota",
    ]
    wait_for(
        "a DriftCorrected event per object",
        lambda: sorted(_drift_events(harness)) == sorted(expected),
        deadline=DEADLINE,
    )
    # Once per correction: the resyncs after it find nothing to restore.
    _resyncs(harness, 3)
    assert sorted(_drift_events(harness)) == sorted(expected)
    # Ready never left True: the correction is not news in the status.
    assert harness.condition("Ready")["status"] == "True"
    assert harness.condition("Ready")["lastTransitionTime"] == became_ready
