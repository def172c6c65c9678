"""Whether a component has work left: one rule, read by status, component states and failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from modelplane.catalog.configuration import ConfigObject, Hold
from modelplane.operator.component_failures import ComponentFailures
from modelplane.plan import Observed, plan
from modelplane.plan.model import ObjectAction, PlannedObject

from .conftest import CA_PEM, StackFactory, installed

HOST = "west.example.com"
CAS = [{"name": "fleet", "certificate": CA_PEM}]
ServeAll = Callable[..., Observed]


def without_api(observed: Observed, group: str, resource: str) -> Observed:
    apis = {g: dict(rs) for g, rs in observed.apis.items()}
    del apis[group][resource]
    return observed.model_copy(update={"apis": apis})


def failures() -> ComponentFailures:
    # Forgetting failures reads the plan only: nothing here reaches a cluster.
    return ComponentFailures(emit=lambda *_: None)


def test_a_failure_stands_while_its_object_waits_for_its_api(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    stack = make_stack()
    base = serve_everything()
    # Everything in place, then the Gateway API goes away: the Gateway waits.
    done = installed(plan(stack, base), base)
    p = plan(stack, without_api(done, "gateway.networking.k8s.io", "gateways"))
    assert p.components_with_work == {"configuration"}
    assert p.pending == [
        "modelplane-system/inference-gateway: waits for the target to serve "
        "gateways.gateway.networking.k8s.io/v1"
    ]

    r = failures()
    r.failures = {"configuration": "apply failed", "cert-manager": "install failed"}
    r.forget_finished(p)
    # cert-manager has nothing left to do; the configuration is not done.
    assert r.failures == {"configuration": "apply failed"}


def test_withheld_objects_are_no_work_left(
    make_stack: StackFactory, serve_everything: ServeAll
) -> None:
    stack = make_stack(gateway={"clientCAs": CAS})  # no hostname: the policy is withheld
    base = serve_everything()
    p = plan(stack, installed(plan(stack, base), base))
    [policy] = [o for o in p.objects if o.object["kind"] == "ClientTrafficPolicy"]
    assert (policy.action, policy.hold) == (ObjectAction.HOLD, Hold.WITHHELD)
    assert p.components_with_work == set()
    r = failures()
    r.failures = {"configuration": "apply failed"}
    r.forget_finished(p)
    assert r.failures == {}


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"stack": "Dynamo", "gateway": {"hostname": HOST, "clientCAs": CAS}},
        {"nvidiaDriverRoot": "/home/kubernetes/bin/nvidia", "gateway": {"hostname": HOST}},
        {"components": "Provided", "stack": "Dynamo"},
    ],
)
@pytest.mark.parametrize("progress", ["nothing", "served", "installed", "api-gone"])
def test_component_states_status_and_failures_agree(
    make_stack: StackFactory, serve_everything: ServeAll, fields: dict[str, Any], progress: str
) -> None:
    stack = make_stack(**fields)
    observed = {
        "nothing": lambda: Observed(),
        "served": serve_everything,
        "installed": lambda: installed(plan(stack, serve_everything()), serve_everything()),
        "api-gone": lambda: without_api(
            installed(plan(stack, serve_everything()), serve_everything()),
            "scheduling.run.ai",
            "queues",
        ),
    }[progress]()
    p = plan(stack, observed)
    busy = p.components_with_work
    for c in p.components:
        if c.mode == "Managed":
            assert (c.state in ("Pending", "Waiting")) == (c.name in busy), (c.name, c.state)
        else:
            assert c.name not in busy, c.name  # a provided component is only checked
    assert len(p.pending) == len(p.work)
    assert bool(p.pending) == bool(busy)


def test_a_hold_goes_with_action_hold_and_a_reason(make_stack: StackFactory) -> None:
    [gateway] = [o for o in plan(make_stack()).objects if o.object["kind"] == "Gateway"]
    assert gateway.hold is Hold.WAITING_FOR_API
    fields = gateway.model_dump()
    for broken in (
        {"hold": None},
        {"hold_reason": None},
        {"action": ObjectAction.APPLY},
    ):
        with pytest.raises(ValidationError, match="hold"):
            PlannedObject.model_validate({**fields, **broken})
    with pytest.raises(ValueError, match="reason"):
        ConfigObject(gateway.object, hold=Hold.WITHHELD)
