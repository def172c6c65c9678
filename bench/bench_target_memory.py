"""Benchmark: what one healthy target's connection and watches cost, in this process.

Opens --targets targets of the simulated fleet (tests/testenv/fleet.py) the
way the operator does (``kube.client.open_target``), then starts the watches
a Provided Standard stack runs on each (``observe.watches.WatchCache``), and
prints the growth of this process's RSS per target at each step, next to
what the reflectors hold (their objects' bytes on the wire) and the
connections and watches the fleet server counts. The difference between the
two is what the connections cost, not the caches.

    python bench/bench_target_memory.py [--targets 50]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lightkube.config.kubeconfig import KubeConfig  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402

from modelplane.api.models import ServingStackSpec  # noqa: E402
from modelplane.kube.client import OpenCount, Target, open_target  # noqa: E402
from modelplane.observe.state import wanted  # noqa: E402
from modelplane.observe.watches import WatchCache  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_kib() -> float:
    gc.collect()
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE / 1024


async def _measure(fleet: FleetServer, n: int, trace: int) -> None:
    spec = ServingStackSpec.model_validate(
        {
            "components": "Provided",
            "secrets": [{"type": "Kubeconfig", "name": "x", "key": "kubeconfig"}],
        }
    )
    want = wanted(spec)
    r0 = _rss_kib()
    count = OpenCount()
    targets: list[Target] = []
    for i in range(n):
        config = KubeConfig.from_dict(fleet.kubeconfig(i)).get()
        targets.append(await open_target(config, count=count))
    r1 = _rss_kib()
    print(f"a connection opened (no request yet): {(r1 - r0) / n:.0f} KiB per target")
    if trace:
        tracemalloc.start(trace)
        before = tracemalloc.take_snapshot()
    caches = [WatchCache(t.http, want, lambda: None) for t in targets]
    for cache in caches:
        cache.start()
    for _ in range(1200):
        await asyncio.sleep(0.5)
        if all(c.synced() and c.plurals for c in caches):
            break
    await asyncio.sleep(5)
    r2 = _rss_kib()
    reflectors = [r for c in caches for r in c.reflectors.values()]
    held = sum(r.held for r in reflectors)
    stats = fleet.stats()["total"]
    print(
        f"the watches running: {(r2 - r1) / n:.0f} KiB per target; "
        f"{len(reflectors) / n:.1f} reflectors holding {held / n / 1024:.0f} KiB of objects; "
        f"{stats['Conns'] / n:.1f} connections and {stats['Watches'] / n:.1f} watches each"
    )
    _print_copies(caches, n)
    if trace:
        _print_growth(before, tracemalloc.take_snapshot(), n, trace)
    for cache in caches:
        await cache.close()
    for target in targets:
        await target.close()


def _deep_size(obj: Any, seen: set[int]) -> int:
    """The memory of ``obj`` and what it holds, what ``seen`` holds already left out."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        size += sum(_deep_size(v, seen) for v in obj)
    return size


def _print_copies(caches: list[WatchCache], n: int) -> None:
    """What the reflectors' copies take by resource, per target; what targets share counts once."""
    seen: set[int] = set()
    by_resource: dict[str, int] = {}
    for cache in caches:
        for key, reflector in cache.reflectors.items():
            size = _deep_size(reflector.items, seen)
            by_resource[key.api.resource] = by_resource.get(key.api.resource, 0) + size
    total = sum(by_resource.values())
    print(f"the copies: {total / n / 1024:.1f} KiB per target, by resource:")
    for resource, size in sorted(by_resource.items(), key=lambda i: -i[1]):
        print(f"  {size / n / 1024:7.1f} KiB  {resource}")


def _print_growth(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int, depth: int
) -> None:
    """The Python allocations the watches added, per target, by where they were made."""
    diffs = after.compare_to(before, "traceback" if depth > 1 else "lineno")
    total = sum(d.size_diff for d in diffs)
    print(f"Python objects the watches added: {total / n / 1024:.0f} KiB per target; the largest:")
    for d in diffs[:25]:
        print(f"  {d.size_diff / n / 1024:6.1f} KiB, {d.count_diff / n:6.1f} blocks per target:")
        for frame in list(d.traceback)[-depth:]:
            print(f"      {frame.filename.split('site-packages/')[-1]}:{frame.lineno}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--seed", type=Path, help="a seed file to reuse")
    add_crds_option(parser)
    parser.add_argument(
        "--trace",
        type=int,
        default=0,
        metavar="FRAMES",
        help="also trace the watches' Python allocations, FRAMES deep, and print the largest",
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mp-target-memory-") as tmp,
        FleetServer(
            Path(tmp) / "fleet", args.targets, seed=args.seed, crds=crds_for(args.crds)
        ) as fleet,
    ):
        asyncio.run(_measure(fleet, args.targets, args.trace))


if __name__ == "__main__":
    main()
