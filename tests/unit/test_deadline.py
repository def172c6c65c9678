"""kube.deadline: a request to a target, and a reconcile's slot, end by their deadline.

Issue 40, finding 5: a server that answers a byte at a time answers within
every network timeout, and a read of it never ended, inside one of the
shard's read slots. Shown against a hostile server on loopback, through the
product's own target connection (``kube.client.open_target``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from lightkube import KubeConfig
from tests.hostile_server import Answer, HostileServer

from modelplane.kube import deadline
from modelplane.kube.client import Target, TargetError, get_json, open_target
from modelplane.kube.deadline import (
    REQUEST_SECONDS,
    WATCH_DEFAULT_SECONDS,
    WATCH_GRACE_SECONDS,
    reads_within,
    request_deadline,
    run_deadline,
)
from modelplane.operator.target_reads import TargetReads

# At most what a test waits for what should come: a guard against a hang
# (the code before the fix), never a measure.
GUARD = 20.0


async def _trickle(_params: dict[str, str], answer: Answer) -> None:
    """A 200 whose body never ends: a byte, well within any read timeout, then another."""
    await answer.start()
    while await answer.send(b" "):
        await asyncio.sleep(0.01)


def _kubeconfig(url: str) -> KubeConfig:
    return KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


async def _target(server: HostileServer) -> Target:
    return await open_target(_kubeconfig(server.url).get(), deny=(), trust_env=False)


@pytest.fixture
async def trickling() -> AsyncIterator[HostileServer]:
    async with HostileServer(_trickle) as server:
        yield server


async def test_a_trickling_answer_ends_by_the_requests_deadline(
    trickling: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deadline, "REQUEST_SECONDS", 0.3)
    async with asyncio.timeout(GUARD), await _target(trickling) as target:
        with pytest.raises(TargetError, match="deadline"):
            await get_json(target.client, "/api")


async def test_a_trickling_answer_ends_by_the_slots_deadline(trickling: HostileServer) -> None:
    # The request's own deadline is far off: the slot's ends it.
    assert REQUEST_SECONDS > GUARD
    reads = TargetReads(1, deadline=0.3)
    async with asyncio.timeout(GUARD), await _target(trickling) as target:
        async with reads.slot():
            with pytest.raises(TargetError, match="deadline"):
                await get_json(target.client, "/api")
        # The slot was given back: the next reconcile takes it.
        async with reads.slot():
            pass


async def test_a_task_started_in_a_slot_is_freed_of_its_deadline_with_it() -> None:
    # A watch's reflector, started inside a reconcile's slot, outlives it.
    reads = TargetReads(1, deadline=60.0)
    started, slot_over = asyncio.Event(), asyncio.Event()
    seen: list[float | None] = []

    async def reflector() -> None:
        seen.append(run_deadline())
        started.set()
        await slot_over.wait()
        seen.append(run_deadline())

    async with reads.slot():
        task = asyncio.create_task(reflector())
        await started.wait()
    assert run_deadline() is None
    slot_over.set()
    await task
    assert seen[0] is not None and seen[1] is None


async def test_a_run_inside_another_ends_no_later_than_it() -> None:
    with reads_within(1.0):
        outer = run_deadline()
        with reads_within(100.0):
            assert run_deadline() == outer
        with reads_within(0.5):
            inner = run_deadline()
            assert inner is not None and outer is not None and inner < outer
        assert run_deadline() == outer
    assert run_deadline() is None


WATCH = {"watch": "true", "timeoutSeconds": "300"}


@pytest.mark.parametrize(
    ("params", "run", "expected"),
    [
        ({}, None, 1000.0 + REQUEST_SECONDS),
        ({"limit": "500"}, 1010.0, 1010.0),
        ({}, 5000.0, 1000.0 + REQUEST_SECONDS),
        # A WATCH: its timeoutSeconds and the grace, never the run's.
        (WATCH, None, 1000.0 + 300 + WATCH_GRACE_SECONDS),
        (WATCH, 1010.0, 1000.0 + 300 + WATCH_GRACE_SECONDS),
        ({"watch": "1"}, None, 1000.0 + WATCH_DEFAULT_SECONDS + WATCH_GRACE_SECONDS),
        (
            {"watch": "true", "timeoutSeconds": "nonsense"},
            None,
            1000.0 + WATCH_DEFAULT_SECONDS + WATCH_GRACE_SECONDS,
        ),
        (
            {"watch": "true", "timeoutSeconds": "1e9"},
            None,
            1000.0 + WATCH_DEFAULT_SECONDS + WATCH_GRACE_SECONDS,
        ),
        ({"watch": "false"}, 1010.0, 1010.0),
    ],
)
def test_request_deadline(params: dict[str, str], run: float | None, expected: float) -> None:
    assert request_deadline(params, 1000.0, run) == expected
