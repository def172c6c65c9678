"""The status a reconcile reports, from the plan and what went wrong."""

from __future__ import annotations

import yaml

from modelplane.api.models import ServingStack
from modelplane.operator.status import (
    Outcome,
    desired_status,
    merge_conditions,
    status_changed,
)
from modelplane.plan import Observed, plan
from modelplane.wire import ApiRef

STACK = ServingStack.model_validate(
    yaml.safe_load("""
apiVersion: infrastructure.modelplane.ai/v1alpha1
kind: ServingStack
metadata: {name: s, namespace: ns, generation: 3}
spec:
  components: Provided
  secrets: [{type: Kubeconfig, name: k, key: kubeconfig}]
""")
)


def _conditions(status: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[attr-defined, index]


def test_unmet_requirements_all_listed_and_ready_false() -> None:
    status = desired_status(Outcome(plan=plan(STACK)), 3)
    conditions = _conditions(status)
    assert conditions["RequirementsMet"]["status"] == "False"
    message = str(conditions["RequirementsMet"]["message"])
    assert "certificates.cert-manager.io" in message
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in message
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["observedGeneration"] == 3


def test_blocked_reconcile_names_the_reason() -> None:
    outcome = Outcome(blocked_reason="SecretNotFound", blocked_message="Secret ns/k is missing")
    conditions = _conditions(desired_status(outcome, 1))
    assert conditions["Ready"] == {
        "type": "Ready",
        "status": "False",
        "reason": "SecretNotFound",
        "message": "Secret ns/k is missing",
        "observedGeneration": 1,
    }


def test_failures_win_over_progress_and_mark_the_component() -> None:
    outcome = Outcome(plan=plan(STACK), failures={"cert-manager": "install failed: boom"})
    status = desired_status(outcome, 1)
    assert _conditions(status)["Ready"]["reason"] == "ActionFailed"
    components = {c["name"]: c for c in status["components"]}  # type: ignore[attr-defined]
    assert components["cert-manager"]["state"] == "Failed"


def test_everything_served_is_ready() -> None:
    served = Observed(
        apis={
            group: {api.resource: [api.version] for api in apis}
            for group, apis in _by_group().items()
        },
        objects={"resource.k8s.io/v1/deviceclasses": ["gpu.nvidia.com"]},
    )
    p = plan(STACK, served)
    applied = {
        o.key: o.object["metadata"]["annotations"]["modelplane.ai/digest"] for o in p.objects
    }
    status = desired_status(
        Outcome(plan=plan(STACK, served.model_copy(update={"applied": applied}))), 3
    )
    conditions = _conditions(status)
    assert conditions["RequirementsMet"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True", conditions["Ready"]


def _by_group() -> dict[str, list[ApiRef]]:
    from modelplane.catalog.components import COMPONENTS
    from modelplane.catalog.configuration import configuration_for

    apis: set[ApiRef] = set()
    for component in COMPONENTS:
        apis |= {r.api for r in component.requirements}
    for obj in configuration_for(STACK.spec):
        apis |= set(obj.needs)
    out: dict[str, list[ApiRef]] = {}
    for api in apis:
        out.setdefault(api.group, []).append(api)
    return out


def test_transition_time_kept_while_status_holds() -> None:
    old = [{"type": "Ready", "status": "False", "lastTransitionTime": "T0"}]
    same = merge_conditions([{"type": "Ready", "status": "False"}], old, "T1")
    flipped = merge_conditions([{"type": "Ready", "status": "True"}], old, "T1")
    assert same[0]["lastTransitionTime"] == "T0"
    assert flipped[0]["lastTransitionTime"] == "T1"


def test_unchanged_status_is_not_written() -> None:
    current = {"observedGeneration": 1, "conditions": [{"type": "Ready"}], "extra": 1}
    assert not status_changed(current, {"observedGeneration": 1, "conditions": [{"type": "Ready"}]})
    assert status_changed(current, {"observedGeneration": 2, "conditions": [{"type": "Ready"}]})


def test_an_unverified_target_certificate_is_a_condition_for_as_long_as_it_stands() -> None:
    warning = "the kubeconfig sets insecure-skip-tls-verify"
    insecure = _conditions(desired_status(Outcome(connection_warnings=(warning,)), 1))
    assert insecure["TargetVerified"]["status"] == "False"
    assert insecure["TargetVerified"]["reason"] == "InsecureSkipTLSVerify"
    assert warning in insecure["TargetVerified"]["message"]
    verified = _conditions(desired_status(Outcome(connection_warnings=()), 1))
    assert verified["TargetVerified"]["status"] == "True"
    # Nothing is said of a connection this round never made.
    assert "TargetVerified" not in _conditions(desired_status(Outcome(), 1))
