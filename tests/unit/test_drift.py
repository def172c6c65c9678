"""The drift verdict: the fields an applied object carries that the operator no longer owns.

``tests/fixtures/drift/managed-fields.json`` holds, per object, the body the
operator applied and the fieldsV1 a real kube-apiserver (v1.34) recorded for
its field manager, over the upstream CRDs (Gateway API with listeners keyed
by name, Envoy Gateway, KAI, cert-manager); ``edited`` is the same after a
hand edit by another field manager: the Gateway's listeners replaced with a
PUT, the EnvoyProxy's service settings and a Queue's GPU quota changed with
merge patches. Captured, not written by hand, so the verdict is held to what
the server really records, defaulting included.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.catalog.configuration import TeardownWave
from modelplane.plan import Observed, plan
from modelplane.plan.drift import drifted_fields, owned_fields
from modelplane.plan.model import ObjectAction, PlannedObject, work_left
from modelplane.wire import FIELD_MANAGER

from .conftest import StackFactory, installed

CAPTURED: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "drift" / "managed-fields.json").read_text()
)
GATEWAY = "gateway.networking.k8s.io/v1/Gateway/modelplane-system/inference-gateway"
ENVOY_PROXY = "gateway.envoyproxy.io/v1alpha1/EnvoyProxy/modelplane-system/inference-gateway"
QUEUE = "scheduling.run.ai/v2/Queue/modelplane"
SERVICE = "v1/Service/default/modelexpress-server"
DEPLOYMENT = "apps/v1/Deployment/default/modelexpress-server"


@pytest.mark.parametrize("key", sorted(CAPTURED))
def test_an_object_as_applied_has_no_drift(key: str) -> None:
    # Includes what the server defaults: a Service port's and a container
    # port's protocol land in the list key, k:{"port":8001,"protocol":"TCP"},
    # though the body never sets it.
    captured = CAPTURED[key]
    assert drifted_fields(captured["body"], captured["owned"]) == []


@pytest.mark.parametrize(
    ("key", "drift"),
    [
        # The PUT replaced the listeners: ours are gone, the editor owns its own.
        (GATEWAY, ["spec.listeners[name=http]", "spec.listeners[name=https]"]),
        (ENVOY_PROXY, ["spec.provider.kubernetes.envoyService.externalTrafficPolicy"]),
        (QUEUE, ["spec.resources.gpu.quota"]),
    ],
)
def test_a_hand_edit_by_another_manager_is_drift_on_exactly_the_fields_it_changed(
    key: str, drift: list[str]
) -> None:
    captured = CAPTURED[key]
    assert drifted_fields(captured["body"], captured["edited"]) == drift


def _without(node: dict[str, Any], *path: str) -> dict[str, Any]:
    """``node`` without the field at ``path``, as the server records it.

    A node left with no member below it goes too: the server keeps none, and
    a bare {} would read as "owned as a whole".
    """
    out = copy.deepcopy(node)
    parents = [out]
    for step in path[:-1]:
        parents.append(parents[-1][step])
    del parents[-1][path[-1]]
    for parent, step in reversed(list(zip(parents[:-1], path[:-1], strict=True))):
        if not parent[step]:
            del parent[step]
    return out


def test_one_field_of_one_listener_taken_is_named_by_the_listener_key() -> None:
    # A merge patch of one listener's port moves only f:port to the editor.
    captured = CAPTURED[GATEWAY]
    owned = _without(captured["owned"], "f:spec", "f:listeners", 'k:{"name":"https"}', "f:port")
    assert drifted_fields(captured["body"], owned) == ["spec.listeners[name=https].port"]


def test_a_list_item_matches_its_key_with_a_server_defaulted_key_field() -> None:
    service = CAPTURED[SERVICE]
    assert 'k:{"port":8001,"protocol":"TCP"}' in service["owned"]["f:spec"]["f:ports"]
    assert "protocol" not in service["body"]["spec"]["ports"][0]
    assert drifted_fields(service["body"], service["owned"]) == []
    key = 'k:{"port":8001,"protocol":"TCP"}'
    owned = _without(service["owned"], "f:spec", "f:ports", key, "f:targetPort")
    assert drifted_fields(service["body"], owned) == [
        "spec.ports[port=8001,protocol=TCP].targetPort"
    ]
    # The last port gone takes the list's node with it: named by its name.
    owned = _without(service["owned"], "f:spec", "f:ports", key)
    assert drifted_fields(service["body"], owned) == ["spec.ports[name=grpc]"]


def test_a_field_owned_as_a_whole_covers_everything_under_it() -> None:
    # Schemaless CRDs (x-kubernetes-preserve-unknown-fields) make every list
    # atomic, and a Service's selector is an atomic map: one {} node.
    body = CAPTURED[GATEWAY]["body"]
    owned = {"f:metadata": CAPTURED[GATEWAY]["owned"]["f:metadata"]}
    atomic = {**owned, "f:spec": {"f:gatewayClassName": {}, "f:listeners": {}}}
    assert drifted_fields(body, atomic) == []
    taken = {**owned, "f:spec": {"f:gatewayClassName": {}}}
    assert drifted_fields(body, taken) == [
        "spec.listeners[name=http]",
        "spec.listeners[name=https]",
    ]


def test_the_label_and_digest_annotation_are_owned_fields_too() -> None:
    captured = CAPTURED[QUEUE]
    owned = _without(captured["owned"], "f:metadata", "f:annotations")
    assert drifted_fields(captured["body"], owned) == ["metadata.annotations.modelplane.ai/digest"]


def test_a_deployment_container_field_taken_is_named_through_both_keys() -> None:
    captured = CAPTURED[DEPLOYMENT]
    owned = _without(
        captured["owned"],
        *("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"server"}', "f:image"),
    )
    assert drifted_fields(captured["body"], owned) == [
        "spec.template.spec.containers[name=server].image"
    ]


def test_owned_fields_are_the_managers_applied_fields_on_the_main_resource() -> None:
    metadata = {
        "managedFields": [
            {
                "manager": FIELD_MANAGER,
                "operation": "Apply",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:a": {}}},
            },
            # Another apiVersion of the same object: one set, two entries.
            {
                "manager": FIELD_MANAGER,
                "operation": "Apply",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:b": {}}},
            },
            {
                "manager": FIELD_MANAGER,
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:c": {}}},
            },
            {
                "manager": FIELD_MANAGER,
                "operation": "Apply",
                "subresource": "status",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {}},
            },
            {
                "manager": "kubectl-edit",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:d": {}}},
            },
        ]
    }
    assert owned_fields(metadata, FIELD_MANAGER) == {"f:spec": {"f:a": {}, "f:b": {}}}
    assert owned_fields({}, FIELD_MANAGER) == {}


# -- the plan -------------------------------------------------------------------------------

# What the server records for the default Gateway (one HTTP listener), as applied.
DEFAULT_GATEWAY_OWNED = {
    "f:metadata": {
        "f:annotations": {"f:modelplane.ai/digest": {}},
        "f:labels": {"f:app.kubernetes.io/managed-by": {}},
    },
    "f:spec": {
        "f:gatewayClassName": {},
        "f:listeners": {
            'k:{"name":"http"}': {
                ".": {},
                "f:allowedRoutes": {"f:namespaces": {"f:from": {}}},
                "f:name": {},
                "f:port": {},
                "f:protocol": {},
            }
        },
    },
}


def _gateway(p: Any) -> PlannedObject:
    return next(o for o in p.objects if o.key == GATEWAY)


def _converged(make_stack: StackFactory, serve_everything: Any, owned: Any) -> Any:
    stack = make_stack()
    before: Observed = installed(plan(stack, serve_everything()), serve_everything())
    return plan(stack, before.model_copy(update={"owned": {GATEWAY: owned}}))


def test_the_plan_reapplies_an_object_whose_owned_fields_were_taken(
    make_stack: StackFactory, serve_everything: Any
) -> None:
    owned = _without(DEFAULT_GATEWAY_OWNED, "f:spec", "f:listeners", 'k:{"name":"http"}', "f:port")
    gateway = _gateway(_converged(make_stack, serve_everything, owned))
    assert gateway.action is ObjectAction.APPLY
    assert gateway.drift == ["spec.listeners[name=http].port"]
    assert gateway.shown == "Gateway modelplane-system/inference-gateway"
    p = _converged(make_stack, serve_everything, owned)
    assert [w.what for w in p.work] == [
        "modelplane-system/inference-gateway: restore spec.listeners[name=http].port"
    ]


def test_the_plan_leaves_an_object_whose_owned_fields_are_all_there(
    make_stack: StackFactory, serve_everything: Any
) -> None:
    p = _converged(make_stack, serve_everything, DEFAULT_GATEWAY_OWNED)
    assert _gateway(p).action is ObjectAction.NONE
    assert _gateway(p).drift == []
    assert p.work == []


def test_without_observed_ownership_the_digest_alone_decides(
    make_stack: StackFactory, serve_everything: Any
) -> None:
    # render --observed files written before ownership was observed.
    stack = make_stack()
    p = plan(stack, installed(plan(stack, serve_everything()), serve_everything()))
    assert _gateway(p).action is ObjectAction.NONE
    assert work_left(p.releases, p.manifests, p.objects) == []


def test_an_object_owning_nothing_is_drift_on_everything_it_sets(
    make_stack: StackFactory, serve_everything: Any
) -> None:
    gateway = _gateway(_converged(make_stack, serve_everything, {}))
    assert gateway.action is ObjectAction.APPLY
    assert gateway.drift == [
        "metadata.labels.app.kubernetes.io/managed-by",
        "metadata.annotations.modelplane.ai/digest",
        "spec.gatewayClassName",
        "spec.listeners[name=http]",
    ]


def test_drift_goes_with_action_apply_only() -> None:
    with pytest.raises(ValidationError, match="drift goes with action apply"):
        PlannedObject(
            key="v1/ConfigMap/ns/x",
            component="configuration",
            object={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            needs=[],
            action=ObjectAction.NONE,
            teardown_wave=TeardownWave.THIRD,
            drift=["data.x"],
        )
