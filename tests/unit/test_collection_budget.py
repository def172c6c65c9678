"""A collection's budget across a LIST's pages and a watch's life (issue 27, item 2).

Against a loopback server that streams what no API server would: pages
without end, a page without end, watch events without end. Memory is the
process's own, as tracemalloc counts it while the client reads; the server
writes in small pieces from buffers it made beforehand, so what is counted
is what the client kept.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator

import httpx2
import pytest
from tests.hostile_server import Answer, HostileServer
from tests.waiting import wait_for_async

from modelplane.kube import client as client_module
from modelplane.kube.budget import DEFAULT_BUDGET, METADATA_BUDGET, Budget, Holdings, budget_for
from modelplane.kube.client import PAGE_SIZE, OverBudget, list_pages
from modelplane.kube.link import Link
from modelplane.kube.reflector import BUDGET_BACKOFF, REARM_BACKOFF, Reflector, WatchKey
from modelplane.untrusted import json_cost
from modelplane.wire import ApiRef

SECRETS = ApiRef("", "v1", "secrets")
CONFIGMAPS = ApiRef("", "v1", "configmaps")
KEY = WatchKey(CONFIGMAPS, namespace="ns")
MiB = 1 << 20
BUDGET = Budget(items=2_000, bytes=4 * MiB)
# The peak of reading a collection, in budgets: the pages within it are
# parsed, and a parse holds the answer, a copy of it and the objects at once.
# Without a budget, every test here reads to the server's fuse, 64 budgets.
PARSE_PEAK = 8


def _object(i: int, size: int) -> bytes:
    return json.dumps(
        {
            "metadata": {"name": f"cm-{i}", "namespace": "ns", "resourceVersion": str(i)},
            "data": {"k": "x" * size},
        }
    ).encode()


def _page(objects: list[bytes], rv: str = "1", more: bool = False) -> bytes:
    metadata = {"resourceVersion": rv, **({"continue": "next"} if more else {})}
    return b'{"metadata": %s, "items": [%s]}' % (json.dumps(metadata).encode(), b",".join(objects))


def endless_pages(size: int) -> Callable[[dict[str, str], Answer], Awaitable[None]]:
    """Every LIST page full (``size`` bytes of data per object, none for empty pages), and more."""
    page = _page([_object(i, size) for i in range(PAGE_SIZE)] if size else [], more=True)

    async def script(params: dict[str, str], answer: Answer) -> None:
        await answer.send(page)
        await answer.end()

    return script


async def endless_page(params: dict[str, str], answer: Answer) -> None:
    """One LIST page whose items never end."""
    item = b"," + _object(0, 4096)
    await answer.send(b'{"metadata": {"resourceVersion": "1"}, "items": [' + item[1:])
    while await answer.send(item * 64):
        pass
    await answer.end()


def _lines(objects: Iterator[bytes]) -> Iterator[bytes]:
    for obj in objects:
        yield b'{"type": "ADDED", "object": %s}\n' % obj


async def endless_events(params: dict[str, str], answer: Answer) -> None:
    """An empty LIST; then a watch that adds objects of new names without end."""
    if params.get("watch") != "true":
        await answer.send(_page([]))
        await answer.end()
        return
    i = 0
    while True:
        batch = b"".join(_lines(_object(n, 1024) for n in range(i, i + 256)))
        i += 256
        if not await answer.send(batch):
            break
    await answer.end()


@pytest.fixture
def traced() -> Iterator[Callable[[], int]]:
    """The peak of memory allocated since the test began, in bytes."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- a LIST: all its pages within one budget -------------------------------------


@pytest.mark.parametrize(
    ("size", "passed"),
    [(8192, "more than 4 MiB"), (16, "more than 2000 objects"), (0, "more than 8 pages")],
    ids=["large objects", "small objects", "empty pages"],
)
async def test_a_list_without_end_is_refused_at_its_budget(
    size: int, passed: str, traced: Callable[[], int]
) -> None:
    async with HostileServer(endless_pages(size)) as server, server.client() as http:
        with pytest.raises(OverBudget) as err:
            await list_pages(http, CONFIGMAPS, namespace="ns", budget=BUDGET)
    assert passed in str(err.value)
    assert str(err.value).startswith("the target's configmaps (namespace ns) holds")
    # Refused as it streamed: no more was kept than the budget, however
    # much the server had to send (up to its fuse of 256 MiB). A page
    # within the budget is parsed, which takes a few times its bytes at
    # its peak (the answer, its copy, the objects).
    assert traced() < PARSE_PEAK * BUDGET.bytes
    assert server.lists() <= BUDGET.items // PAGE_SIZE + 4


