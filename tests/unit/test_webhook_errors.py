"""An admission webhook the target cannot call yet: told apart, named, retried with backoff.

The messages are the API server's: ``failed calling webhook %q: %v`` wrapped
in an InternalError (k8s.io/apiserver pkg/util/webhook/error.go) when the
call itself failed, ``admission webhook %q denied the request`` when the
webhook answered no (pkg/admission/plugin/webhook/errors/statuserror.go). The
connection-refused and x509 causes are the ones cert-manager users meet
right after install (cert-manager issues 3133 and 3840,
https://cert-manager.io/docs/troubleshooting/webhook/). The end-to-end
behaviour, against a real API server and webhook, is in
tests/integration/test_webhook_not_ready.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from modelplane.actions.apply import WebhookNotReady
from modelplane.kube.answers import webhook_call_failed
from modelplane.operator.component_failures import ComponentFailures
from modelplane.operator.status import Outcome, desired_status
from modelplane.plan import plan
from modelplane.plan.decisions import WEBHOOK_RETRY

from .conftest import StackFactory

CERT_MANAGER = "webhook.cert-manager.io"
REFUSED = (
    'Internal error occurred: failed calling webhook "webhook.cert-manager.io": failed to '
    'call webhook: Post "https://cert-manager-webhook.cert-manager.svc:443/validate?'
    'timeout=30s": dial tcp 10.96.20.99:443: connect: connection refused'
)
X509 = (
    'Internal error occurred: failed calling webhook "webhook.cert-manager.io": failed to '
    'call webhook: Post "https://cert-manager-webhook.cert-manager.svc:443/validate?'
    'timeout=30s": tls: failed to verify certificate: x509: certificate signed by unknown '
    "authority"
)
SECRET = "token-0123456789abcdef"
Event = tuple[str, str, str]


def api_error(code: int, body: dict[str, Any]) -> ApiError:
    request = httpx2.Request(
        "PATCH", "https://target.example:6443/apis/cert-manager.io/v1/namespaces/ns/issuers/x"
    )
    response = httpx2.Response(
        code,
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        request=request,
    )
    return ApiError(request=request, response=response)


def status(code: int, message: str, reason: str = "InternalError") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


# -- telling a webhook that cannot be called from everything else -------------------


@pytest.mark.parametrize("message", [REFUSED, X509], ids=["connection-refused", "x509"])
def test_a_webhook_the_api_server_could_not_call_is_named_with_its_words(message: str) -> None:
    failed = webhook_call_failed(api_error(500, status(500, message)))
    assert failed is not None
    assert failed.webhook == CERT_MANAGER
    assert failed.detail == f"500: {message}"


def test_no_further_details_still_names_the_webhook() -> None:
    message = 'Internal error occurred: failed calling webhook "q.example.com"; no further details'
    failed = webhook_call_failed(api_error(500, status(500, message)))
    assert failed is not None and failed.webhook == "q.example.com"


@pytest.mark.parametrize("length", [10, 2000])
def test_what_the_webhook_answered_is_not_repeated(length: int) -> None:
    # A webhook that answers 500: client-go quotes its body, which its server chose.
    body = (SECRET + " ") * (length // len(SECRET))
    message = (
        f'Internal error occurred: failed calling webhook "{CERT_MANAGER}": failed to call '
        f'webhook: an error on the server ("{body}") has prevented the request from succeeding'
    )
    failed = webhook_call_failed(api_error(500, status(500, message)))
    assert failed is not None and failed.webhook == CERT_MANAGER
    assert SECRET not in failed.detail
    assert "its answer is not repeated" in failed.detail


@pytest.mark.parametrize(
    ("code", "body"),
    [
        # The webhook answered: a verdict on the object, not a webhook to wait for.
        (
            400,
            status(
                400,
                f'admission webhook "{CERT_MANAGER}" denied the request: spec: a selfSigned '
                "or ca issuer is required",
                reason="BadRequest",
            ),
        ),
        # A denial that quotes the phrase is still a denial.
        (
            403,
            status(
                403,
                f'admission webhook "policy.example.com" denied the request: failed calling '
                f'webhook "{CERT_MANAGER}"',
                reason="Forbidden",
            ),
        ),
        # Not a Status: the answer of whatever the target's address reaches.
        (500, {"kind": "Page", "message": REFUSED}),
        (500, status(500, "Internal error occurred: etcdserver: request timed out")),
    ],
    ids=["denied", "denial-quoting-the-phrase", "not-a-status", "another-500"],
)
def test_anything_else_is_not_a_webhook_to_wait_for(code: int, body: dict[str, Any]) -> None:
    assert webhook_call_failed(api_error(code, body)) is None


def test_an_error_without_an_answer_is_not_a_webhook_to_wait_for() -> None:
    assert webhook_call_failed(ValueError(REFUSED)) is None


def test_the_refusal_names_the_webhook_its_configuration_and_the_object() -> None:
    err = WebhookNotReady(
        CERT_MANAGER,
        ["MutatingWebhookConfiguration cert-manager-webhook"],
        "Issuer modelplane-system/modelplane-selfsigned",
        f"500: {REFUSED}",
    )
    text = str(err)
    assert f'admission webhook "{CERT_MANAGER}"' in text
    assert "MutatingWebhookConfiguration cert-manager-webhook" in text
    assert "Issuer modelplane-system/modelplane-selfsigned" in text
    assert text.endswith(f"500: {REFUSED}")


# -- what the reconciler does with it --------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failures(clock: Clock, events: list[Event]) -> ComponentFailures:
    return ComponentFailures(emit=lambda *event: events.append(event), clock=clock)


def not_ready(detail: str = f"500: {REFUSED}") -> WebhookNotReady:
    return WebhookNotReady(
        CERT_MANAGER,
        ["ValidatingWebhookConfiguration cert-manager-webhook"],
        "Issuer modelplane-system/modelplane-selfsigned",
        detail,
    )


async def fails_with(err: BaseException) -> None:
    raise err


async def succeeds() -> None:
    return None


async def test_a_webhook_wait_is_retried_with_growing_waits_and_one_event() -> None:
    clock, events = Clock(), list[Event]()
    r = failures(clock, events)
    waits = []
    for _ in range(8):
        assert not await r.guard("configuration", fails_with(not_ready()))
        waits.append(r.not_before["configuration"] - clock.now)
        assert r.retry_after() == pytest.approx(waits[-1])
        clock.now = r.not_before["configuration"]
    # Backoff, capped lower than other failures: such a webhook answers soon.
    assert waits == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0]
    assert waits[-1] == WEBHOOK_RETRY.cap
    assert r.waiting_on_webhook == {"configuration"}
    assert r.failures["configuration"] == str(not_ready())
    # One event for the wait, not one per retry.
    assert [(t, reason) for t, reason, _ in events] == [("Warning", "WebhookNotReady")]

    # Another cause is news; then the webhook admits and the wait is over.
    assert not await r.guard("configuration", fails_with(not_ready("500: timeout")))
    assert len(events) == 2
    assert await r.guard("configuration", succeeds())
    assert (r.failures, r.not_before, r.waiting_on_webhook) == ({}, {}, set())
    assert r.retry_after() is None


async def test_a_real_failure_after_a_wait_is_a_failure_again() -> None:
    clock, events = Clock(), list[Event]()
    r = failures(clock, events)
    await r.guard("configuration", fails_with(not_ready()))
    await r.guard("configuration", fails_with(ValueError("bad manifest")))
    assert r.waiting_on_webhook == set()
    assert events[-1][1] == "ActionFailed"


async def test_retry_after_never_spins_on_a_deadline_just_passed() -> None:
    clock, events = Clock(), list[Event]()
    r = failures(clock, events)
    await r.guard("configuration", fails_with(not_ready()))
    clock.now += 4.9
    assert r.retry_after() == 1.0  # not 0.1: a sleep that short is a busy loop
    clock.now += 1.0
    assert r.retry_after() is None  # due: the next reconcile retries it


def _ready(outcome: Outcome) -> dict[str, Any]:
    conditions = desired_status(outcome, 1)["conditions"]
    return next(c for c in conditions if c["type"] == "Ready")


def test_ready_names_the_webhook_while_only_webhooks_hold_it(make_stack: StackFactory) -> None:
    p = plan(make_stack(gateway={"hostname": "west.example.com"}))
    message = str(not_ready())
    waiting = Outcome(
        plan=p,
        failures={"configuration": message, "cert-manager": message},
        waiting_on_webhook=frozenset({"configuration", "cert-manager"}),
    )
    ready = _ready(waiting)
    assert (ready["status"], ready["reason"]) == ("False", "WebhookNotReady")
    assert message in ready["message"]
    states = {c["name"]: c["state"] for c in desired_status(waiting, 1)["components"]}
    assert states["cert-manager"] == "WaitingForWebhook"

    # A real failure beside it is not something that passes by itself.
    mixed = Outcome(
        plan=p,
        failures={"configuration": message, "cert-manager": "install failed: boom"},
        waiting_on_webhook=frozenset({"configuration"}),
    )
    assert _ready(mixed)["reason"] == "ActionFailed"
    states = {c["name"]: c["state"] for c in desired_status(mixed, 1)["components"]}
    assert states["cert-manager"] == "Failed"
