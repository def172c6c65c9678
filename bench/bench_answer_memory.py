"""Benchmark: the memory a hostile answer costs, before and after it was bounded by what it builds.

Three of issue 40's findings, each as the bytes the process held at its
peak (tracemalloc), against a loopback server where a socket matters:

- a release Secret of ``{},`` (finding 2): its JSON parsed whole, as it
  was at the old 64 MiB inflate bound (here 16 MiB of it), against
  ``observe.releases.deployed_release`` now;
- a typed GET answered with a large body (finding 3): what reading it
  whole held, against the guarded transport now;
- a LIST page of ``[],`` inside the 64 MiB collection budget (finding 4):
  parsed whole, against ``list_pages`` now.

    python bench/bench_answer_memory.py
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from lightkube.config.kubeconfig import KubeConfig  # noqa: E402
from lightkube.resources.coordination_v1 import Lease  # noqa: E402
from tests.hostile_server import Answer, HostileServer  # noqa: E402

from modelplane.kube.budget import DEFAULT_BUDGET  # noqa: E402
from modelplane.kube.client import list_pages, open_target  # noqa: E402
from modelplane.observe.releases import deployed_release  # noqa: E402
from modelplane.plan.observed import ObservedRelease  # noqa: E402
from modelplane.untrusted import Limits, load_json  # noqa: E402
from modelplane.wire import ApiRef  # noqa: E402

MiB = 1 << 20
RELEASE = ObservedRelease(name="r", namespace="ns", revision=1, status="deployed", digest="d")


def peak(run: Callable[[], Any]) -> tuple[int, str]:
    tracemalloc.start()
    try:
        outcome = "read"
        try:
            run()
        except Exception as err:  # what it was refused with, shown
            outcome = f"refused: {str(err)[:70]}"
        return tracemalloc.get_traced_memory()[1], outcome
    finally:
        tracemalloc.stop()


def apeak(run: Callable[[], Awaitable[Any]]) -> tuple[int, str]:
    return peak(lambda: asyncio.run(run()))


def release_bomb() -> None:
    text = b'{"manifest":"","chart":[' + b"{}," * (16 * MiB // 3) + b"{}]}"
    bomb = gzip.compress(text, compresslevel=9)
    secret = {"data": {"release": base64.b64encode(base64.b64encode(bomb)).decode()}}
    print(f"release Secret of {len(secret['data']['release']) // 1024} KiB, 16 MiB inflated:")
    before = peak(lambda: load_json(text, Limits(max_bytes=64 * MiB, max_depth=128)))
    after = peak(lambda: deployed_release(secret, RELEASE))
    _show(before, after)


def _serve(body: bytes) -> Callable[[dict[str, str], Answer], Awaitable[None]]:
    async def script(params: dict[str, str], answer: Answer) -> None:
        await answer.send(body)
        await answer.end()

    return script


async def _typed_get(server: HostileServer) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    target = await open_target(KubeConfig.from_dict(doc).get(), deny=(), trust_env=False)
    try:
        await target.client.get(Lease, "claim", namespace="x")
    finally:
        await target.close()


def typed_get() -> None:
    body = b'{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"claim"},'
    body += b'"x":"' + b" " * (64 * MiB) + b'"}'
    print("a typed GET of the claim Lease, answered with 64 MiB:")

    async def before() -> None:
        async with HostileServer(_serve(body)) as server, server.client() as http:
            (await http.get("/apis/coordination.k8s.io/v1/namespaces/x/leases/claim")).json()

    async def after() -> None:
        async with HostileServer(_serve(body)) as server:
            await _typed_get(server)

    _show(apeak(before), apeak(after))


def list_page() -> None:
    head = b'{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"},"x":['
    page = head + b"[]," * (16 * MiB // 3) + b"0]}]}"
    print("a LIST page of 16 MiB of [], inside the 64 MiB collection budget:")
    configmaps = ApiRef("", "v1", "configmaps")

    async def before() -> None:
        async with HostileServer(_serve(page)) as server, server.client() as http:
            load_json((await http.get("/api/v1/configmaps")).content, Limits(max_bytes=128 * MiB))

    async def after() -> None:
        async with HostileServer(_serve(page)) as server, server.client() as http:
            await list_pages(http, configmaps, budget=DEFAULT_BUDGET)

    _show(apeak(before), apeak(after))


def _show(before: tuple[int, str], after: tuple[int, str]) -> None:
    print(f"  before: peak {before[0] / MiB:7.1f} MiB, {before[1]}")
    print(f"  after:  peak {after[0] / MiB:7.1f} MiB, {after[1]}")


if __name__ == "__main__":
    release_bomb()
    typed_get()
    list_page()
