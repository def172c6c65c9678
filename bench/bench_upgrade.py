"""Benchmark: an upgrade of the whole Standard stack, next to a fresh install of it.

With the real operator process, helm, kube-apiservers and the simulated GPU
cluster (kwok), and fixture charts that keep their CRDs where the real
charts do (``upstream_crds=True``): each round installs the stack with every
chart one version back (``previous_version``) on a fresh simulated cluster,
timed from the ServingStack's creation to ``Ready=True``, then moves it to the
current defaults, timed from the spec edit to every release at its pin and
``Ready=True`` again. The upgrade applies each chart's crds/ before Helm
(``actions/chart_crds.py``), so its cost is in the figure.

    python bench/bench_upgrade.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.hubs import Harness, client_for, install_servingstack_crd  # noqa: E402
from tests.integration.simcluster import simulated  # noqa: E402
from tests.integration.substrate import Helm, serve_substrate  # noqa: E402
from tests.integration.test_upgrade_crds import STANDARD, _at, _charts, _previous_versions  # noqa: E402
from tests.testenv import TestEnv, find_binaries  # noqa: E402
from tests.waiting import wait_for  # noqa: E402


def _until(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check`` holds (``tests.waiting.wait_for``'s polling)."""
    start = time.perf_counter()
    wait_for(what, check, deadline=timeout)
    return time.perf_counter() - start


def _ready(h: Harness) -> bool:
    ready = [c for c in h.status().get("conditions", []) if c["type"] == "Ready"]
    return bool(ready) and ready[0]["status"] == "True"


def _at_pins(h: Harness) -> bool:
    charts = _charts(h)
    return all(charts.get(c.release_name) == _at(c, c.version) for c in STANDARD)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2, help="install and upgrade rounds")
    args = parser.parse_args()
    installs: list[float] = []
    upgrades: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mp-bench-upgrade-") as tmp_s:
        tmp = Path(tmp_s)
        hub_env = TestEnv(tmp / "hub").start()
        substrate_gen = serve_substrate(
            Helm(find_binaries()["helm"], tmp / "helm"),
            tmp / "substrate",
            workloads=True,
            upstream_crds=True,
        )
        substrate = next(substrate_gen)
        try:
            hub = client_for(hub_env, "bench")
            install_servingstack_crd(hub, hub_env, deadline=60)
            for i in range(args.rounds):
                with simulated(tmp / f"target-{i}") as target:
                    (tmp / f"op-{i}").mkdir()
                    h = Harness(hub, hub_env, target, substrate, tmp / f"op-{i}", f"bench-{i}")
                    try:
                        h.put_secret({"kubeconfig": h.kubeconfig_text()})
                        h.start("--resync", "300")
                        h.create(_previous_versions())
                        installs.append(_until("Ready", lambda: _ready(h), 900))  # noqa: B023
                        h.create({})
                        upgrades.append(
                            _until("upgraded", lambda: _at_pins(h) and _ready(h), 900)  # noqa: B023
                        )
                        print(
                            f"round {i + 1}: fresh install {installs[-1]:.1f} s, "
                            f"upgrade {upgrades[-1]:.1f} s"
                        )
                    finally:
                        h.stop()
        finally:
            substrate_gen.close()
            hub_env.stop()
    print(
        f"fresh install at the previous versions to Ready: median "
        f"{statistics.median(installs):.1f} s, max {max(installs):.1f} s over {len(installs)}"
    )
    print(
        f"upgrade to the current defaults to Ready: median "
        f"{statistics.median(upgrades):.1f} s, max {max(upgrades):.1f} s over {len(upgrades)}"
    )


if __name__ == "__main__":
    main()
