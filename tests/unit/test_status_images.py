"""The status says which mirror rules are in force and which pull Secrets are missing."""

from __future__ import annotations

from typing import Any

from modelplane.api import status_limits
from modelplane.api.crd import servingstack_crd
from modelplane.api.models import ServingStack
from modelplane.operator.status import (
    PULL_SECRETS_PRESENT,
    Outcome,
    bounded,
    desired_status,
)
from modelplane.plan.pull_secrets import MissingPullSecret

from .test_status_limits import STACK, _conforms, _status_schema


def _plan(**update: Any) -> Any:
    from modelplane.plan import Observed, plan

    return plan(STACK, Observed()).model_copy(update=update)


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_the_rules_in_force_are_in_the_status() -> None:
    rules = ["*=mirror.internal", "nvcr.io=mirror.internal/nvcr"]
    status = bounded(desired_status(Outcome(plan=_plan(image_mirrors=rules)), 3))
    assert status["imageMirrors"] == rules
    _conforms(status, _status_schema())
    # And the hub's model reads them back.
    body = {**STACK.model_dump(mode="json", by_alias=True), "status": status}
    assert ServingStack.model_validate(body).status is not None


def test_without_rules_there_is_no_field() -> None:
    status = desired_status(Outcome(plan=_plan()), 3)
    assert status["imageMirrors"] is None
    assert PULL_SECRETS_PRESENT not in _conditions(status)


def test_more_rules_than_the_list_holds_say_how_many_more() -> None:
    limit = status_limits.LISTS["imageMirrors"]
    rules = [f"r{i}.example={'m' * 600}.internal" for i in range(limit + 5)]
    status = bounded(desired_status(Outcome(plan=_plan(image_mirrors=rules)), 3))
    _conforms(status, _status_schema())
    assert len(status["imageMirrors"]) == limit
    assert status["imageMirrors"][-1] == "and 6 more"


def test_missing_pull_secrets_are_a_condition_that_never_stops_ready() -> None:
    missing = [
        MissingPullSecret(component="cert-manager", secret="regcred", namespace="cert-manager")
    ]
    p = _plan(image_pull_secrets=["regcred"], missing_pull_secrets=missing)
    status = bounded(desired_status(Outcome(plan=p), 3))
    _conforms(status, _status_schema())
    cond = _conditions(status)[PULL_SECRETS_PRESENT]
    assert (cond["status"], cond["reason"]) == ("False", "PullSecretMissing")
    assert cond["message"] == "cert-manager: regcred in cert-manager"
    present = bounded(desired_status(Outcome(plan=_plan(image_pull_secrets=["regcred"])), 3))
    cond = _conditions(present)[PULL_SECRETS_PRESENT]
    assert (cond["status"], cond["reason"]) == ("True", "Present")


def test_the_crd_bounds_the_new_field() -> None:
    root = servingstack_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = root["properties"]["status"]["properties"]["imageMirrors"]
    assert field["maxItems"] == status_limits.LISTS["imageMirrors"]
    assert field["items"]["maxLength"] == status_limits.STRINGS["imageMirrors[]"]


def test_a_component_whose_chart_reads_no_pull_secret_says_so_in_its_status() -> None:
    # grove-charts at its pin reads no pull-secret value: the operator's status
    # says its pods pull without one, where each component's state is read.
    from modelplane.pins import Stack
    from modelplane.plan import Observed, plan
    from modelplane.plan.sources import Sources

    spec = STACK.spec.model_copy(update={"stack": Stack.DYNAMO})
    dynamo = STACK.model_copy(update={"spec": spec})
    p = plan(dynamo, Observed(), Sources(image_pull_secrets=("regcred",)))
    status = bounded(desired_status(Outcome(plan=p), 3))
    messages = {c["name"]: c["message"] for c in status["components"]}
    assert "grove-charts v0.1.0-alpha.12-rc2 reads no pull-secret value" in messages["grove"]
    assert "pull-secret value" not in messages["kai-scheduler"]
    _conforms(status, _status_schema())