async def test_a_page_without_end_is_read_only_to_the_budget(traced: Callable[[], int]) -> None:
    async with HostileServer(endless_page) as server, server.client() as http:
        with pytest.raises(OverBudget, match="more than 4 MiB"):
            await list_pages(http, CONFIGMAPS, budget=BUDGET)
    assert traced() < PARSE_PEAK * BUDGET.bytes
    # Before the budget, the page was read to its own bound of 128 MiB.
    assert server.sent < client_module.MAX_ANSWER_BYTES // 4


@pytest.mark.parametrize(
    ("api", "metadata_only", "budget"),
    [
        (SECRETS, False, Budget(items=1_000, bytes=32 * MiB, memory=128 * MiB)),
        (SECRETS, True, METADATA_BUDGET),
        (
            ApiRef("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            False,
            Budget(items=4_000, bytes=128 * MiB, memory=1024 * MiB),
        ),
        (CONFIGMAPS, False, DEFAULT_BUDGET),
    ],
    ids=["release secrets", "metadata only", "crds", "anything else"],
)
def test_each_kind_has_its_default_budget(api: ApiRef, metadata_only: bool, budget: Budget) -> None:
    assert budget_for(api, metadata_only=metadata_only) == budget
    # No default lets one page past the bound each page is read to.
    assert budget.bytes <= client_module.MAX_ANSWER_BYTES


# ---- a reflector: within its budget over its watch's life, and alive ----------------


async def _reflect(
    server: HostileServer,
    http: httpx2.AsyncClient,
    until: Callable[[Reflector], bool],
    *,
    sleeps: list[float],
    budget: Budget | None = BUDGET,
    deadline: float = 20.0,
) -> tuple[Reflector, list[str], bool]:
    """Run a reflector until ``until`` holds; its first backoff sleep hangs (and is recorded)."""
    changes: list[str] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.Event().wait()

    reflector = Reflector(
        http,
        KEY,
        Link(http, "test"),
        lambda _k, kind, _name: changes.append(kind),
        budget=budget,
        sleep=sleep,
        rand=lambda: 0.0,
    )
    task = asyncio.create_task(reflector.run())

    async def ended() -> bool:
        return until(reflector) or task.done()

    try:
        await wait_for_async("the reflector's end", ended, deadline=deadline, interval=0.01)
        alive = not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return reflector, changes, alive


@pytest.mark.parametrize(
    "script",
    [endless_pages(8192), endless_page, endless_events],
    ids=["pages without end", "a page without end", "watch events without end"],
)
async def test_a_reflector_refuses_a_collection_past_its_budget_and_keeps_nothing(
    script: Callable[[dict[str, str], Answer], Awaitable[None]], traced: Callable[[], int]
) -> None:
    sleeps: list[float] = []
    async with HostileServer(script) as server, server.client() as http:
        reflector, changes, alive = await _reflect(
            server, http, lambda r: bool(sleeps), sleeps=sleeps
        )
    assert alive, "the reflector died"
    assert reflector.refusals == 1
    # Dropped, and said so (the stack is woken to read, and to report it).
    assert reflector.items == {} and reflector.held == 0 and not reflector.synced
    assert changes[-1] == "REFUSED"
    # Tried again only after the budget's backoff, not at once.
    assert sleeps == [BUDGET_BACKOFF.first]
    assert traced() < PARSE_PEAK * BUDGET.bytes


async def test_a_reflector_within_its_budget_keeps_what_it_watched() -> None:
    # The same endless events, under a budget they never pass before the
    # fuse: nothing refused, every object kept.
    sleeps: list[float] = []
    budget = Budget(items=100_000, bytes=64 * MiB)
    async with HostileServer(endless_events, fuse=2 * MiB) as server, server.client() as http:
        reflector, _, alive = await _reflect(
            server, http, lambda r: bool(sleeps), sleeps=sleeps, budget=budget
        )
    assert alive and reflector.refusals == 0
    assert len(reflector.items) > 1000
    assert 0 < reflector.held <= server.sent
    # The fuse ended that watch soon after it started: re-armed after a
    # backoff, not at once.
    assert sleeps == [REARM_BACKOFF.first]


# ---- memory: what a page's parse builds, and a target's and the shard's totals ----


def nested_page(unit: bytes, size: int) -> Callable[[dict[str, str], Answer], Awaitable[None]]:
    """One page of one object whose one field holds ``size`` bytes of ``unit`` repeated."""
    head = b'{"metadata": {"resourceVersion": "1"}, "items": [{"metadata": {"name": "a"}, "x": ['
    page = head + unit * (size // len(unit)) + b"0]}]}"

    async def script(params: dict[str, str], answer: Answer) -> None:
        await answer.send(page)
        await answer.end()

    return script


async def test_a_page_is_refused_by_what_its_parse_would_build(traced: Callable[[], int]) -> None:
    # 12 MiB of empty lists, within the 64 MiB of JSON a collection may
    # have: parsed, some 260 MiB (44 MiB of them held 1.06 GiB).
    async with HostileServer(nested_page(b"[],", 12 * MiB)) as server, server.client() as http:
        with pytest.raises(OverBudget, match="would take more than 512 MiB of memory"):
            await list_pages(http, CONFIGMAPS, budget=DEFAULT_BUDGET)
    # Stopped as it streamed (some 5 MiB in, the rest in socket buffers),
    # before anything was parsed.
    assert server.sent < 12 * MiB
    assert traced() < 32 * MiB


def _listed(rv: str, names: range, size: int) -> bytes:
    return _page([_object(i, size) for i in names], rv=rv)


async def test_a_target_past_its_total_is_refused_and_gives_back_what_it_held() -> None:
    # Two collections of one target, each within its own budget, past the
    # target's total together: the second is refused, the first kept.
    page = _listed("1", range(200), 2048)

    async def script(params: dict[str, str], answer: Answer) -> None:
        if params.get("watch") != "true":
            await answer.send(page)
        await answer.end()

    shard = Holdings("all its targets", 64 * MiB)
    target = Holdings("the target of test", json_cost(page) * 3 // 2, shard)
    changes: list[str] = []
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.Event().wait()

    async with HostileServer(script) as server, server.client() as http:
        link = Link(http, "test")
        first, second = (
            Reflector(
                http,
                WatchKey(CONFIGMAPS, namespace=ns),
                link,
                lambda _k, kind, _name: changes.append(kind),
                budget=BUDGET,
                sleep=sleep,
                rand=lambda: 0.0,
                holdings=target,
            )
            for ns in ("a", "b")
        )
        tasks = [asyncio.create_task(first.run())]

        async def first_synced() -> bool:
            return first.synced

        async def second_refused() -> bool:
            return bool(second.refusals)

        await wait_for_async("the first listed", first_synced, deadline=20, interval=0.01)
        tasks.append(asyncio.create_task(second.run()))
        await wait_for_async("the second refused", second_refused, deadline=20, interval=0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert len(first.items) == 200 and first.synced
    assert second.items == {} and not second.synced and "REFUSED" in changes
    assert 0 < first.built == target.held == shard.held
    first.release()
    assert target.held == shard.held == 0


@pytest.mark.parametrize(
    ("held", "take", "refused", "after"),
    [
        ((0, 0), 10, None, (10, 10)),
        ((90, 90), 20, "the target of t would take more than 100 bytes", (90, 90)),
        # The shard's total holds every target's: another target's fill it.
        ((10, 190), 20, "all its targets would take more than 200 bytes", (10, 190)),
        ((90, 190), -50, None, (40, 140)),
    ],
    ids=["within both", "past the target's", "past the shard's", "giving back"],
)
def test_a_targets_holdings_are_within_its_total_and_the_shards(
    held: tuple[int, int], take: int, refused: str | None, after: tuple[int, int]
) -> None:
    shard = Holdings("all its targets", 200)
    target = Holdings("the target of t", 100, shard)
    target.held, shard.held = held
    passed = target.take(take)
    assert (passed is None) == (refused is None)
    if refused is not None:
        assert passed is not None and refused in passed
    assert (target.held, shard.held) == after
