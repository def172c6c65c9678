"""Benchmark: what one more open WATCH stream costs in a target's HTTP transport chain.

Opens --targets targets of the simulated fleet (tests/testenv/fleet.py) the
way the operator does (``kube.client.open_target``: the deadline, guard and
bound wrappers over httpx2, httpcore2 and the fair HTTP/2 connection), reads
once on each so that its connection is up, then opens --watches idle watch
streams on each, sent and read as a reflector does (``send`` with a
watch's timeouts and ``UNBOUNDED``, its body read by ``watch_body``). It prints what
the open streams hold, per stream, by the library that allocated it and by
site, traced with tracemalloc: the chain alone, no objects kept, no
reflector.

    python bench/bench_watch_chain.py [--targets 20] [--watches 9] [--frames 8]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import tracemalloc
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from lightkube.config.kubeconfig import KubeConfig  # noqa: E402
from tests.testenv.fleet import FleetServer  # noqa: E402

from modelplane.kube.bounded import BOUND, UNBOUNDED, shed_headers  # noqa: E402
from modelplane.kube.client import OpenCount, Target, open_target  # noqa: E402
from modelplane.kube.watch_body import watch_body  # noqa: E402

# Resources every simulated target serves, watched in turn.
PATHS = (
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
)


async def _hold(
    http: httpx2.AsyncClient, path: str, rv: str, opened: Callable[[], None], raw: bool
) -> None:
    """One idle watch, opened and read as ``Reflector._watch`` does, until cancelled."""
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": rv,
        "timeoutSeconds": "1800",
    }
    timeout = httpx2.Timeout(10.0, read=1830.0)
    request = http.build_request(
        "GET",
        path,
        params=params,
        timeout=timeout,
        headers={"Accept": "application/json"},
        extensions={BOUND: UNBOUNDED},
    )
    response = await http.send(request, stream=True)
    try:
        shed_headers(response)
        opened()
        async for _chunk in watch_body(response) if raw else response.aiter_bytes():
            pass
    finally:
        await response.aclose()


async def _open(
    targets: list[Target], rvs: list[str], k: int, raw: bool
) -> list[asyncio.Task[None]]:
    """``k`` more watches on each target, once all of them have their answer's headers."""
    done = asyncio.get_running_loop().create_future()
    left = len(targets) * k

    def opened() -> None:
        nonlocal left
        left -= 1
        if not left:
            done.set_result(None)

    tasks = [
        asyncio.create_task(_hold(target.http, PATHS[j % len(PATHS)], rv, opened, raw))
        for target, rv in zip(targets, rvs, strict=True)
        for j in range(k)
    ]
    await asyncio.wait_for(done, 120)
    return tasks


async def _rv(target: Target) -> str:
    response = await target.http.get("/api/v1/namespaces", params={"limit": "1"})
    response.raise_for_status()
    return str(response.json()["metadata"]["resourceVersion"])


def _library(filename: str) -> str:
    """The library a file belongs to: the package under site-packages, or the stdlib module."""
    if "site-packages/" in filename:
        return filename.split("site-packages/")[-1].split("/")[0]
    if "/modelplane/" in filename:
        return "modelplane/" + filename.split("/modelplane/")[-1]
    return "stdlib:" + Path(filename).name


async def _measure(fleet: FleetServer, n: int, k: int, frames: int, hold: float, raw: bool) -> None:
    count = OpenCount()
    targets = [
        await open_target(KubeConfig.from_dict(fleet.kubeconfig(i)).get(), count=count)
        for i in range(n)
    ]
    rvs = [await _rv(t) for t in targets]
    # One watch first, so that each connection has a stream reading for it:
    # what the others add is then what one more costs.
    tasks = await _open(targets, rvs, 1, raw)
    await asyncio.sleep(1)
    gc.collect()
    tracemalloc.start(frames)
    before = tracemalloc.take_snapshot()
    tasks += await _open(targets, rvs, k, raw)
    # Every stream is now waiting for its next chunk; held on, each reads the
    # server's bookmarks.
    await asyncio.sleep(hold)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    watches = fleet.stats()["total"]["Watches"]
    _report(before, after, n * k, watches)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for target in targets:
        await target.close()


def _report(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, streams: int, served: int
) -> None:
    diffs = after.compare_to(before, "traceback")
    total = sum(d.size_diff for d in diffs)
    print(
        f"{streams} more streams opened ({served} open at the server): "
        f"{total / streams / 1024:.2f} KiB per stream"
    )
    by_lib: dict[str, float] = defaultdict(float)
    for d in diffs:
        by_lib[_library(d.traceback[-1].filename)] += d.size_diff
    print("by the library of the allocating frame, bytes per stream:")
    for lib, size in sorted(by_lib.items(), key=lambda i: -i[1])[:20]:
        print(f"  {size / streams:8.0f}  {lib}")
    print("by site (the allocating line, then the first line of the chain that led to it):")
    by_site: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for d in diffs:
        frames = list(reversed(list(d.traceback)))
        key = " <- ".join(_short(f.filename) + f":{f.lineno}" for f in frames[:1] + _caller(frames))
        by_site[key][0] += d.size_diff
        by_site[key][1] += d.count_diff
    for key, (size, blocks) in sorted(by_site.items(), key=lambda i: -i[1][0])[:90]:
        print(f"  {size / streams:7.0f} B {blocks / streams:5.2f} blocks  {key}")


def _caller(frames: list[tracemalloc.Frame]) -> list[tracemalloc.Frame]:
    """The first frame of the chain's own code past the stdlib's (contextlib, asyncio)."""
    for frame in frames[1:]:
        if "/python3.11/" not in frame.filename or "site-packages" in frame.filename:
            return [frame]
    return []


def _short(filename: str) -> str:
    return filename.split("site-packages/")[-1].split("/src/")[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument(
        "--watches", type=int, default=9, help="watches measured a target, beside a first"
    )
    parser.add_argument("--frames", type=int, default=8, help="tracemalloc frames")
    parser.add_argument("--seed", type=Path, help="a seed file to reuse")
    parser.add_argument(
        "--hold", type=float, default=1.0, help="seconds the streams are held before the count"
    )
    parser.add_argument(
        "--bookmark", default="1m", help="how often the server sends each watch a bookmark"
    )
    parser.add_argument(
        "--read",
        choices=("bytes", "raw"),
        default="raw",
        help="iterate a watch's body as aiter_bytes, or as the reflector does (kube.watch_body)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mp-watch-chain-") as tmp:
        fleet = FleetServer(Path(tmp) / "fleet", args.targets, seed=args.seed)
        fleet.start("-bookmark", args.bookmark)
        try:
            asyncio.run(
                _measure(
                    fleet, args.targets, args.watches, args.frames, args.hold, args.read == "raw"
                )
            )
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
