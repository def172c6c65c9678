"""What ``kubectl wait --for=condition=Ready`` and a kstatus reading give, state by state.

Each state's status is the one the operator writes for it (operator.status),
stored through the real API server's status subresource under the generated
CRD and read back, so what is judged is what a tool reading the hub gets.

``kstatus`` below is kstatus's documented rule for a custom resource with
no type-specific rule (cli-utils pkg/kstatus/README.md, "Conditions" and
"The Ready Condition"; pkg/kstatus/status/generic.go): a generation not
yet observed is InProgress; Reconciling=True is InProgress; Stalled=True is
Failed; else Ready decides (True: Current, False: InProgress), and no Ready
at all is Current.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client
from lightkube.types import PatchType
from tests.integration.hubs import SS, ensure_namespace, namespace_for, put_stack, stack_body

from modelplane.operator.status import (
    READY,
    Outcome,
    bounded,
    condition,
    desired_status,
    progress_conditions,
)
from modelplane.vocabulary import BlockedReason, ReadyReason


def kstatus(obj: dict[str, Any]) -> str:
    """Current, InProgress or Failed (Terminating left out: nothing here is deleted)."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    if observed is not None and observed != obj["metadata"]["generation"]:
        return "InProgress"
    conditions = status.get("conditions") or []
    for c in conditions:
        if c["type"] == "Reconciling" and c["status"] == "True":
            return "InProgress"
        if c["type"] == "Stalled" and c["status"] == "True":
            return "Failed"
    ready = next((c for c in conditions if c["type"] == "Ready"), None)
    if ready is None or ready["status"] == "True":
        return "Current"
    return "InProgress"


def kubectl_wait_returns(obj: dict[str, Any]) -> bool:
    """``kubectl wait --for=condition=Ready`` returns once Ready's status is True, not before."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _ready(generation: int) -> dict[str, Any]:
    ready = condition(READY, True, ReadyReason.RECONCILED, "every release is in place", generation)
    return {
        "observedGeneration": generation,
        "conditions": [ready, *progress_conditions(ready, False, generation)],
    }


STATES: dict[str, Any] = {
    "progressing": lambda g: desired_status(
        Outcome(blocked_reason=BlockedReason.WEBHOOK_NOT_READY, blocked_message="cert-manager"), g
    ),
    "ready": _ready,
    "stalled": lambda g: desired_status(
        Outcome(blocked_reason=BlockedReason.INVALID_SPEC, blocked_message="spec.x"), g
    ),
    "refused CRD": lambda g: desired_status(
        Outcome(failures={"grove": "CRD upgrade refused"}, refused=frozenset({"grove"})), g
    ),
}


def _stored(hub: Client, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
    hub.patch(
        SS.Status,
        "stack",
        {"status": bounded(status)},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    obj: dict[str, Any] = hub.get(SS, "stack", namespace=namespace).to_dict()
    return obj


@pytest.mark.parametrize(
    ("state", "wait_returns", "reading"),
    [
        ("progressing", False, "InProgress"),
        ("ready", True, "Current"),
        ("stalled", False, "Failed"),
        ("refused CRD", False, "Failed"),
    ],
)
def test_each_state_as_kubectl_wait_and_kstatus_read_it(
    hub: Client, request: pytest.FixtureRequest, state: str, wait_returns: bool, reading: str
) -> None:
    namespace = namespace_for("kstatus", request.node.name)
    ensure_namespace(hub, namespace)
    put_stack(hub, stack_body(namespace))
    generation = hub.get(SS, "stack", namespace=namespace).metadata.generation
    obj = _stored(hub, namespace, STATES[state](generation))
    assert kubectl_wait_returns(obj) is wait_returns
    assert kstatus(obj) == reading
    # Every one of the three carries the generation it speaks of.
    kinds = {c["type"]: c["observedGeneration"] for c in obj["status"]["conditions"]}
    assert {kinds[t] for t in ("Ready", "Reconciling", "Stalled")} == {generation}


def test_a_spec_edit_not_yet_seen_is_in_progress_though_ready_says_true(
    hub: Client, request: pytest.FixtureRequest
) -> None:
    namespace = namespace_for("kstatus", request.node.name)
    ensure_namespace(hub, namespace)
    put_stack(hub, stack_body(namespace))
    generation = hub.get(SS, "stack", namespace=namespace).metadata.generation
    _stored(hub, namespace, _ready(generation))
    put_stack(hub, stack_body(namespace, spec={"components": "Provided"}))
    obj: dict[str, Any] = hub.get(SS, "stack", namespace=namespace).to_dict()
    assert obj["metadata"]["generation"] == generation + 1
    # kubectl wait looks at Ready alone: it returns on the old generation's word.
    assert kubectl_wait_returns(obj)
    assert kstatus(obj) == "InProgress"
