"""The one error classifier, fed with the API server's own Status bodies.

The bodies are as kube-apiserver v1.34 sends them (captured from the test
binaries), so a change in what the classifier reads is caught here.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from modelplane.actions.apply import WebhookNotReady
from modelplane.actions.claim import ClaimContendedError
from modelplane.actions.helm import HelmError
from modelplane.credentials.connect import CredentialsError
from modelplane.credentials.identity.base import IdentityError, IdentityFailure
from modelplane.kube.address import AddressDenied
from modelplane.kube.budget import Budget
from modelplane.kube.client import ApiStatusError, OverBudget, TargetError
from modelplane.kube.errors import ErrorKind, Fault, classify
from modelplane.operator.handlers import teardown_message
from modelplane.operator.stack_teardown import InvalidSpecError
from modelplane.operator.stack_text import explain
from modelplane.plan import decisions
from modelplane.plan.decisions import BlockedReason

from .conftest import StackFactory

CLAIM = "/apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases"

# Creating the claim while another stack's teardown deletes modelplane-system.
NAMESPACE_TERMINATING = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'leases.coordination.k8s.io "modelplane-claim" is forbidden: unable to create '
    "new content in namespace modelplane-system because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "modelplane-claim",
        "group": "coordination.k8s.io",
        "kind": "leases",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace modelplane-system is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}
# RBAC's refusal: a 403 with no cause, which no waiting will change.
RBAC_FORBIDDEN = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'leases.coordination.k8s.io "modelplane-claim" is forbidden: User '
    '"system:serviceaccount:platform:west" cannot create resource "leases" in API group '
    '"coordination.k8s.io" in the namespace "modelplane-system"',
    "reason": "Forbidden",
    "details": {"name": "modelplane-claim", "group": "coordination.k8s.io", "kind": "leases"},
    "code": 403,
}
# A 403 whose message says "being terminated" but carries no such cause: the
# wording alone decides nothing.
LOOKALIKE = {
    **RBAC_FORBIDDEN,
    "message": "forbidden: unable to create new content in namespace x because it is being "
    "terminated",
}
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'leases.coordination.k8s.io "modelplane-claim" not found',
    "reason": "NotFound",
    "details": {"name": "modelplane-claim", "group": "coordination.k8s.io", "kind": "leases"},
    "code": 404,
}
CONFLICT = {
    **NOT_FOUND,
    "message": "the object has been modified",
    "reason": "Conflict",
    "code": 409,
}
TOO_MANY = {
    **NOT_FOUND,
    "message": "storage is (re)initializing",
    "reason": "TooManyRequests",
    "code": 429,
}
INTERNAL = {
    **NOT_FOUND,
    "message": "etcdserver: leader changed",
    "reason": "InternalError",
    "code": 500,
}


def api_error(body: dict[str, Any]) -> ApiError:
    request = httpx2.Request("POST", f"https://target.example:6443{CLAIM}")
    response = httpx2.Response(
        int(body["code"]),
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        request=request,
    )
    return ApiError(request=request, response=response)


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (NAMESPACE_TERMINATING, ErrorKind.NAMESPACE_TERMINATING),
        (RBAC_FORBIDDEN, ErrorKind.FORBIDDEN),
        (LOOKALIKE, ErrorKind.FORBIDDEN),
        (UNAUTHORIZED, ErrorKind.UNAUTHORIZED),
        (NOT_FOUND, ErrorKind.NOT_FOUND),
        (CONFLICT, ErrorKind.CONFLICT),
        (TOO_MANY, ErrorKind.SETTLING),
        (INTERNAL, ErrorKind.ANSWERED),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_an_api_servers_answer_is_classified_by_its_status_and_causes(
    body: dict[str, Any], kind: ErrorKind
) -> None:
    assert classify(api_error(body)) == Fault(kind, status=int(body["code"]))


def test_an_http_answer_that_is_not_a_status_is_classified_by_its_code() -> None:
    # A mirror of release manifests, say, answering a fetch.
    request = httpx2.Request("GET", "https://mirror.example/gaie/manifests.yaml")
    response = httpx2.Response(404, content=b"<html>no</html>", request=request)
    err = httpx2.HTTPStatusError("404", request=request, response=response)
    assert classify(err) == Fault(ErrorKind.NOT_FOUND, status=404)


OVER_BUDGET = OverBudget(
    "the target's secrets (every namespace, labels owner=helm)",
    "more than 32 MiB",
    Budget(items=1000, bytes=32 << 20),
)

CASES: list[tuple[BaseException, Fault]] = [
    (HelmError("Error: uninstall: timed out"), Fault(ErrorKind.HELM_FAILED)),
    (ClaimContendedError("freed and taken"), Fault(ErrorKind.CLAIM_CONTENDED)),
    (
        WebhookNotReady("webhook.cert-manager.io", [], "Issuer x", "500: refused"),
        Fault(ErrorKind.WEBHOOK_NOT_READY),
    ),
    (
        CredentialsError(BlockedReason.SECRET_NOT_FOUND, "Secret a/b does not exist"),
        Fault(ErrorKind.CREDENTIALS, reason="SecretNotFound"),
    ),
    (
        IdentityError(IdentityFailure.REJECTED, "the token service refused the key"),
        Fault(ErrorKind.IDENTITY, reason="IdentityRejected"),
    ),
    (InvalidSpecError("spec.version: bad"), Fault(ErrorKind.INVALID)),
    (
        AddressDenied(
            "metadata.internal",
            ipaddress.ip_address("169.254.169.254"),
            ipaddress.ip_network("169.254.0.0/16"),
        ),
        Fault(ErrorKind.ADDRESS_DENIED),
    ),
    (ApiStatusError(403, "/apis", "forbidden"), Fault(ErrorKind.FORBIDDEN, status=403)),
    (ApiStatusError(401, "/apis", "Unauthorized"), Fault(ErrorKind.UNAUTHORIZED, status=401)),
    (TargetError("answered with an object that is not that Lease"), Fault(ErrorKind.UNREACHABLE)),
    # A TargetError too, but one the target answered: not said as unreachable.
    (OVER_BUDGET, Fault(ErrorKind.OVER_BUDGET)),
    (httpx2.ConnectError("connection refused"), Fault(ErrorKind.UNREACHABLE)),
    (httpx2.ReadTimeout("timed out"), Fault(ErrorKind.UNREACHABLE)),
    (OSError("network is unreachable"), Fault(ErrorKind.UNREACHABLE)),
    (TimeoutError(), Fault(ErrorKind.UNREACHABLE)),
    (KeyError("spec"), Fault(ErrorKind.UNEXPECTED)),
    (ValueError("metadata.uid: missing"), Fault(ErrorKind.UNEXPECTED)),
]


@pytest.mark.parametrize(("err", "fault"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_every_error_a_reconcile_or_teardown_meets_has_one_kind(
    err: BaseException, fault: Fault
) -> None:
    assert classify(err) == fault


def test_a_namespace_being_deleted_is_said_as_a_wait(make_stack: StackFactory) -> None:
    err = api_error(NAMESPACE_TERMINATING)
    fault = classify(err)
    message = explain(fault, err, make_stack())
    assert decisions.blocked_reason(fault) is BlockedReason.TARGET_NAMESPACE_TERMINATING
    assert message.startswith("waiting for a namespace on the target to finish terminating")
    assert "modelplane-system because it is being terminated" in message
    teardown = teardown_message(fault, err)
    assert teardown.startswith("waiting for a namespace on the target to finish terminating")


def test_a_collection_past_its_budget_says_which_and_by_what(make_stack: StackFactory) -> None:
    fault = classify(OVER_BUDGET)
    message = explain(fault, OVER_BUDGET, make_stack())
    assert decisions.blocked_reason(fault) is BlockedReason.TARGET_COLLECTION_TOO_LARGE
    assert message.startswith("the target's secrets (every namespace, labels owner=helm) holds")
    assert "more than 32 MiB" in message and "1000 objects, 32 MiB and 256 MiB of memory" in message
    assert "cannot reach" not in message


def test_a_refusal_is_not_said_as_a_wait(make_stack: StackFactory) -> None:
    err = api_error(RBAC_FORBIDDEN)
    fault = classify(err)
    assert decisions.blocked_reason(fault) is BlockedReason.TARGET_UNAUTHORIZED
    assert "waiting" not in explain(fault, err, make_stack())
