"""What a target holds never makes the hub refuse a stack's status, nor ends its loop.

The hostile value is the claim's holder: whoever can write the target's
Lease ``modelplane-system/modelplane-claim`` writes it, unbounded (the
API server sets no limit on ``holderIdentity``), and the blocked stack's
Ready message shows it. Against the real hub with the generated CRD.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType
from tests.integration.hubs import SS, Harness, HarnessOptions
from tests.waiting import wait_for

from modelplane.api import status_limits
from modelplane.catalog.configuration import CLAIM_NAME, CLAIM_NAMESPACE

HARNESS = HarnessOptions(prefix="hs", kubeconfig_secret=True)

ESC = "\x1b[2J\x1b]8;;http://evil\x1b\\"
# Past the CRD's limit for a condition's message.
HUGE_HOLDER = ESC + "h" * (status_limits.STRINGS["conditions[].message"] + 5000)

# Run in the operator's process before anything of it is imported: its own
# limits (not the CRD's) raised, so it writes what the hub must refuse.
RAISED_LIMITS = """\
from types import MappingProxyType

from modelplane.api import status_limits

status_limits.STRINGS = MappingProxyType({k: 10**7 for k in status_limits.STRINGS})
status_limits.CLAIM_HOLDER = 10**7
"""


def _claim(h: Harness, holder: str) -> None:
    h.target.apply(Namespace(metadata=ObjectMeta(name=CLAIM_NAMESPACE)), field_manager="owner")
    h.target.apply(
        Lease(
            metadata=ObjectMeta(name=CLAIM_NAME, namespace=CLAIM_NAMESPACE),
            spec=LeaseSpec(holderIdentity=holder),
        ),
        field_manager="owner",
        force=True,
    )


def _events(h: Harness) -> list[dict[str, Any]]:
    items = h.hub_env.http_client().get(f"/api/v1/namespaces/{h.ns}/events").json()["items"]
    return [e for e in items if e["involvedObject"].get("name") == "stack"]


def _events_for(h: Harness, reason: str) -> list[dict[str, Any]]:
    """The stack's events of ``reason``, once there is one.

    The recorder posts an event after the status write that shows the same
    condition, so a condition seen is no proof its event is stored yet.
    """
    return wait_for(
        f"a {reason} event",
        lambda: [e for e in _events(h) if e["reason"] == reason],
        deadline=30,
    )


def test_an_oversized_hostile_holder_is_cut_and_the_status_is_taken(harness: Harness) -> None:
    _claim(harness, HUGE_HOLDER)
    harness.create({})
    harness.start()
    ready = harness.wait_condition("Ready", "False", "TargetClaimed", deadline=90)
    assert "\x1b" not in ready["message"]
    assert "http://evil" in ready["message"]  # shown, escaped
    assert len(ready["message"]) <= status_limits.STRINGS["conditions[].message"]
    [claimed] = _events_for(harness, "TargetClaimed")
    assert "\x1b" not in claimed["message"]
    assert len(claimed["message"]) <= status_limits.EVENT_MESSAGE


@pytest.fixture
def raised_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator started after this writes past the CRD's limits (``sitecustomize``)."""
    prelude = tmp_path / "prelude"
    prelude.mkdir()
    (prelude / "sitecustomize.py").write_text(RAISED_LIMITS)
    rest = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(prelude), *([rest] if rest else [])]))


def test_a_refused_status_is_reported_and_the_loop_goes_on(
    harness: Harness, raised_limits: None
) -> None:
    _claim(harness, HUGE_HOLDER)
    harness.create({})
    # Its limits are not the CRD's, so it must not put its own CRD on the
    # session's hub: the hub's is what refuses it.
    harness.start("--no-manage-crd")
    refused = harness.wait_condition("Ready", "False", "StatusRefused", deadline=90, generation=1)
    assert "status.conditions[0].message: FieldValueTooLong" in refused["message"]
    warnings = _events_for(harness, "StatusRefused")
    assert [e["type"] for e in warnings] == ["Warning"]
    assert "status.conditions[0].message" in warnings[0]["message"]

    # The loop goes on: a spec change is still taken up (its generation
    # reported, the status still refused) ...
    harness.create({"gateway": {"hostname": "west.example.com"}})
    harness.wait_condition("Ready", "False", "StatusRefused", deadline=90, generation=2)
    # ... and once the target holds something the hub takes, the whole status
    # is written again.
    _claim(harness, "platform/other/uid-2")
    ready = harness.wait_condition("Ready", "False", "TargetClaimed", deadline=90, generation=2)
    assert "ServingStack platform/other (uid uid-2)" in ready["message"]
    assert "\x1b" not in harness.log.read_text()


def test_the_hub_counts_a_limit_in_characters_as_the_operator_cuts(harness: Harness) -> None:
    # printable() cuts to characters; were the limit bytes, a message of
    # non-ASCII characters cut to it would be refused.
    limit = status_limits.STRINGS["conditions[].message"]
    harness.create({})

    def write(message: str) -> None:
        condition = {"type": "Ready", "status": "False", "reason": "R", "message": message}
        harness.hub.patch(
            SS.Status,
            "stack",
            {"status": {"conditions": [condition]}},
            namespace=harness.ns,
            patch_type=PatchType.MERGE,
        )

    write("é" * limit)
    assert harness.condition("Ready")["message"] == "é" * limit
    with pytest.raises(ApiError) as refused:
        write("é" * (limit + 1))
    assert refused.value.status.code == 422
