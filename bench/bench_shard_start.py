"""Benchmark: an operator that starts over a shard of stacks already on the hub, before and after.

What an operator pod's restart (an upgrade of the operator, a rescheduled
pod) meets: every stack of its shard on the hub at once, none of them seen
by it yet. One hub (a real kube-apiserver) and one simulated fleet
(tests/testenv/fleet.py, the upstream CRDs on every target with ``--crds
real``, the default when ``../shared/fixtures`` is there); each code under
test gets a fresh shard of --targets stacks of its own, created before its
operator starts, so that neither finds the other's finalizers, statuses or
claims. The code at ``--before`` (a git ref, its ``src`` exported and put
first on PYTHONPATH) runs first, then this worktree's.

Prints, per code: the peak RSS (VmHWM) and when it came, the RSS 10 s after
the start, the most connections open to the hub at once (the operator's
sockets whose peer is the hub's port, sampled every 0.25 s), the stacks
Ready one minute after the start, the time until every stack was Ready,
and the RSS once they are.

    python bench/bench_shard_start.py --targets 1000 --before HEAD~1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402
from tests.testenv.sockets import connections_to  # noqa: E402

from bench_fleet_healthy import (  # noqa: E402
    _peak_rss_mib,
    _raise_nofile,
    _ReadyWatch,
    _rss_mib,
    _stack,
    create_stacks,
    serve_servingstacks,
)
from bench_settled_shard import _export, _stop  # noqa: E402
from bench_shard_memory import _start_operator  # noqa: E402

SAMPLE_SECONDS = 0.25


@dataclass
class Start:
    """What one operator's start over its shard cost."""

    peak: float = 0.0
    peak_at: float = 0.0
    rss_10s: float = 0.0
    hub_connections: int = 0
    ready_1min: int = 0
    all_ready: float = 0.0
    settled: float = 0.0


def measure(
    src: Path, hub: TestEnv, port: int, names: list[str], shard: int, work: Path, timeout: float
) -> Start:
    """Start an operator over ``shard`` (its stacks ``names`` on the hub) and follow it."""
    log = work / f"op-{shard}.log"
    found = Start()
    with _ReadyWatch(hub) as watch:
        proc = _start_operator(src, hub, log, f"bench.modelplane.ai/shard={shard}", None, None)
        try:
            t0 = time.monotonic()
            while True:
                now = time.monotonic() - t0
                rss = _rss_mib(proc.pid)
                if rss > found.peak:
                    found.peak, found.peak_at = rss, now
                if not found.rss_10s and now >= 10:
                    found.rss_10s = rss
                found.hub_connections = max(found.hub_connections, connections_to(port, proc.pid))
                ready = sum(1 for n in names if watch.ready.get(n))
                if not found.ready_1min and now >= 60:
                    found.ready_1min = ready
                if ready == len(names) and not found.all_ready:
                    found.all_ready = now
                # A minute at least: the figure a minute in is read either way.
                if found.all_ready and now >= 60:
                    break
                if now > timeout:
                    raise TimeoutError(f"{len(names) - ready} stacks not Ready within {timeout} s")
                time.sleep(SAMPLE_SECONDS)
            # The sampling may miss a peak between two samples; the kernel's mark does not.
            found.peak = max(found.peak, _peak_rss_mib(proc.pid))
            found.settled = _rss_mib(proc.pid)
            return found
        finally:
            _stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=1000, help="stacks in each code's shard")
    parser.add_argument("--before", default="", help="git ref of the code before (none: skip)")
    parser.add_argument("--ready-timeout", type=float, default=1800.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    add_crds_option(parser)
    args = parser.parse_args()
    _raise_nofile()
    with tempfile.TemporaryDirectory(prefix="mp-shard-start-") as tmp_s:
        work = args.keep or Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        codes = [("after", ROOT / "src")]
        if args.before:
            codes.insert(0, (f"before ({args.before})", _export(args.before, work / "before")))
        n = args.targets
        fleet = FleetServer(work / "fleet", n * len(codes), crds=crds_for(args.crds)).start()
        hub = TestEnv(work / "hub")
        try:
            hub.start()
            serve_servingstacks(hub)
            port = urlsplit(hub.kubeconfig["clusters"][0]["cluster"]["server"]).port or 443
            print(f"{n} stacks a shard, on the hub before the operator starts")
            for shard, (name, src) in enumerate(codes):
                names = [f"s{shard}-{i:05d}" for i in range(n)]
                with hub.http_client(timeout=60) as http:
                    create_stacks(
                        http,
                        [
                            (names[i], fleet.kubeconfig(shard * n + i), _stack(names[i], shard))
                            for i in range(n)
                        ],
                    )
                s = measure(src, hub, port, names, shard, work, args.ready_timeout)
                print(
                    f"{name}: peak RSS {s.peak:.0f} MiB (the highest sample {s.peak_at:.0f} s in), "
                    f"{s.rss_10s:.0f} MiB 10 s in; hub connections at most {s.hub_connections}; "
                    f"Ready {s.ready_1min} a minute in, all {s.all_ready:.0f} s in; "
                    f"RSS then {s.settled:.0f} MiB",
                    flush=True,
                )
        finally:
            fleet.stop()
            hub.stop()


if __name__ == "__main__":
    main()
