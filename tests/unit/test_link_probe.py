"""kube.link's Link: a lost target's probe backs off, unless a probe is asked for now.

Issue 40, finding 7: the probe of a lost target ran every 0.25 s for as long
as the target was lost, each a new connection and a handshake slot taken.
"""

from __future__ import annotations

import asyncio

import httpx2

from modelplane.backoff import Backoff
from modelplane.kube.link import PROBE_BACKOFF, Link

PROBES_LOST = 12
# How long a test may hang before it fails, never a measure of speed.
GUARD = 20.0


async def test_the_probe_of_a_lost_target_backs_off_until_it_answers() -> None:
    probes = 0

    def answer(request: httpx2.Request) -> httpx2.Response:
        nonlocal probes
        probes += 1
        if probes <= PROBES_LOST:
            raise httpx2.ConnectError("the target is lost", request=request)
        return httpx2.Response(200, text="ok")

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    transport = httpx2.MockTransport(answer)
    async with httpx2.AsyncClient(transport=transport, base_url="https://target") as http:
        link = Link(http, "test", sleep=sleep, rand=lambda: 0.0)
        assert link.lost(httpx2.ConnectError("gone"))
        async with asyncio.timeout(10):
            await link.up.wait()
        await link.close()
    assert probes == PROBES_LOST + 1
    assert waits[0] == PROBE_BACKOFF.first
    assert waits == sorted(waits)
    assert waits[-1] == PROBE_BACKOFF.cap


async def test_a_probe_asked_for_now_does_not_wait_out_the_backoff() -> None:
    # A reconcile that waited out its wait on a lost target's copies asks
    # for a probe at once: the target may be back, and the next probe of
    # the backoff (here an hour off) too late to spare a read of it whole.
    probes = 0

    def answer(request: httpx2.Request) -> httpx2.Response:
        nonlocal probes
        probes += 1
        return httpx2.Response(200, text="ok")

    hour = Backoff(first=3600.0, cap=3600.0)
    transport = httpx2.MockTransport(answer)
    async with httpx2.AsyncClient(transport=transport, base_url="https://target") as http:
        link = Link(http, "test", hour)
        link.probe_now()  # up: nothing to probe
        assert link.lost(httpx2.ConnectError("gone"))
        await asyncio.sleep(0)
        assert probes == 0 and not link.up.is_set()
        link.probe_now()
        async with asyncio.timeout(GUARD):
            await link.up.wait()
        await link.close()
    assert probes == 1
