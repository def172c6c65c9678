"""Benchmark: what the mirror preflight costs, per image and per stack, against a real registry.

    python bench/bench_mirror_preflight.py [--stacks N]

Starts Debian's docker-registry on loopback (HTTPS, htpasswd Basic auth,
as ``tests/registry.py`` does; ``hack/test-deps.sh`` installs it), copies
in every image a Standard stack's releases run under ``*=<registry>/m``,
then times:

- one image, asked cold (no answer kept): the requests one lookup sends
  and its time;
- one stack's preflight, cold: every release's images, as the operator
  looks them up before each install;
- ``--stacks`` more stacks on the same versions, warm: what the kept
  answers leave of the cost for a fleet.

Requests are counted at the registry's side of the client (each request
the transport sends), time with ``time.perf_counter``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.registry import PASSWORD, USER, LoopbackRegistry, loopback_registry  # noqa: E402

from modelplane.actions.registry import Credentials, Registry  # noqa: E402
from modelplane.api.models import ServingStack  # noqa: E402
from modelplane.plan import plan  # noqa: E402
from modelplane.plan.images import parse_rules  # noqa: E402
from modelplane.plan.mirror_images import Answer, release_lookups  # noqa: E402
from modelplane.plan.sources import Sources  # noqa: E402

EXAMPLE = ROOT / "examples" / "servingstack.yaml"


class _Counting(httpx2.AsyncHTTPTransport):
    requests = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        _Counting.requests += 1
        return await super().handle_async_request(request)


def _registry(mirror: LoopbackRegistry) -> Registry:
    return Registry(transport=_Counting(verify=mirror.ssl_context()), timeout=5.0)


def _stack_images(mirror: LoopbackRegistry) -> list[tuple[str, ...]]:
    stack = ServingStack.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    p = plan(stack, None, Sources(image_mirrors=parse_rules([f"*={mirror.host}/m"])))
    return [images for r in p.releases if (images := release_lookups(r))]


async def _preflight(registry: Registry, releases: list[tuple[str, ...]]) -> None:
    creds = Credentials(USER, PASSWORD)
    for images in releases:
        found = await registry.lookup_all(images, lambda r, n: creds)
        assert all(x.answer is Answer.FOUND for x in found), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, loopback_registry(Path(work)) as mirror:
        releases = _stack_images(mirror)
        images = sorted({i for r in releases for i in r})
        for image in images:
            mirror.push(image.removeprefix(f"{mirror.host}/"))

        registry = _registry(mirror)
        _Counting.requests = 0
        started = time.perf_counter()
        asyncio.run(_preflight(registry, [images[:1]]))
        one = time.perf_counter() - started
        print(f"one image, cold: {_Counting.requests} requests, {one * 1000:.1f} ms")

        registry = _registry(mirror)
        _Counting.requests = 0
        started = time.perf_counter()
        asyncio.run(_preflight(registry, releases))
        cold = time.perf_counter() - started
        print(
            f"one stack, cold: {len(images)} images in {len(releases)} releases, "
            f"{_Counting.requests} requests, {cold * 1000:.1f} ms "
            f"({cold * 1000 / len(images):.1f} ms per image; releases asked one after another)"
        )

        _Counting.requests = 0
        started = time.perf_counter()
        for _ in range(args.stacks):
            asyncio.run(_preflight(registry, releases))
        warm = time.perf_counter() - started
        print(
            f"{args.stacks} more stacks, warm (answers kept 5 min): {_Counting.requests} "
            f"requests, {warm * 1000 / args.stacks:.2f} ms per stack"
        )


if __name__ == "__main__":
    main()
