"""Benchmark: a shard's memory per healthy target, with real CRDs, before and after a change.

One shard of healthy Provided targets (the simulated fleet, as in
bench/bench_fleet_healthy.py), each carrying the upstream CRDs of a real
Standard target (``--crds real``, the default, when ``../shared/fixtures``
is there; ``--crds fixture``: the project's small stand-ins). The hub is a
real kube-apiserver. For each code under test (``--before``: a git ref, its
``src`` exported and put first on PYTHONPATH; then this worktree's), one
operator runs over shard 0 with half the stacks in it; once every stack is
Ready and no target was written to for --settle seconds, its RSS is read;
then the other half is labelled into shard 0, and once they are Ready and
quiet too, it is read again. What one more target costs is the slope
between the two, so that what the process holds whatever its stacks (the
interpreter, its modules, the hub's watch) is not counted in it.

With ``--steps K`` the second half comes in K steps, each Ready and quiet
before the next: whether what a target costs depends on how many come in
at once. Prints, per code: RSS at each size, MiB per 1,000 targets and the
peak RSS (VmHWM) up to each size. With ``--census`` the operators run under
bench/live_census.py, and what each holds at the larger size is printed by
type and by holder (untraced: the RSS stays the figure). With
``--trace FRAMES`` the operators run under bench/heap_window.py, tracing
their Python allocations while the second half comes in: the sites of what
those targets added and still hold are printed, in KiB per target. Traced,
RSS is not the figure (tracing costs memory and time of its own). With
``--gc`` the operators run under bench/gc_pauses.py, and each full
garbage collection (every object scanned, the event loop stopped) is
counted: how many, the longest and their total, up to the first size
settled and while the second half came in and settled.

    python bench/bench_shard_memory.py --targets 1000 --before HEAD~3
    python bench/bench_shard_memory.py --targets 400 --trace 1
    python bench/bench_shard_memory.py --targets 1000 --census
    python bench/bench_shard_memory.py --targets 1000 --gc --before HEAD~1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.integration.substrate import find_binaries  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402

from bench_fleet_healthy import (  # noqa: E402
    NS,
    SHARD_LABEL,
    _peak_rss_mib,
    _raise_nofile,
    _ReadyWatch,
    _rss_mib,
    _stack,
    _until,
    create_stacks,
    forget_statuses,
    serve_servingstacks,
)
from bench_settled_shard import _export, _settle, _stop  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, PLURAL  # noqa: E402


@dataclass
class Size:
    """One operator's settled state: its RSS, and its Python heap when traced."""

    rss: float
    snapshot: tracemalloc.Snapshot | None
    peak: float = 0.0
    census: str = ""
    # Full collections up to this size: (when it ended, how long it took in ms).
    collections: list[tuple[float, float]] = field(default_factory=list)


