"""Benchmark: what a settled Managed target costs a shard: memory, requests, CPU, change to hub.

The targets are the simulated fleet (bench/fleet_server), each serving a copy
of one real Managed Standard install (tests/testenv/fleet_managed.py: the
fixture charts installed by the operator's own helm on a real kube-apiserver,
then dumped): every release's Secrets, the objects of every stored manifest,
the CRDs the charts brought, replaced by the upstream CRDs of a Standard
target with ``--crds real`` (the default when ``../shared/fixtures/upstream``
is there), as an install of the real charts would carry. The hub is a
real kube-apiserver; the fixture charts are served on loopback, as the
seed's were, so the operator can read them if it wants to. Every stack
asks for what the seed was installed with
(``managed_spec``), so the operator finds each release installed, its
storage the one a real helm wrote, and in sync: it should run no helm and
write nothing to a target once the stack is claimed and Ready.

One operator runs over shard 0. With --small stacks in it, once every stack
is Ready and no target was written to for --settle seconds, it is measured
over --window seconds; then the rest of the stacks are labelled into shard 0
and, once Ready and quiet, it is measured again. Per size: RSS, CPU seconds
a minute, target reads and writes a minute (the fleet server's counts, by
request), hub writes a minute, helm runs (the operator's log), and the time
from a change on one target (its Gateway's address, as Envoy Gateway writes
it) to the hub's ``status.gateway.address``, p50 and max over --changes.
What one more Managed target costs is the slope between the two sizes, so
that what the process holds whatever its stacks is not counted in it.

    python bench/bench_managed_fleet.py --small 100 --targets 300
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.integration.hubs import client_for, free_port, scrape_metrics  # noqa: E402
from tests.integration.substrate import Helm, run_operator, serve_substrate  # noqa: E402
from tests.testenv import TestEnv, find_binaries  # noqa: E402
from tests.testenv.fleet import FleetServer, add_crds_option, crds_for  # noqa: E402
from tests.testenv.fleet_managed import managed_spec, write_managed_seed  # noqa: E402

from bench_fleet_healthy import (  # noqa: E402
    NS,
    SHARD_LABEL,
    _change_latencies,
    _cpu_seconds,
    _raise_nofile,
    _ReadyWatch,
    _rss_mib,
    _until,
    create_stacks,
    serve_servingstacks,
)
from bench_settled_shard import (  # noqa: E402
    READS,
    WRITES,
    Counts,
    _delta,
    _fleet_counts,
    _hub_counts,
    _settle,
    _stop,
)
from bench_shard_memory import _label  # noqa: E402
from modelplane.api.models import API_GROUP, API_VERSION, KIND  # noqa: E402


@dataclass
class Settled:
    """One size's settled figures; counts are per minute, for every target of the shard."""

    targets: int
    rss: float
    cpu: float
    target: Counts
    hub: Counts
    helm_runs: int
    latencies: list[float]
    # Watches open on the shard's targets at the window's end.
    watches: int
    # Target writes, and helm actions, from the stacks' arrival in the shard until settled.
    arrival_writes: Counts
    arrival_helm: int

    def total(self, side: str, verbs: tuple[str, ...]) -> float:
        counts = self.target if side == "target" else self.hub
        return sum(
            v
            for k, v in counts.items()
            if k.split(" ", 1)[0] in verbs and not (side == "hub" and k.endswith(" leases"))
        )


def _stack(name: str, shard: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": NS, "labels": {SHARD_LABEL: str(shard)}},
        "spec": managed_spec(name),
    }


