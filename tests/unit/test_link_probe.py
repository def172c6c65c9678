"""kube.reflector's Link: a lost target's probe backs off.

Issue 40, finding 7: the probe of a lost target ran every 0.25 s for as long
as the target was lost, each a new connection and a handshake slot taken.
"""

from __future__ import annotations

import asyncio

import httpx2

from modelplane.kube.link import PROBE_BACKOFF, Link

PROBES_LOST = 12


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