def _start_operator(
    src: Path,
    hub: TestEnv,
    log: Path,
    selector: str,
    trace: tuple[Path, int] | None,
    census: Path | None,
    gc_log: Path | None = None,
) -> subprocess.Popen[bytes]:
    if gc_log:
        runner = [str(ROOT / "bench" / "gc_pauses.py"), str(gc_log)]
    elif trace:
        runner = [str(ROOT / "bench" / "heap_window.py"), str(trace[0]), str(trace[1])]
    elif census:
        runner = [str(ROOT / "bench" / "live_census.py"), str(census)]
    else:
        runner = ["-m"]
    args = [
        sys.executable,
        *runner,
        "modelplane.cli.main",
        "run",
        "--kubeconfig",
        str(hub.kubeconfig_path),
        "--namespace",
        NS,
        "--chart-repository",
        "http://127.0.0.1:9/charts",
        "--gaie-manifests-url",
        "http://127.0.0.1:9/manifests/gaie-crds",
        "--resync",
        "300",
        "--selector",
        selector,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "MODELPLANE_HELM": str(find_binaries()["helm"]),
    }
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _label(http: Any, names: list[str], shard: int) -> None:
    """Put the stacks ``names`` in ``shard``: the operator over shard 0 takes them, or lets go."""

    def one(name: str) -> None:
        answer = http.patch(
            f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{NS}/{PLURAL}/{name}",
            content=json.dumps({"metadata": {"labels": {SHARD_LABEL: str(shard)}}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        answer.raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))


def measure(
    name: str,
    src: Path,
    hub: TestEnv,
    fleet: FleetServer,
    ready: Callable[[int], bool],
    any_ready: Callable[[], bool],
    names: list[str],
    work: Path,
    args: argparse.Namespace,
) -> tuple[Size, Size]:
    """One operator over shard 0: settled with half the stacks, then with all of them."""
    half = len(names) // 2
    tag = name.split()[0]
    log = work / f"op-{tag}.log"
    snap = work / f"heap-{tag}.snap"
    trace = (snap, args.trace) if args.trace else None
    census = work / f"census-{tag}.txt" if args.census and not trace else None
    gc_log = work / f"gc-{tag}.log" if args.gc else None
    with hub.http_client(timeout=60) as http:
        _label(http, names[half:], 1)
        # Ready from the code measured before this one would be taken for this one's.
        forget_statuses(http, names, lambda: not any_ready())
        proc = _start_operator(src, hub, log, f"{SHARD_LABEL}=0", trace, census, gc_log)
        try:
            _until("operator up", lambda: "authentication has finished" in log.read_text(), 180)
            time.sleep(args.settle)
            _settle(fleet, lambda: ready(half), args.settle, args.ready_timeout)
            small = Size(_rss_mib(proc.pid), None, collections=_collections(gc_log))
            if trace:
                proc.send_signal(signal.SIGUSR1)  # bench/heap_window.py: tracing from now
            small.peak = _peak_rss_mib(proc.pid)
            step = -(-half // args.steps)
            for start in range(half, len(names), step):
                _label(http, names[start : start + step], 0)
                time.sleep(args.settle)
                end = min(start + step, len(names))
                _settle(fleet, lambda end=end: ready(end), args.settle, args.ready_timeout)
            large = Size(
                _rss_mib(proc.pid), None, _peak_rss_mib(proc.pid), collections=_collections(gc_log)
            )
            if trace:
                proc.send_signal(signal.SIGUSR1)  # the snapshot: what the second half added
                _until("the heap snapshot", snap.exists, 600)
                large.snapshot = tracemalloc.Snapshot.load(str(snap))
            if census:
                proc.send_signal(signal.SIGUSR2)  # bench/live_census.py: what it holds now
                _until("the census", census.exists, 600)
                large.census = census.read_text()
            return small, large
        finally:
            _stop(proc)


def _collections(gc_log: Path | None) -> list[tuple[float, float]]:
    """The full collections bench/gc_pauses.py logged so far: (end time, milliseconds)."""
    if gc_log is None or not gc_log.exists():
        return []
    return [
        (float(when), float(took))
        for when, took, _ in (line.split() for line in gc_log.read_text().splitlines())
    ]


def _pauses(collections: list[tuple[float, float]]) -> str:
    if not collections:
        return "no full collection"
    took = [ms for _, ms in collections]
    longest, total = max(took), sum(took) / 1000
    return f"{len(took)} full collections, longest {longest:.0f} ms, {total:.1f} s in all"


def report(name: str, small: Size, large: Size, half: int, depth: int) -> None:
    per_target = (large.rss - small.rss) / half
    print(
        f"{name}: RSS {small.rss:.0f} MiB at {half} targets, {large.rss:.0f} MiB at {2 * half}: "
        f"{per_target * 1000:.0f} MiB per 1,000 targets ({per_target * 1024:.0f} KiB a target); "
        f"peak RSS {small.peak:.0f} MiB up to {half}, {large.peak:.0f} MiB up to {2 * half}"
    )
    if large.collections:
        later = large.collections[len(small.collections) :]
        print(
            f"    garbage collector (bench/gc_pauses.py): up to {half} settled, "
            f"{_pauses(small.collections)}; then up to {2 * half} settled, {_pauses(later)}"
        )
    if large.census:
        print(f"    census of the operator at {2 * half} targets (bench/live_census.py):")
    for line in large.census.splitlines():
        print(f"      {line}")
    if large.snapshot is None:
        return
    stats = large.snapshot.statistics("traceback" if depth > 1 else "lineno")
    total = sum(s.size for s in stats)
    print(f"    Python allocations held: {total / half / 1024:.1f} KiB a target; the largest:")
    for stat in stats[:30]:
        where = " <- ".join(
            f"{f.filename.split('site-packages/')[-1].split('/src/')[-1]}:{f.lineno}"
            for f in list(stat.traceback)[-depth:]
        )
        print(f"      {stat.size / half / 1024:7.2f} KiB {stat.count / half:6.1f} blocks  {where}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=1000, help="the larger size (even)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds with no target write")
    parser.add_argument("--before", default="", help="git ref of the code before (none: skip)")
    parser.add_argument("--ready-timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=Path, help="a seed file to reuse (tests/testenv/fleet.py)")
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    parser.add_argument(
        "--census", action="store_true", help="at the larger size, what the operator holds"
    )
    parser.add_argument(
        "--gc", action="store_true", help="count the operators' full garbage collections"
    )
    parser.add_argument(
        "--steps", type=int, default=1, help="the second half in this many steps, each settled"
    )
    add_crds_option(parser)
    parser.add_argument(
        "--trace", type=int, default=0, metavar="FRAMES", help="snapshot the Python heap"
    )
    args = parser.parse_args()
    half = args.targets // 2
    _raise_nofile()
    print(f"targets {half} and {2 * half}, one shard, before {args.before or '(none)'}")
    with tempfile.TemporaryDirectory(prefix="mp-shard-memory-") as tmp_s:
        work = args.keep or Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        codes = [("after", ROOT / "src")]
        if args.before:
            codes.insert(0, (f"before ({args.before})", _export(args.before, work / "before")))
        fleet = FleetServer(work / "fleet", 2 * half, seed=args.seed, crds=crds_for(args.crds))
        fleet.start()
        hub = TestEnv(work / "hub")
        try:
            hub.start()
            serve_servingstacks(hub)
            names = [f"t{i:05d}" for i in range(2 * half)]
            with hub.http_client(timeout=60) as http, _ReadyWatch(hub) as watch:
                create_stacks(
                    http,
                    [(names[i], fleet.kubeconfig(i), _stack(names[i], 0)) for i in range(2 * half)],
                )

                def ready(count: int) -> bool:
                    got = dict(watch.ready)
                    return all(got.get(n) for n in names[:count])

                def any_ready() -> bool:
                    return any(dict(watch.ready).values())

                results = [
                    (name, measure(name, src, hub, fleet, ready, any_ready, names, work, args))
                    for name, src in codes
                ]
            for name, (small, large) in results:
                report(name, small, large, half, args.trace)
        finally:
            fleet.stop()
            hub.stop()


if __name__ == "__main__":
    main()
