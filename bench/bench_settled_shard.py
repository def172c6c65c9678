"""Benchmark: what a settled shard still does, with nothing changing, before and after a change.

One shard of N healthy Provided targets (the simulated fleet, as in
bench/bench_fleet_healthy.py), its stacks Ready on a real kube-apiserver
hub. The operator of each code under test runs in turn against the same
hub and fleet: the code at ``--before`` (a git ref, its ``src`` exported to
a temporary directory and put first on PYTHONPATH), then this worktree's.
Each comes up, reconciles every stack until they are Ready and quiet
(--settle seconds without a write to a target), and is then watched for
--window seconds (by default two resync periods, so that every stack
resyncs within it). The --relist period (an hour) is longer than the
window: its direct read (about 23 target reads a stack) is not in the
figures, and adds 23 / 60 reads a minute a stack when spread over it.

Prints, per code, per minute and per 100 targets:
- target reads (GET, LIST, discovery) and writes, from the fleet server's
  counts, and by verb and resource;
- target WATCH requests (re-arms: a stream opened, not a read);
- hub reads and writes, from the hub's apiserver_request_total, by verb and
  resource; the totals leave Leases out (the hub's kube-apiserver renews its
  own every 10 s; the operator runs without --leader-elect here), and the
  benchmark's own watch of the stacks re-lists them when it ends;
- the operator's CPU seconds (--profile: the window's profile of its main
  thread, written beside the logs).

    python bench/bench_settled_shard.py --targets 300 --resync 300 --before 8e28a16
    python bench/bench_settled_shard.py --targets 200 --resync 60 --window 180 --before 8e28a16

Counts are per minute of the window, divided by the targets and multiplied
by 100; a count that comes once a resync is 100 / (resync in minutes).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.integration.substrate import find_binaries  # noqa: E402
from tests.testenv import TestEnv  # noqa: E402
from tests.testenv.fleet import FleetServer  # noqa: E402

from bench_fleet_healthy import (  # noqa: E402
    NS,
    SHARD_LABEL,
    _cpu_seconds,
    _raise_nofile,
    _ReadyWatch,
    _stack,
    _until,
    create_stacks,
    forget_statuses,
    serve_servingstacks,
)

Counts = dict[str, float]


@dataclass
class Figures:
    """One code's settled window, per minute per 100 targets."""

    target: Counts
    hub: Counts
    cpu: float

    def total(self, side: str, verbs: tuple[str, ...]) -> float:
        """The requests of ``verbs``; on the hub, its own Lease renewals left out."""
        counts = self.target if side == "target" else self.hub
        return sum(
            v
            for k, v in counts.items()
            if k.split(" ", 1)[0] in verbs and not (side == "hub" and k.endswith(" leases"))
        )


READS = ("GET", "LIST")
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def _hub_counts(env: TestEnv) -> Counts:
    """The hub's requests so far by "VERB resource[/subresource]"."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Counts = {}
    for family in text_string_to_metric_families(env.metrics_text()):
        for s in family.samples:
            if s.name != "apiserver_request_total":
                continue
            what = "/".join(p for p in (s.labels.get("resource"), s.labels.get("subresource")) if p)
            key = f"{s.labels.get('verb', '')} {what or s.labels.get('component', '')}"
            out[key] = out.get(key, 0.0) + s.value
    return out


def _fleet_counts(fleet: FleetServer) -> Counts:
    """The fleet's requests so far by "VERB group/version/resource" (GET discovery too)."""
    return {k: float(v) for k, v in (fleet.stats().get("byKind") or {}).items()}


def _delta(after: Counts, before: Counts, scale: float) -> Counts:
    out = {k: (v - before.get(k, 0.0)) * scale for k, v in after.items()}
    return {k: v for k, v in out.items() if v}


