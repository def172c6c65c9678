"""The claim on a target: whose it is, what a blocked stack says, and when it warns."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.actions import claim
from modelplane.actions.claim import ClaimState, StackIdentity, decide
from modelplane.api.models import ServingStack
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.plan import Observed, plan
from modelplane.plan.model import ObjectAction
from modelplane.wire import DIGEST_ANNOTATION, object_key, stamp

from .conftest import StackFactory, manifest

UID = "6f1c2a7e-0000-4000-8000-000000000001"
OURS = StackIdentity(namespace="platform", name="west", uid=UID)


@pytest.mark.parametrize(
    ("holder", "state"),
    [
        (None, ClaimState.FREE),  # no Lease
        ("", ClaimState.FREE),  # a Lease that names nobody
        (f"platform/west/{UID}", ClaimState.OURS),
        # The same stack after an operator restart: same identity, still ours.
        (OURS.holder, ClaimState.OURS),
        ("platform/east/7a2b", ClaimState.HELD),
        # Another hub's stack of the same namespace and name: the UID tells.
        ("platform/west/0d9e-other-hub", ClaimState.HELD),
        # This stack deleted and made again: a new UID, so the old claim is
        # stale, not ours to take silently.
        ("platform/west/11111111-old", ClaimState.HELD),
        ("someone-else", ClaimState.HELD),
    ],
    ids=[
        "absent",
        "empty",
        "ours",
        "ours-after-restart",
        "another-stack",
        "same-name-other-hub",
        "recreated-stack",
        "foreign-holder",
    ],
)
def test_decide_whose_claim(holder: str | None, state: ClaimState) -> None:
    assert decide(holder, OURS) is state


def test_identity_is_namespace_name_uid_of_the_hub_stack() -> None:
    body = manifest()
    body["metadata"]["uid"] = UID
    ours = StackIdentity.of(ServingStack.model_validate(body))
    assert ours == OURS
    assert ours.holder == f"platform/west/{UID}"


def test_identity_without_uid_names_the_field(make_stack: StackFactory) -> None:
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        StackIdentity.of(make_stack())


def test_blocked_message_names_the_owner_and_how_to_release_it() -> None:
    message = claim.blocked_message(f"platform/east/{UID}", OURS)
    assert f"ServingStack platform/east (uid {UID})" in message
    assert f"Lease {CLAIM_NAMESPACE}/{CLAIM_NAME}" in message
    assert f"kubectl -n {CLAIM_NAMESPACE} delete lease {CLAIM_NAME}" in message
    assert "skip-teardown" in message


def test_blocked_message_explains_a_namesake_owner() -> None:
    # This stack deleted and made again, or its namesake on another hub.
    message = claim.blocked_message("platform/west/11111111-old", OURS)
    assert "ServingStack platform/west (uid 11111111-old)" in message
    assert "this ServingStack's name but another UID" in message
    assert "another UID" not in claim.blocked_message(f"platform/east/{UID}", OURS)


def test_blocked_message_shows_a_foreign_holder_as_written() -> None:
    assert "holder 'leader-7'" in claim.blocked_message("leader-7", OURS)


def _status(reason: str, message: str) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "RequirementsMet", "status": "True", "reason": "x", "message": "y"},
            {"type": "Ready", "status": "False", "reason": reason, "message": message},
        ]
    }


def test_warning_goes_out_once_per_owner() -> None:
    message = claim.blocked_message("platform/east/1", OURS)
    # Nothing reported yet: first time blocked, or blocked for another reason.
    assert not claim.already_reported(None, message)
    assert not claim.already_reported({}, message)
    assert not claim.already_reported(_status("TargetUnreachable", "down"), message)
    # Blocked by the same owner on the last reconcile: no second warning.
    assert claim.already_reported(_status(claim.TARGET_CLAIMED, message), message)
    # Another owner since: say so again.
    other = claim.blocked_message("platform/north/2", OURS)
    assert not claim.already_reported(_status(claim.TARGET_CLAIMED, other), message)


@pytest.mark.parametrize("spec", [{}, {"stack": "Dynamo"}, {"components": "Provided"}])
def test_namespace_the_claim_creates_is_the_one_the_plan_applies(
    make_stack: StackFactory, spec: dict[str, Any]
) -> None:
    """Created as the configuration would, so the plan finds it applied (no second
    write) and teardown deletes it with the rest."""
    stack = make_stack(**spec)
    body = stamp(claim.namespace_body(stack))
    observed = Observed(
        applied={object_key(body): body["metadata"]["annotations"][DIGEST_ANNOTATION]}
    )
    [namespace] = [o for o in plan(stack, observed).objects if o.object["kind"] == "Namespace"]
    assert namespace.key == object_key(body)
    assert namespace.action is ObjectAction.NONE
