"""Benchmark: the DRA kubelet plugin's upgrade, node by node by the operator vs the chart's own.

A hub API server and a simulated target of four GPU nodes and a CPU node
(kwok, the real kube-scheduler and kube-controller-manager), the operator
running a Managed Standard stack with the DRA driver's fixture chart (its
versions run plugin images of their own version), and the plugin stand-in
of tests/integration/kubelet_plugin.py publishing each node's ResourceSlice
while the plugin's pod there is Ready. Each run:

1. the operator's upgrade: the stack's DRA driver pin is moved to the next
   fixture version; timed from that edit until every GPU node serves a
   plugin of the new version (its pod Ready, its slice published), as the
   watch of pods and slices shows it; the operator rolls the plugin a node
   at a time (the DaemonSet on OnDelete, ``--node-agent-max-unavailable 1``);
2. the chart's own rollout of the same change: the operator stopped, ``helm
   upgrade`` of the same release to the next version with the values the
   operator composed, but ``kubeletPlugin.updateStrategy.type=RollingUpdate``
   (the chart's default, ``maxUnavailable: 100%``), timed likewise; then the
   stack's pin follows and the operator is started again.

For each, the most GPU nodes seen at once without a serving plugin.

    python bench/bench_node_agent_upgrade.py [--runs 1]

Needs the H200 hardware profile of the shared fixtures (GPU nodes).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import (  # noqa: E402
    SS,
    Harness,
    client_for,
    install_servingstack_crd,
)
from tests.integration.kubelet_plugin import DRIVER, PluginStandIn, PluginWatch  # noqa: E402
from tests.integration.simcluster import simulated  # noqa: E402
from tests.integration.substrate import (  # noqa: E402
    EXTRA_VERSIONS,
    Helm,
    Substrate,
    serve_substrate,
)
from tests.testenv import TestEnv, find_binaries  # noqa: E402
from tests.testenv.nodes import HardwareMissingError, NodeLayout, hardware_dir  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

from modelplane.vocabulary import ReadyReason  # noqa: E402

LAYOUT = NodeLayout.parse("gpu=4,cpu=1")
GPU_NODES = [name for name, gpu in LAYOUT.names() if gpu]
VERSIONS = [DRIVER.version, *EXTRA_VERSIONS[DRIVER.name]]
HUB_NS = "bench-node-agents"
DEADLINE = 300.0


@dataclass(frozen=True)
class Upgrade:
    how: str
    seconds: float
    worst: list[str]


def _next(version: str) -> str:
    return VERSIONS[(VERSIONS.index(version) + 1) % len(VERSIONS)]


def _timed(watch: PluginWatch, version: str, how: str, start: float) -> Upgrade:
    wait_for(
        f"every GPU node serving plugin {version}", lambda: watch.rolled(version), deadline=DEADLINE
    )
    seconds = time.monotonic() - start
    watch.check()
    return Upgrade(how, seconds, list(watch.worst))


def _by_operator(h: Harness, watch: PluginWatch, version: str) -> Upgrade:
    watch.reset()
    start = time.monotonic()
    h.create({"versions": {"nvidiaDraDriver": version}})
    done = _timed(watch, version, "operator", start)
    _ready(h)
    return done


def _by_chart(h: Harness, helm: Helm, watch: PluginWatch, version: str) -> Upgrade:
    assert DRIVER.chart is not None
    watch.reset()
    start = time.monotonic()
    helm.run(
        "upgrade", DRIVER.release_name, DRIVER.chart.chart,
        "--repo", h.substrate.chart_repository, "--version", version,
        "--namespace", DRIVER.namespace, "--reuse-values",
        "--set", "kubeletPlugin.updateStrategy.type=RollingUpdate",
        "--kubeconfig", str(h.target_env.kubeconfig_path),
    )  # fmt: skip
    return _timed(watch, version, "chart", start)


def _ready(h: Harness) -> None:
    """Ready for the stack's current spec (not what the status said of an older one)."""
    generation = h.hub.get(SS, "stack", namespace=h.ns).metadata.generation  # type: ignore[union-attr]
    h.wait_condition("Ready", "True", deadline=DEADLINE, generation=generation)


def _start(h: Harness, version: str) -> None:
    h.create({"versions": {"nvidiaDraDriver": version}})
    h.start()
    _ready(h)
    reason = h.condition("Ready").get("reason")
    assert reason != ReadyReason.NODE_AGENTS_ROLLING, reason


@contextlib.contextmanager
def _served(helm: Helm, root: Path) -> Iterator[Substrate]:
    yield from serve_substrate(helm, root, workloads=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    try:
        hardware_dir()
    except HardwareMissingError as exc:
        print(exc, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-node-agents-") as tmp:
        root = Path(tmp)
        helm = Helm(find_binaries()["helm"], root / "helm-home")
        hub_env = TestEnv(root / "hub").start()
        try:
            t0 = time.monotonic()
            with (
                _served(helm, root / "substrate") as substrate,
                simulated(root / "target", nodes=str(LAYOUT)) as target_env,
                PluginStandIn(target_env, GPU_NODES) as standin,
                PluginWatch(target_env, GPU_NODES) as watch,
            ):
                print(f"simulated target of {LAYOUT} up in {time.monotonic() - t0:.1f}s")
                results = _bench(root, hub_env, target_env, substrate, helm, watch, args.runs)
                standin.check()
        finally:
            hub_env.stop()
    _report(results)
    return 0


def _bench(
    root: Path,
    hub_env: TestEnv,
    target_env: TestEnv,
    substrate: Substrate,
    helm: Helm,
    watch: PluginWatch,
    runs: int,
) -> list[Upgrade]:
    hub = client_for(hub_env)
    install_servingstack_crd(hub, hub_env, deadline=60)
    h = Harness(hub, hub_env, target_env, substrate, root, HUB_NS)
    h.put_secret({"kubeconfig": h.kubeconfig_text()})
    out: list[Upgrade] = []
    version = DRIVER.version
    try:
        t0 = time.monotonic()
        _start(h, version)
        print(f"stack Ready at {version} in {time.monotonic() - t0:.1f}s")
        for run in range(runs):
            version = _next(version)
            out.append(_by_operator(h, watch, version))
            h.stop()
            version = _next(version)
            out.append(_by_chart(h, helm, watch, version))
            for u in out[-2:]:
                print(
                    f"run {run + 1}: {u.how}: {u.seconds:.1f}s, at most {len(u.worst)} of "
                    f"{len(GPU_NODES)} GPU nodes without a serving plugin {u.worst}"
                )
            if run + 1 < runs:
                _start(h, version)
    finally:
        h.stop()
    return out


def _report(results: list[Upgrade]) -> None:
    titles = {
        "operator": "operator, a node at a time (OnDelete, --node-agent-max-unavailable 1)",
        "chart": "chart's own rollout (RollingUpdate, maxUnavailable 100%)",
    }
    print(f"\nDRA kubelet plugin upgrade on {len(GPU_NODES)} simulated GPU nodes:")
    for how, title in titles.items():
        mine = [u for u in results if u.how == how]
        seconds = statistics.median(u.seconds for u in mine)
        worst = max(len(u.worst) for u in mine)
        print(
            f"  {title}: median {seconds:.1f}s over {len(mine)} run(s), at most {worst} "
            f"of {len(GPU_NODES)} GPU nodes without a serving plugin"
        )


if __name__ == "__main__":
    raise SystemExit(main())