def _helm_runs(port: int, hub_env: TestEnv) -> int:
    """The helm actions the operator ran so far (its modelplane_helm_action_seconds count)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = scrape_metrics(port, hub_env.token, 30).text
    return int(
        sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "modelplane_helm_action_seconds_count"
        )
    )


def measure(
    size: int,
    proc: Any,
    port: int,
    hub_env: TestEnv,
    fleet: FleetServer,
    ready: Callable[[], bool],
    args: argparse.Namespace,
    arrived: tuple[Counts, int],
) -> Settled:
    time.sleep(args.settle)
    _settle(fleet, ready, args.settle, args.ready_timeout)
    helm0 = _helm_runs(port, hub_env)
    arrival = _delta(_fleet_counts(fleet), arrived[0], 1.0)
    scale = 60.0 / args.window
    target0, hub0, cpu0 = _fleet_counts(fleet), _hub_counts(hub_env), _cpu_seconds(proc.pid)
    time.sleep(args.window)
    target1, hub1, cpu1 = _fleet_counts(fleet), _hub_counts(hub_env), _cpu_seconds(proc.pid)
    rss = _rss_mib(proc.pid)
    watches = int((fleet.stats().get("total") or {}).get("Watches", 0))
    latencies = _change_latencies(client_for(hub_env), fleet, 0, "t00000", args.changes)
    return Settled(
        targets=size,
        rss=rss,
        cpu=(cpu1 - cpu0) * scale,
        target=_delta(target1, target0, scale),
        hub=_delta(hub1, hub0, scale),
        helm_runs=_helm_runs(port, hub_env) - helm0,
        latencies=latencies,
        watches=watches,
        arrival_writes={k: v for k, v in arrival.items() if k.split(" ", 1)[0] in WRITES},
        arrival_helm=helm0 - arrived[1],
    )


def report(s: Settled) -> None:
    lat = s.latencies
    print(
        f"{s.targets} Managed targets settled: RSS {s.rss:.0f} MiB; CPU {s.cpu:.2f} s/min; "
        f"target reads {s.total('target', READS):.1f}/min, writes "
        f"{s.total('target', WRITES):.1f}/min, watch requests "
        f"{s.total('target', ('WATCH',)):.1f}/min, watches open {s.watches} "
        f"({s.watches / s.targets:.1f} a target); hub writes {s.total('hub', WRITES):.1f}/min; "
        f"helm actions in the window {s.helm_runs}; change to hub p50 "
        f"{statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms over {len(lat)}"
    )
    for k, v in sorted(s.target.items(), key=lambda i: -i[1]):
        print(f"      {v:9.2f}  {k}")
    print(f"    on arrival until settled: helm actions {s.arrival_helm}, target writes:")
    for k, v in sorted(s.arrival_writes.items(), key=lambda i: -i[1]):
        print(f"      {v:9.0f}  {k}")


def slope(small: Settled, large: Settled) -> None:
    n = large.targets - small.targets

    def per(f: Callable[[Settled], float]) -> float:
        return (f(large) - f(small)) / n

    rss = per(lambda s: s.rss)
    cpu = per(lambda s: s.cpu)
    reads = per(lambda s: s.total("target", READS))
    writes = per(lambda s: s.total("target", WRITES))
    print(
        f"per Managed target (slope {small.targets} -> {large.targets}): "
        f"{rss * 1024:.0f} KiB, CPU {cpu * 1000:.1f} ms/min, target reads {reads:.3f}/min, "
        f"writes {writes:.3f}/min"
    )
    at = 1000
    if large.targets >= at:
        return  # measured, above
    print(
        f"extrapolated to {at} Managed targets a shard (not measured): RSS "
        f"{large.rss + rss * (at - large.targets):.0f} MiB, CPU "
        f"{large.cpu + cpu * (at - large.targets):.1f} s/min, target reads "
        f"{large.total('target', READS) + reads * (at - large.targets):.0f}/min"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=100, help="the first size")
    parser.add_argument("--targets", type=int, default=300, help="the second size")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds with no target write")
    parser.add_argument("--window", type=float, default=120.0, help="seconds measured")
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--resync", type=float, default=300.0)
    parser.add_argument("--ready-timeout", type=float, default=1800.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the logs")
    add_crds_option(parser)
    args = parser.parse_args()
    _raise_nofile()
    print(f"Managed targets {args.small} and {args.targets}, one shard, resync {args.resync:.0f} s")
    with tempfile.TemporaryDirectory(prefix="mp-managed-fleet-") as tmp_s:
        work = args.keep or Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        hub_env = TestEnv(work / "hub")
        helm = Helm(find_binaries()["helm"], work / "helm-home")
        with contextlib.ExitStack() as stack:
            # The seed's install and the operator measured read the same URLs.
            substrate = stack.enter_context(
                contextlib.contextmanager(serve_substrate)(helm, work / "charts")
            )
            seed = write_managed_seed(
                work / "managed-seed.json", work, substrate, crds_for(args.crds)
            )
            fleet = FleetServer(work / "fleet", args.targets, seed=seed).start()
            stack.callback(fleet.stop)
            hub_env.start()
            stack.callback(hub_env.stop)
            serve_servingstacks(hub_env)
            names = [f"t{i:05d}" for i in range(args.targets)]
            http = stack.enter_context(hub_env.http_client(timeout=60))
            watch = stack.enter_context(_ReadyWatch(hub_env))

            create_stacks(
                http,
                [
                    (name, fleet.kubeconfig(i), _stack(name, 0 if i < args.small else 1))
                    for i, name in enumerate(names)
                ],
            )

            def ready(count: int) -> Callable[[], bool]:
                return lambda: all(watch.ready.get(n) for n in names[:count])

            log, port = work / "operator.log", free_port()
            proc = run_operator(
                hub_env.kubeconfig_path, substrate, NS, log, "--metrics-port", str(port),
                "--resync", str(args.resync), "--selector", f"{SHARD_LABEL}=0",
            )  # fmt: skip
            stack.callback(_stop, proc)
            _until("operator up", lambda: "authentication has finished" in log.read_text(), 180)
            arrived = (_fleet_counts(fleet), 0)
            small = measure(
                args.small, proc, port, hub_env, fleet, ready(args.small), args, arrived
            )
            report(small)
            arrived = (_fleet_counts(fleet), _helm_runs(port, hub_env))
            _label(http, names[args.small :], 0)
            large = measure(
                args.targets, proc, port, hub_env, fleet, ready(args.targets), args, arrived
            )
            report(large)
            slope(small, large)


if __name__ == "__main__":
    main()
