"""Benchmark: how fast a target change reaches the hub when the watches are under stress.

The integration tests (tests/integration/test_watch_survival.py,
test_watch_gone.py) prove that such changes arrive through the watches; this
measures how fast, with the real operator process, kube-apiservers and
helm, at ``--resync 300`` so only the watches can bring a change in time:

1. re-arms: watches the server ends every 2-4 s (``--watch-timeout 2``),
   changes at random moments between 0 and 1.5 s apart (issue 12 holds each
   to 1 s);
2. outage: the first change after the target was stopped for ``--outage``
   seconds and started again, timed from the moment it answers;
3. compaction: a target without a watch cache, etcd compacted under the
   watches before each change, made 0 to 3 s later.

p50, p99 and max are printed for each; a change not on the hub after
``--miss-after`` seconds counts as missed (it would wait for the resync).

    python bench/bench_watch.py [--changes 30] [--outage 60] [--compactions 6]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import Harness, client_for, install_servingstack_crd  # noqa: E402
from tests.integration.substrate import Helm, serve_substrate  # noqa: E402
from tests.testenv import TestEnv, find_binaries  # noqa: E402

from modelplane.catalog.configuration import GATEWAY_NAME, NS  # noqa: E402

GATEWAY = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")


def _until(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check`` holds, polled every 10 ms; TimeoutError after ``timeout``."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if check():
            return time.perf_counter() - start
        time.sleep(0.01)
    raise TimeoutError("condition not reached")


def _spread(samples: list[float]) -> str:
    if not samples:
        return "no sample"
    ms = sorted(x * 1000 for x in samples)
    if len(ms) == 1:
        return f"{ms[0]:.0f} ms"
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    return f"p50 {statistics.median(ms):.0f} ms, p99 {p99:.0f} ms, max {ms[-1]:.0f} ms"


def _ready(h: Harness) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in h.status().get("conditions", [])
    )


def _propagation(h: Harness, value: str, miss_after: float) -> float | None:
    """Seconds from writing the Gateway's address on the target to the hub showing it."""
    start = time.perf_counter()
    h.target.patch(
        GATEWAY.Status,
        GATEWAY_NAME,
        {"status": {"addresses": [{"type": "IPAddress", "value": value}]}},
        namespace=NS,
        patch_type=PatchType.MERGE,
    )

    def arrived() -> bool:
        return bool((h.status().get("gateway") or {}).get("address") == value)

    try:
        _until(arrived, miss_after)
    except TimeoutError:
        return None
    return time.perf_counter() - start


def _report(name: str, samples: list[float | None], miss_after: float) -> None:
    arrived = [s for s in samples if s is not None]
    print(f"{name}: {_spread(arrived)} over {len(arrived)} change(s)")
    if len(arrived) < len(samples):
        print(f"  {len(samples) - len(arrived)} change(s) not on the hub after {miss_after:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=30, help="changes across watch re-arms")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds the target is down")
    parser.add_argument("--compactions", type=int, default=6, help="changes after compactions")
    parser.add_argument("--miss-after", type=float, default=30.0)
    args = parser.parse_args()
    rng = random.Random(12)

    with tempfile.TemporaryDirectory(prefix="mp-bench-watch-") as tmp_s:
        tmp = Path(tmp_s)
        hub_env = TestEnv(tmp / "hub").start()
        substrate_gen = serve_substrate(
            Helm(find_binaries()["helm"], tmp / "helm"), tmp / "substrate"
        )
        substrate = next(substrate_gen)
        harnesses: list[Harness] = []
        targets: list[TestEnv] = []

        def operator(name: str, target: TestEnv, spec: dict[str, Any]) -> Harness:
            targets.append(target.start())
            (tmp / name).mkdir()
            h = Harness(hub, hub_env, target, substrate, tmp / name, name)
            harnesses.append(h)
            h.put_secret({"kubeconfig": h.kubeconfig_text()})
            h.create(spec)
            h.start("--resync", "300", "--watch-timeout", "2")
            ready = _until(lambda: _ready(h), 180)
            print(f"{name}: Ready {ready:.1f} s after the stack was created")
            return h

        try:
            hub = client_for(hub_env, "bench")
            install_servingstack_crd(hub, hub_env, deadline=60)

            # 1. Re-arms, and 2. the same target stopped and started again.
            h = operator("rearm", TestEnv(tmp / "target"), {"gateway": {"hostname": "b.example"}})
            samples: list[float | None] = []
            for i in range(args.changes):
                time.sleep(rng.uniform(0.0, 1.5))  # the moment of the change, chosen at random
                samples.append(_propagation(h, f"203.0.113.{10 + i}", args.miss_after))
            _report("across watch re-arms (--watch-timeout 2)", samples, args.miss_after)

            h.target_env.stop()
            time.sleep(args.outage)
            h.target_env.start()
            after = _propagation(h, "203.0.113.200", args.miss_after)
            _report(f"first change after {args.outage:.0f} s down", [after], args.miss_after)

            # 3. Compaction under the watches of an uncached target.
            uncached = TestEnv(tmp / "uncached", extra_apiserver_args=("--watch-cache=false",))
            g = operator("gone", uncached, {})
            samples = []
            for i in range(args.compactions):
                uncached.compact_etcd()
                time.sleep(rng.uniform(0.0, 3.0))  # the moment of the change, chosen at random
                samples.append(_propagation(g, f"203.0.113.{100 + i}", args.miss_after))
            _report("after etcd compactions (410 Gone)", samples, args.miss_after)
        finally:
            for h in harnesses:
                h.stop()
            for env in targets:
                env.stop()
            next(substrate_gen, None)
            hub_env.stop()


if __name__ == "__main__":
    main()
