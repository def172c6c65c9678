"""Benchmark: what a settled shard pays when its connections to the targets are cut.

One shard of healthy Provided targets (the simulated fleet, as in
bench/bench_settled_shard.py), each carrying the upstream CRDs of a real
Standard target (``--crds real``, the default, when ``../shared/fixtures``
is there), reached through a TCP relay in this process (tests/relay.py).
For each code under test (``--before``: a git ref, its ``src`` exported
and put first on PYTHONPATH; then this worktree's), one operator comes up
over every stack, settles (every stack Ready, no target read or written
for --settle seconds), and then every connection to the targets is cut
and refused for --outage seconds, as a network blip or a loaded shard
missing its watches' deadlines does. Measured from the cut until the
shard is settled again: the operator's CPU seconds, the bytes the targets
sent it, its target requests by verb and resource, per target, and the
most stacks not Ready at once on the hub meanwhile.

    python bench/bench_watch_cut.py --targets 200 --before HEAD~1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.relay import Relay  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402

from bench_fleet_healthy import (  # noqa: E402
    _cpu_seconds,
    _raise_nofile,
    _ReadyWatch,
    _stack,
    _until,
    create_stacks,
    forget_statuses,
    serve_servingstacks,
)
from bench_settled_shard import (  # noqa: E402
    Counts,
    _delta,
    _export,
    _fleet_counts,
    _lines,
    _start_operator,
    _stop,
)


class RelayThread:
    """A ``Relay`` served by an event loop of its own, in a thread beside the benchmark."""

    def __init__(self, port: int) -> None:
        self.relay = Relay(port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> RelayThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.relay.__aenter__(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        done = asyncio.run_coroutine_threadsafe(self.relay.__aexit__(None, None, None), self._loop)
        done.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self.relay.cut)

    def mend(self) -> None:
        self._loop.call_soon_threadsafe(self.relay.mend)


def _relayed(fleet: FleetServer, relay: Relay, i: int) -> dict[str, Any]:
    """Target ``i``'s kubeconfig, its server reached through ``relay``."""
    kubeconfig = fleet.kubeconfig(i)
    kubeconfig["clusters"][0]["cluster"]["server"] = f"{relay.url}/t/{i}"
    return kubeconfig


def _quiet(fleet: FleetServer, ready: Callable[[], bool], quiet: float, timeout: float) -> float:
    """Until every stack is Ready and no target was read or written for ``quiet`` s.

    Returns when the last read or write was seen.
    """
    end = time.monotonic() + timeout
    last: tuple[float, float] = (-1.0, -1.0)
    since = time.monotonic()
    while time.monotonic() < end:
        total = fleet.stats().get("total") or {}
        now = (float(total.get("Reads", 0)), float(total.get("Writes", 0)))
        if now != last or not ready():
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return since
        time.sleep(1)
    raise TimeoutError("the shard never settled")


class _MostUnready:
    """The most stacks not Ready at once on the hub, sampled twice a second while open."""

    def __init__(self, watch: _ReadyWatch) -> None:
        self.most = 0
        self._watch = watch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _MostUnready:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            ready = dict(self._watch.ready).values()
            self.most = max(self.most, sum(not r for r in ready))


@dataclass
class Figures:
    """From the cut until settled again: per target, but the CPU (the whole shard's)."""

    requests: Counts
    cpu: float
    served_mib: float
    seconds: float
    unready: int

    def total(self, verbs: tuple[str, ...]) -> float:
        return sum(v for k, v in self.requests.items() if k.split(" ", 1)[0] in verbs)


