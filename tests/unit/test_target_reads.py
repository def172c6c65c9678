"""The bound on stacks reading their target in full at once; a reconcile gives its slot back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.waiting import wait_for_async

from modelplane.actions.helm import Helm
from modelplane.api.models import ServingStack
from modelplane.credentials.connect import Credentials, CredentialsError
from modelplane.operator import metrics
from modelplane.operator.options import OperatorOptions
from modelplane.operator.reconciler import StackReconciler
from modelplane.operator.target_reads import TargetReads
from modelplane.plan.decisions import BlockedReason


def _waiting() -> float:
    return float(metrics.TARGET_READS_WAITING._value.get())


async def test_no_more_than_the_limit_read_at_once_and_the_rest_are_counted_waiting() -> None:
    reads = TargetReads(2)
    inside, most = 0, 0
    release = asyncio.Event()

    async def read() -> None:
        nonlocal inside, most
        async with reads.slot():
            inside += 1
            most = max(most, inside)
            await release.wait()
            inside -= 1

    before = _waiting()
    tasks = [asyncio.create_task(read()) for _ in range(5)]

    async def all_arrived() -> bool:
        return inside + _waiting() - before == 5

    await wait_for_async("every read inside or waiting", all_arrived, deadline=20.0)
    assert inside == 2
    assert _waiting() - before == 3
    release.set()
    await asyncio.gather(*tasks)
    assert most == 2 and _waiting() == before


def stack_body(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "west", "namespace": "platform", "uid": "u-1", "generation": 1},
        "spec": {"secrets": [{"type": "Kubeconfig", "name": "west", "key": "kubeconfig"}]},
        **({"status": status} if status is not None else {}),
    }


def refusing_reconciler(tmp_path: Path, reads: TargetReads) -> StackReconciler:
    """A reconciler sharing ``reads`` whose every reconcile fails to read its credentials."""

    async def refused(_stack: ServingStack) -> Credentials:
        raise CredentialsError(BlockedReason.SECRET_NOT_FOUND, "the Secret west is missing")

    return StackReconciler(
        hub=None,
        helm=Helm("/nonexistent/helm", tmp_path),
        options=OperatorOptions(),
        emit=lambda *_event: None,
        credentials=refused,
        target_reads=reads,
    )


async def test_a_reconcile_that_cannot_reach_its_target_gives_its_slot_back(
    tmp_path: Path,
) -> None:
    # A slot kept by a failed reconcile would stall the shard once all of
    # them were: each reconcile here fails to read the credentials.
    reads = TargetReads(1)
    reconciler = refusing_reconciler(tmp_path, reads)
    for _ in range(3):
        outcome = await asyncio.wait_for(reconciler.reconcile(stack_body()), 5.0)
        assert outcome.blocked_reason == BlockedReason.SECRET_NOT_FOUND
    async with asyncio.timeout(1.0), reads.slot():
        pass
