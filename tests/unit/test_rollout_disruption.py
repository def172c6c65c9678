"""The hub says what an upgrade disrupts: UpToDate's message and status.rollout.disruption."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from modelplane.api.models import ServingStack
from modelplane.catalog.types import DisruptionClass
from modelplane.operator.rollout import Rollout
from modelplane.operator.status import Outcome
from modelplane.plan import rollout
from modelplane.plan.rollout import Phase, Policy, Upgrade, disrupted, upgrade_said

from .conftest import manifest

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DRA = "nvidia-dra-driver-gpu"
NODE_AGENT = DisruptionClass.NODE_AGENT
TRAFFIC = DisruptionClass.TRAFFIC
SCHEDULER = DisruptionClass.SCHEDULER
CONTROL = DisruptionClass.CONTROL


@pytest.mark.parametrize(
    ("upgrades", "classes"),
    [
        pytest.param(set(), [], id="nothing to upgrade"),
        pytest.param({(DRA, "0.4.2")}, [NODE_AGENT], id="the DRA driver"),
        pytest.param(
            {("envoy-gateway", "v1.8.5"), ("cert-manager", "v1.20.3")},
            [TRAFFIC, CONTROL],
            id="every part, each class once",
        ),
        pytest.param(
            {("kai-scheduler", "v0.16.9"), ("node-feature-discovery", "0.19.1")},
            [NODE_AGENT, SCHEDULER, CONTROL],
            id="the most disruptive first",
        ),
        pytest.param({("gpu-operator", "v25")}, [], id="unknown to the catalog"),
    ],
)
def test_the_classes_an_upgrade_touches(
    upgrades: set[Upgrade], classes: list[DisruptionClass]
) -> None:
    assert disrupted(frozenset(upgrades)) == classes


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (
            DRA,
            "nvidia-dra-driver-gpu 0.4.1 -> 0.4.2 (node agent: restarts the kubelet plugin on "
            "every GPU node, a node at a time (the operator's roll): no GPU claim is prepared "
            "on a node while it is away)",
        ),
        ("gpu-operator", "gpu-operator 0.4.1 -> 0.4.2"),
    ],
)
def test_one_upgrade_in_the_message(name: str, said: str) -> None:
    assert upgrade_said(name, "0.4.1", "0.4.2") == said


def _dra_body(desired: str, installed: str) -> dict[str, Any]:
    body = manifest(components="Managed", versions={"nvidiaDraDriver": desired})
    body["metadata"] = {"name": "a", "namespace": "fleet"}
    # Every other component already at its desired version.
    desired_versions = rollout.desired_versions(ServingStack.model_validate(body).spec)
    runs = {**desired_versions, DRA: installed}
    body["status"] = {
        "components": [
            {"name": n, "mode": "Managed", "version": v, "installedVersion": v}
            for n, v in sorted(runs.items())
        ]
    }
    return body


def _up_to_date(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "UpToDate")


def test_an_upgrade_says_on_the_hub_what_it_disrupts_until_it_is_done() -> None:
    r = Rollout(Policy(max_concurrent=1))
    body = _dra_body("0.4.2", "0.4.1")
    turn = r.begin(body, NOW)
    assert turn.phase is Phase.UPGRADING

    # Written before helm runs: kubectl shows it while the upgrade acts.
    started = r.starting(body, turn)
    assert started is not None
    assert started["rollout"]["disruption"] == ["NodeAgent"]
    message = _up_to_date(started)["message"]
    assert message.startswith(
        "upgrading: nvidia-dra-driver-gpu 0.4.1 -> 0.4.2 (node agent: restarts the kubelet "
        "plugin on every GPU node"
    )

    # Still behind after a reconcile: still said.
    status = {"conditions": [{"type": "Ready", "status": "False", "reason": "Progressing"}]}
    out = r.finish(body, turn, Outcome(), status, NOW)
    assert out["rollout"]["phase"] == "Upgrading"
    assert out["rollout"]["disruption"] == ["NodeAgent"]
    assert "(node agent: " in _up_to_date(out)["message"]

    # Done: the hub held it, so it is sent as null once, then left out.
    body["status"]["rollout"] = out["rollout"]
    for c in body["status"]["components"]:
        if c["name"] == DRA:
            c["installedVersion"] = "0.4.2"
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
    turn = r.begin(body, NOW)
    done = r.finish(body, turn, Outcome(), ready, NOW)
    assert done["rollout"]["phase"] == "UpToDate"
    assert done["rollout"]["disruption"] is None


def test_a_stack_up_to_date_writes_no_disruption() -> None:
    r = Rollout(Policy(max_concurrent=1))
    body = _dra_body("0.4.1", "0.4.1")
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
    out = r.finish(body, r.begin(body, NOW), Outcome(), ready, NOW)
    assert "disruption" not in out["rollout"]


def test_a_waiting_stack_says_what_its_upgrade_will_disrupt() -> None:
    r = Rollout(Policy(max_concurrent=1))
    first, second = _dra_body("0.4.2", "0.4.1"), _dra_body("0.4.2", "0.4.1")
    second["metadata"]["name"] = "b"
    r.observe(first)
    r.observe(second)
    assert r.begin(first, NOW).phase is Phase.UPGRADING
    turn = r.begin(second, NOW)
    assert turn.phase is Phase.PENDING
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
    out = r.finish(second, turn, Outcome(), status, NOW)
    assert out["rollout"] == {"phase": "Pending", "disruption": ["NodeAgent"]}