def measure(
    name: str,
    src: Path,
    hub: TestEnv,
    fleet: FleetServer,
    relay: RelayThread,
    watch: _ReadyWatch,
    names: list[str],
    work: Path,
    args: argparse.Namespace,
) -> Figures:
    """One code's operator up and settled; the cut; settled again."""

    def ready() -> bool:
        got = dict(watch.ready)
        return all(got.get(n) for n in names)

    log = work / f"op-{name.split()[0]}.log"
    with hub.http_client(timeout=60) as http:
        # Ready from the code measured before this one would be taken for this one's.
        forget_statuses(http, names, lambda: not any(dict(watch.ready).values()))
    proc = _start_operator(src, hub, log, args.resync, None)
    try:
        _until("operator up", lambda: "authentication has finished" in log.read_text(), 180)
        _quiet(fleet, ready, args.settle, args.ready_timeout)
        counts0, cpu0, served0 = _fleet_counts(fleet), _cpu_seconds(proc.pid), relay.relay.served
        with _MostUnready(watch) as unready:
            start = time.monotonic()
            relay.cut()
            time.sleep(args.outage)
            relay.mend()
            settled = _quiet(fleet, ready, args.settle, args.ready_timeout)
        counts1, cpu1, served1 = _fleet_counts(fleet), _cpu_seconds(proc.pid), relay.relay.served
        return Figures(
            _delta(counts1, counts0, 1.0 / len(names)),
            cpu1 - cpu0,
            (served1 - served0) / 2**20,
            settled - start,
            unready.most,
        )
    finally:
        _stop(proc)


def report(name: str, f: Figures, targets: int) -> None:
    print(
        f"{name}: from the cut to the last target read {f.seconds:.0f} s; operator CPU "
        f"{f.cpu:.1f} s ({f.cpu / targets * 1000:.0f} ms a target); the targets sent "
        f"{f.served_mib:.1f} MiB ({f.served_mib / targets * 1024:.0f} KiB a target); per "
        f"target: {f.total(('LIST',)):.2f} LISTs, {f.total(('GET',)):.2f} GETs, "
        f"{f.total(('WATCH',)):.2f} WATCHes; most stacks not Ready at once: {f.unready}"
    )
    print(f"    target requests per target, by request:\n{_lines(f.requests) or '      none'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--outage", type=float, default=10.0, help="seconds cut off")
    parser.add_argument("--resync", type=float, default=300.0)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds with no target read")
    parser.add_argument("--before", default="", help="git ref of the code before (none: skip)")
    parser.add_argument("--ready-timeout", type=float, default=1200.0)
    parser.add_argument("--seed", type=Path, help="a seed file to reuse (tests/testenv/fleet.py)")
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    add_crds_option(parser)
    args = parser.parse_args()
    _raise_nofile()
    print(
        f"targets {args.targets}, one shard, cut off for {args.outage:.0f} s, "
        f"crds {args.crds}, before {args.before or '(none)'}"
    )
    with tempfile.TemporaryDirectory(prefix="mp-watch-cut-") as tmp_s:
        work = args.keep or Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        codes = [("after", ROOT / "src")]
        if args.before:
            codes.insert(0, (f"before ({args.before})", _export(args.before, work / "before")))
        fleet = FleetServer(work / "fleet", args.targets, seed=args.seed, crds=crds_for(args.crds))
        fleet.start()
        hub = TestEnv(work / "hub")
        try:
            hub.start()
            serve_servingstacks(hub)
            names = [f"t{i:05d}" for i in range(args.targets)]
            port = int(fleet.address.rsplit(":", 1)[1])
            with (
                RelayThread(port) as relay,
                hub.http_client(timeout=60) as http,
                _ReadyWatch(hub) as watch,
            ):
                create_stacks(
                    http,
                    [
                        (names[i], _relayed(fleet, relay.relay, i), _stack(names[i], 0))
                        for i in range(args.targets)
                    ],
                )
                figures = [
                    (name, measure(name, src, hub, fleet, relay, watch, names, work, args))
                    for name, src in codes
                ]
            for name, f in figures:
                report(name, f, args.targets)
        finally:
            fleet.stop()
            hub.stop()


if __name__ == "__main__":
    main()
