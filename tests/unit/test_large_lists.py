"""kube.large_lists: at most MAX_LARGE_LISTS LISTs of every CRD or Node at once, slots never kept.

At a shard's start every target lists its CRDs together (6.2 MB of JSON
each with the real ones): past their deadlines, and past the process's
memory total, when they all ran at once.
"""

from __future__ import annotations

import asyncio

import pytest

from modelplane.kube.budget import METADATA_BUDGET, Budget, budget_for
from modelplane.kube.large_lists import MAX_LARGE_LISTS, LargeList, is_large
from modelplane.observe.state import NODES, SECRETS
from modelplane.observe.watches import CRDS
from modelplane.wire import ApiRef

GATEWAYS = ApiRef("gateway.networking.k8s.io", "v1", "gateways")


@pytest.mark.parametrize(
    ("budget", "large"),
    [
        (budget_for(CRDS), True),
        (budget_for(NODES), True),
        (budget_for(SECRETS), False),
        (budget_for(GATEWAYS), False),
        (METADATA_BUDGET, False),
    ],
)
def test_which_lists_are_large(budget: Budget, large: bool) -> None:
    assert is_large(budget) is large


async def _lists(count: int, budget: Budget, hold: float = 60.0) -> tuple[int, int]:
    """``count`` LISTs entering at once, each until released: (most at once, how many entered)."""
    inside = most = entered = 0
    go = asyncio.Event()

    async def one() -> None:
        nonlocal inside, most, entered
        async with LargeList(budget, hold):
            inside += 1
            entered += 1
            most = max(most, inside)
            await go.wait()
            inside -= 1

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    for _ in range(5):
        await asyncio.sleep(0)
    stuck = entered
    go.set()
    await asyncio.gather(*tasks)
    return most, stuck


async def test_large_lists_wait_for_a_slot() -> None:
    most, entered = await _lists(3 * MAX_LARGE_LISTS, budget_for(CRDS))
    assert most == MAX_LARGE_LISTS
    assert entered == MAX_LARGE_LISTS


async def test_other_lists_never_wait() -> None:
    most, entered = await _lists(3 * MAX_LARGE_LISTS, budget_for(GATEWAYS))
    assert most == entered == 3 * MAX_LARGE_LISTS


async def test_a_slot_held_past_its_time_is_given_back() -> None:
    # A target answering a byte at a time keeps its LIST, not a slot.
    _, entered = await _lists(3 * MAX_LARGE_LISTS, budget_for(CRDS), hold=0.0)
    assert entered > MAX_LARGE_LISTS


async def test_a_failed_list_gives_its_slot_back() -> None:
    for _ in range(MAX_LARGE_LISTS + 1):
        with pytest.raises(RuntimeError):
            async with LargeList(budget_for(CRDS)):
                raise RuntimeError("the target went away")
    most, _ = await _lists(MAX_LARGE_LISTS, budget_for(CRDS))
    assert most == MAX_LARGE_LISTS
