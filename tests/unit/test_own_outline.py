"""observe.own_outline: the watches keep of the product's own objects what a plan reads.

Kept whole, every target's Gateway, GatewayClass, EnvoyProxy and Namespace
held their spec and every controller's managedFields, read by nothing.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from modelplane.catalog.configuration import GATEWAY_NAME, NS
from modelplane.observe.own_outline import own_outline
from modelplane.observe.state import Listed, to_observed
from modelplane.wire import DIGEST_ANNOTATION, FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL

GATEWAY = ("gateway.networking.k8s.io/v1", "Gateway")


def _entry(manager: str, operation: str, fields: dict[str, Any], **more: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": GATEWAY[0],
        "time": "2026-12-06T09:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


def _gateway(name: str = GATEWAY_NAME, time: str = "2026-12-06T09:00:00Z") -> dict[str, Any]:
    ours = {"f:spec": {"f:gatewayClassName": {}, "f:listeners": {'k:{"name":"http"}': {}}}}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "resourceVersion": "41",
            "uid": "u-1",
            "generation": 3,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {DIGEST_ANNOTATION: "d1", "other": "x" * 500},
            "managedFields": [
                {**_entry(FIELD_MANAGER, "Apply", ours), "time": time},
                _entry(
                    "envoy-gateway",
                    "Update",
                    {"f:status": {"f:addresses": {}}},
                    subresource="status",
                ),
                _entry("kubectl-edit", "Update", {"f:spec": {"f:listeners": {}}}),
            ],
        },
        "spec": {"gatewayClassName": "envoy", "listeners": [{"name": "http", "port": 80}] * 20},
        "status": {
            "addresses": [{"type": "IPAddress", "value": "10.0.0.7"}],
            "conditions": [
                {"type": "Programmed", "status": "True", "reason": "Programmed", "message": "ok"},
                {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"},
            ],
            "listeners": [{"name": "http", "attachedRoutes": 1, "conditions": []}] * 20,
        },
    }


@pytest.mark.parametrize(
    "obj",
    [
        _gateway(),
        _gateway(name="tenants-own"),
        {"metadata": {"name": "ns-only"}},
        {"metadata": {"name": "odd", "managedFields": "not a list", "annotations": []}},
        {},
    ],
)
def test_what_observe_reads_of_the_outline_is_what_it_reads_of_the_whole(
    obj: dict[str, Any],
) -> None:
    whole = to_observed(Listed(apis={}, items={GATEWAY: [obj]}))
    outlined = to_observed(Listed(apis={}, items={GATEWAY: [own_outline(obj)]}))
    assert outlined == whole


def test_the_outline_keeps_no_spec_and_only_the_operators_managed_fields() -> None:
    gateway = _gateway()
    kept = own_outline(gateway)
    assert "spec" not in kept
    assert [e["manager"] for e in kept["metadata"]["managedFields"]] == [FIELD_MANAGER]
    assert kept["metadata"]["resourceVersion"] == "41"
    assert kept["metadata"]["annotations"] == {DIGEST_ANNOTATION: "d1"}
    assert set(kept["status"]) == {"addresses", "conditions"}
    assert len(json.dumps(kept)) * 4 < len(json.dumps(gateway))


def test_what_every_target_shares_is_kept_once() -> None:
    # The same objects applied to two targets at other times: one copy of
    # the operator's entry and labels for both.
    one, two = own_outline(_gateway()), own_outline(_gateway(time="2026-12-06T10:00:00Z"))
    assert one["metadata"]["managedFields"][0] is two["metadata"]["managedFields"][0]
    assert one["metadata"]["labels"] is two["metadata"]["labels"]


def test_the_outline_leaves_the_object_as_it_was() -> None:
    gateway = _gateway()
    before = copy.deepcopy(gateway)
    own_outline(gateway)
    assert gateway == before
