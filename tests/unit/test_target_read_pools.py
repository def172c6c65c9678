"""Targets last found unreachable read from a pool of their own, not the shared one."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from modelplane.operator.target_reads import TargetReads, blocked_on_hub, reads_apart
from modelplane.plan.decisions import BlockedReason

from .test_target_reads import refusing_reconciler, stack_body


@pytest.mark.parametrize(
    ("last_blocked", "apart"),
    [
        (None, False),
        (BlockedReason.TARGET_UNREACHABLE, True),
        ("TargetUnreachable", True),
        (BlockedReason.SECRET_NOT_FOUND, False),
        (BlockedReason.TARGET_CLAIMED, False),
    ],
)
def test_only_an_unreachable_target_reads_apart(last_blocked: str | None, apart: bool) -> None:
    assert reads_apart(last_blocked) is apart


def _ready(status: str, reason: Any) -> dict[str, Any]:
    return {"conditions": [{"type": "Ready", "status": status, "reason": reason}]}


@pytest.mark.parametrize(
    ("status", "blocked"),
    [
        (None, None),
        ({}, None),
        ({"conditions": "not a list"}, None),
        ({"conditions": ["not a mapping"]}, None),
        (_ready("False", "TargetUnreachable"), "TargetUnreachable"),
        (_ready("True", "Ready"), None),
        (_ready("Unknown", "TargetUnreachable"), None),
        (_ready("False", 7), None),
        ({"conditions": [{"type": "Other", "status": "False", "reason": "X"}]}, None),
    ],
)
def test_the_hubs_ready_reason_seeds_the_first_reconcile(status: Any, blocked: str | None) -> None:
    assert blocked_on_hub(status) == blocked


async def test_an_unreachable_target_does_not_wait_behind_the_shared_pool() -> None:
    reads = TargetReads(10)
    assert reads.unreachable_limit == 1
    async with contextlib.AsyncExitStack() as held:
        for _ in range(10):
            await held.enter_async_context(reads.slot())
        async with asyncio.timeout(5.0), reads.slot(apart=True):
            pass


async def test_a_healthy_target_does_not_wait_behind_the_unreachable_ones() -> None:
    reads = TargetReads(10)
    async with reads.slot(apart=True), asyncio.timeout(5.0), reads.slot():
        pass


async def test_after_a_restart_a_stack_the_hub_shows_unreachable_reads_apart(
    tmp_path: Path,
) -> None:
    # Every shared slot is taken: the reconcile finishes only if it reads
    # from the pool of unreachable targets, as the hub's Ready says it is.
    reads = TargetReads(10)
    reconciler = refusing_reconciler(tmp_path, reads)
    async with contextlib.AsyncExitStack() as held:
        for _ in range(10):
            await held.enter_async_context(reads.slot())
        body = stack_body(_ready("False", "TargetUnreachable"))
        outcome = await asyncio.wait_for(reconciler.reconcile(body), 5.0)
    assert outcome.blocked_reason == BlockedReason.SECRET_NOT_FOUND
    # Its last reconcile was not unreachable: the next one reads from the shared pool.
    assert reads_apart(reconciler.last_blocked) is False
