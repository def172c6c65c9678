"""A stored spec the models refuse: reported once by event, in Ready, and in teardown.

The hub's CRD refuses most bad specs at admission; what reaches the operator
anyway is a ServingStack stored under an older, looser CRD (before
nvidiaDriverRoot had to be an absolute path, say). Validation comes before any
request, so these need no cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelplane.actions.helm import Helm
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.stack_teardown import InvalidSpecError

Event = tuple[str, str, str]


def body(driver_root: str) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "west", "namespace": "platform", "uid": "u-1", "generation": 3},
        "spec": {
            "secrets": [{"type": "Kubeconfig", "name": "west", "key": "kubeconfig"}],
            "nvidiaDriverRoot": driver_root,
        },
    }


def reconciler(events: list[Event], tmp_path: Path) -> StackReconciler:
    # No hub and no helm: an invalid spec must be refused before either is used.
    return StackReconciler(
        hub=None,  # type: ignore[arg-type]
        helm=Helm("/nonexistent/helm", tmp_path),
        options=OperatorOptions(),
        emit=lambda *event: events.append(event),
    )


async def test_an_invalid_stored_spec_is_reported_once_and_names_the_field(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    r = reconciler(events, tmp_path)
    for _ in range(3):  # three resyncs
        outcome = await r.reconcile(body(""))
        assert outcome.blocked_reason == "InvalidSpec"
        assert outcome.blocked_message is not None
        assert outcome.blocked_message.startswith("spec.nvidiaDriverRoot:")
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", "InvalidSpec")]
    assert events[0][2].startswith("spec.nvidiaDriverRoot:")

    # Another error is a new event.
    await r.reconcile(body("//"))
    assert len(events) == 2


async def test_teardown_of_an_invalid_stored_spec_says_which_field(tmp_path: Path) -> None:
    r = reconciler([], tmp_path)
    with pytest.raises(InvalidSpecError, match=r"^spec\.nvidiaDriverRoot:"):
        await r.teardown(body(""), waited_seconds=0)