def _export(ref: str, into: Path) -> Path:
    """``ref``'s src/ exported to ``into``: the code before, importable by PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _start_operator(
    src: Path, hub: TestEnv, log: Path, resync: float, profile: Path | None
) -> subprocess.Popen[bytes]:
    # Under a profile of the window alone when asked (bench/profile_window.py).
    runner = [str(ROOT / "bench" / "profile_window.py"), str(profile)] if profile else ["-m"]
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
        str(resync),
        "--selector",
        f"{SHARD_LABEL}=0",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "MODELPLANE_HELM": str(find_binaries()["helm"]),
    }
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _settle(fleet: FleetServer, ready: Callable[[], bool], quiet: float, timeout: float) -> None:
    """Until every stack is Ready and no target was written to for ``quiet`` seconds."""
    end = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < end:
        writes = float((fleet.stats().get("total") or {}).get("Writes", 0))
        if writes != last or not ready():
            last, since = writes, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(1)
    raise TimeoutError("the shard never settled")


def measure(
    name: str,
    src: Path,
    hub: TestEnv,
    fleet: FleetServer,
    ready: Callable[[], bool],
    unready: Callable[[], bool],
    names: list[str],
    work: Path,
    args: argparse.Namespace,
) -> Figures:
    """One code's operator up, settled, and watched for the window."""
    log = work / f"op-{name}.log"
    profile = work / f"op-{name.split()[0]}.prof" if args.profile else None
    # Ready from the code measured before this one would be taken for this one's.
    with hub.http_client(timeout=60) as http:
        forget_statuses(http, names, unready)
    proc = _start_operator(src, hub, log, args.resync, profile)
    try:
        _until("operator up", lambda: "authentication has finished" in log.read_text(), 180)
        # The stacks' first reconciles by this operator, then quiet.
        time.sleep(args.settle)
        _settle(fleet, ready, args.settle, args.ready_timeout)
        scale = 60.0 / args.window * 100.0 / args.targets
        if profile:
            proc.send_signal(signal.SIGUSR1)
        target0, hub0, cpu0 = _fleet_counts(fleet), _hub_counts(hub), _cpu_seconds(proc.pid)
        time.sleep(args.window)
        target1, hub1, cpu1 = _fleet_counts(fleet), _hub_counts(hub), _cpu_seconds(proc.pid)
        if profile:
            proc.send_signal(signal.SIGUSR2)
            _until("the profile written", profile.exists, 60)
        return Figures(
            _delta(target1, target0, scale), _delta(hub1, hub0, scale), (cpu1 - cpu0) * scale
        )
    finally:
        _stop(proc)


def _lines(counts: Mapping[str, float]) -> str:
    return "\n".join(f"      {v:9.2f}  {k}" for k, v in sorted(counts.items(), key=lambda i: -i[1]))


def report(name: str, f: Figures) -> None:
    print(
        f"{name}: per minute per 100 targets: target reads {f.total('target', READS):.2f}"
        f", target writes {f.total('target', WRITES):.2f}, target watches "
        f"{f.total('target', ('WATCH',)):.2f}; hub reads {f.total('hub', READS):.2f}, "
        f"hub writes {f.total('hub', WRITES):.2f}; "
        f"operator CPU {f.cpu:.3f} s"
    )
    print(f"    target, by request:\n{_lines(f.target) or '      none'}")
    print(f"    hub, by request:\n{_lines(f.hub) or '      none'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=300)
    parser.add_argument("--resync", type=float, default=300.0)
    parser.add_argument("--window", type=float, help="seconds watched (two resyncs by default)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds with no target write")
    parser.add_argument("--before", default="", help="git ref of the code before (none: skip)")
    parser.add_argument("--ready-timeout", type=float, default=1200.0)
    parser.add_argument("--seed", type=Path, help="a seed file to reuse (tests/testenv/fleet.py)")
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    parser.add_argument(
        "--profile", action="store_true", help="profile each operator's window (op-*.prof)"
    )
    args = parser.parse_args()
    args.window = args.window or 2 * args.resync
    _raise_nofile()
    print(
        f"targets {args.targets}, one shard, resync {args.resync:.0f} s, "
        f"window {args.window:.0f} s, before {args.before or '(none)'}"
    )
    with tempfile.TemporaryDirectory(prefix="mp-settled-") as tmp_s:
        work = args.keep or Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        codes = [("after", ROOT / "src")]
        if args.before:
            codes.insert(0, (f"before ({args.before})", _export(args.before, work / "before")))
        fleet = FleetServer(work / "fleet", args.targets, seed=args.seed).start()
        hub = TestEnv(work / "hub")
        try:
            hub.start()
            serve_servingstacks(hub)
            names = [f"t{i:05d}" for i in range(args.targets)]
            with hub.http_client(timeout=60) as http, _ReadyWatch(hub) as watch:
                create_stacks(
                    http,
                    [
                        (names[i], fleet.kubeconfig(i), _stack(names[i], 0))
                        for i in range(args.targets)
                    ],
                )
                figures = []

                def all_ready() -> bool:
                    ready = dict(watch.ready)
                    return all(ready.get(n) for n in names)

                def none_ready() -> bool:
                    return not any(dict(watch.ready).values())

                for name, src in codes:
                    figures.append(
                        (
                            name,
                            measure(
                                name, src, hub, fleet, all_ready, none_ready, names, work, args
                            ),
                        )
                    )
                    missing = [n for n in names if not watch.ready.get(n)]
                    if missing:
                        print(f"{name}: {len(missing)} stacks not Ready, e.g. {missing[:3]}")
            for name, f in figures:
                report(name, f)
        finally:
            fleet.stop()
            hub.stop()


if __name__ == "__main__":
    main()
