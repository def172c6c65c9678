"""Benchmark: what the rollout's bookkeeping costs a shard's start, by its stacks.

Each stack of a healthy shard, when the operator starts, is seen by the
ServingStack watch, takes its first turn (``Rollout.begin``), finishes it
(``Rollout.finish``) and is seen again with the status written: the calls
``operator.handlers`` makes, with every stack up to date. Prints the time
per stack at three shard sizes: flat when the bookkeeping is linear in the
stacks, growing with them when it is not.

    python bench/bench_rollout_fleet.py [--stacks 1000 2500 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from modelplane.operator.rollout import Rollout  # noqa: E402
from modelplane.operator.status import Outcome  # noqa: E402
from modelplane.plan.rollout import Policy  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _body(i: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": f"t{i:05d}", "namespace": "fleet", "labels": {}},
        "spec": {
            "components": "Provided",
            "secrets": [{"type": "Kubeconfig", "name": "k", "key": "kubeconfig"}],
        },
        "status": status or {},
    }


def _start(n: int) -> float:
    """Seconds for n stacks' first turns, as a shard's start makes them."""
    rollout = Rollout(Policy())
    t0 = time.perf_counter()
    for i in range(n):
        body = _body(i)
        rollout.wakers[f"fleet/t{i:05d}"] = lambda: None
        rollout.observe(body)
        turn = rollout.begin(body, NOW)
        ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}
        status = rollout.finish(body, turn, Outcome(), ready, NOW)
        rollout.observe(_body(i, status))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stacks", type=int, nargs="+", default=[1000, 2500, 10000])
    args = parser.parse_args()
    for n in args.stacks:
        took = _start(n)
        print(f"{n} stacks: {took:.2f} s in all, {took / n * 1e6:.0f} us a stack")


if __name__ == "__main__":
    main()
