"""The Argo CD health check for a ServingStack (deploy/argocd/health.lua), state by state.

No Lua interpreter is among the project's dependencies, so the script is not
run here: its decision table is, as ``argocd_health`` below, and the test
checks that the script states the same table, condition by condition.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from modelplane.operator.status import Outcome, desired_status
from modelplane.vocabulary import BlockedReason, ConditionType

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "argocd" / "health.lua"


def argocd_health(obj: dict[str, Any]) -> str:
    """What the script decides, first match wins (its header states the same table)."""
    status = obj.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if not conditions:
        return "Progressing"
    generation = obj["metadata"].get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        return "Progressing"
    if conditions.get(ConditionType.STALLED, {}).get("status") == "True":
        return "Degraded"
    if conditions.get(ConditionType.READY, {}).get("status") == "True":
        return "Healthy"
    return "Progressing"


def _stack(generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": status}


def _ready_true() -> dict[str, Any]:
    # desired_status without a plan says nothing; one planned and done does.
    return {
        "observedGeneration": 2,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Reconciled", "message": ""},
            {"type": "Reconciling", "status": "False", "reason": "Reconciled", "message": ""},
            {"type": "Stalled", "status": "False", "reason": "Reconciled", "message": ""},
        ],
    }


@pytest.mark.parametrize(
    ("stack", "health"),
    [
        (_stack(2, None), "Progressing"),
        (
            _stack(2, desired_status(Outcome(blocked_reason=BlockedReason.TARGET_UNREACHABLE), 2)),
            "Progressing",
        ),
        (
            _stack(2, desired_status(Outcome(blocked_reason=BlockedReason.INVALID_SPEC), 2)),
            "Degraded",
        ),
        (_stack(2, _ready_true()), "Healthy"),
        # A status of an older generation says nothing of this one.
        (_stack(3, _ready_true()), "Progressing"),
        (
            _stack(3, desired_status(Outcome(blocked_reason=BlockedReason.INVALID_SPEC), 2)),
            "Progressing",
        ),
        # An operator from before Reconciling and Stalled: Ready alone.
        (
            _stack(
                2, {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False"}]}
            ),
            "Progressing",
        ),
    ],
    ids=[
        "no status",
        "retrying",
        "stalled",
        "ready",
        "ready, old generation",
        "stalled, old generation",
        "Ready alone",
    ],
)
def test_each_state_reads_as(stack: dict[str, Any], health: str) -> None:
    assert argocd_health(stack) == health


def test_the_script_states_the_same_table() -> None:
    lua = SCRIPT.read_text()
    # Each outcome, from the condition the table says, in the table's order.
    decisions = re.findall(r'(\w+)\.status == "True" then\n\s+hs\.status = "(\w+)"', lua)
    assert decisions == [("stalled", "Degraded"), ("ready", "Healthy")]
    assert 'hs.status = "Progressing"' in lua
    assert "observed ~= generation" in lua
    for name in ("Ready", "Stalled", "Reconciling"):
        assert f'condition.type == "{name}"' in lua
