"""A settled stack asks its target nothing; the claim is read before a write, and still stops one.

One Provided stack's reconciler, kept as the daemon keeps it (its watches
running), against one target of the simulated fleet (bench/fleet_server),
whose counts by verb and resource say what each reconcile asked. The
figures of bench/bench_settled_shard.py come from the same counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.coordination_v1 import Lease
from tests.testenv.fleet import FleetServer

from modelplane.actions.claim import CLAIM_NAME, CLAIM_NAMESPACE
from modelplane.actions.helm import Helm
from modelplane.api.models import ServingStack
from modelplane.catalog.configuration import GATEWAY_NAME
from modelplane.catalog.configuration import NS as TARGET_NS
from modelplane.credentials.connect import Credentials
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.status import Outcome
from modelplane.plan.decisions import BlockedReason

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
CLAIM_READ = "GET coordination.k8s.io/v1/leases"
GATEWAY_WRITE = "PATCH gateway.networking.k8s.io/v1/gateways"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    with FleetServer(tmp_path_factory.mktemp("settled") / "fleet", 1) as server:
        yield server


def _body() -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "west", "namespace": "platform", "uid": "u-1", "generation": 1},
        "spec": {
            "components": "Provided",
            "secrets": [{"type": "Kubeconfig", "name": "west", "key": "kubeconfig"}],
        },
    }


def _counts(fleet: FleetServer) -> dict[str, int]:
    return {k: int(v) for k, v in (fleet.stats().get("byKind") or {}).items()}


def _asked(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The requests made between two counts, watches left out (a re-arm is not a read)."""
    grown = {k: v - before.get(k, 0) for k, v in after.items()}
    return {k: v for k, v in grown.items() if v and not k.startswith("WATCH ")}


async def _reconcile(reconciler: StackReconciler) -> Outcome:
    return await asyncio.wait_for(reconciler.reconcile(_body()), 60.0)


async def test_a_settled_resync_asks_nothing_and_a_write_reads_the_claim_first(
    fleet: FleetServer, tmp_path: Path
) -> None:
    kubeconfig = yaml.safe_dump(fleet.kubeconfig(0))

    async def credentials(_stack: ServingStack) -> Credentials:
        return Credentials(kubeconfig)

    woken = asyncio.Event()
    reconciler = StackReconciler(
        hub=None,
        helm=Helm("/nonexistent/helm", tmp_path),
        options=OperatorOptions(),
        emit=lambda *_event: None,
        credentials=credentials,
        wake=woken.set,
        label="platform/west",
    )
    target = fleet.client(0)
    try:
        # Installed (the product's objects applied), then one reconcile that
        # finds nothing to do: from here on the stack is settled.
        for _ in range(4):
            outcome = await _reconcile(reconciler)
            assert outcome.blocked_reason is None, outcome.blocked_message
            if reconciler.acted_on_nothing:
                break
        assert reconciler.acted_on_nothing

        before = _counts(fleet)
        for _ in range(3):
            outcome = await _reconcile(reconciler)
            assert outcome.blocked_reason is None and reconciler.acted_on_nothing
        assert _asked(before, _counts(fleet)) == {}

        # A change the plan writes back: the claim is read once, before the write.
        woken.clear()
        target.delete(GATEWAY, GATEWAY_NAME, namespace=TARGET_NS)
        await asyncio.wait_for(woken.wait(), 30.0)
        before = _counts(fleet)
        outcome = await _reconcile(reconciler)
        assert outcome.blocked_reason is None, outcome.blocked_message
        asked = _asked(before, _counts(fleet))
        assert asked.get(CLAIM_READ) == 1 and asked.get(GATEWAY_WRITE) == 1, asked

        # Another holder now: the write is refused, and the stack is blocked.
        lease = target.get(Lease, CLAIM_NAME, namespace=CLAIM_NAMESPACE)
        assert lease.spec is not None
        lease.spec.holderIdentity = "someone-else"
        target.replace(lease)
        woken.clear()
        target.delete(GATEWAY, GATEWAY_NAME, namespace=TARGET_NS)
        await asyncio.wait_for(woken.wait(), 30.0)
        before = _counts(fleet)
        outcome = await _reconcile(reconciler)
        assert outcome.blocked_reason == BlockedReason.TARGET_CLAIMED
        asked = _asked(before, _counts(fleet))
        assert asked.get(CLAIM_READ) == 1 and GATEWAY_WRITE not in asked, asked
    finally:
        await reconciler.close()
